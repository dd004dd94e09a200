//! vrhost-control
