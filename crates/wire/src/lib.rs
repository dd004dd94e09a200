//! vrhost-wire
