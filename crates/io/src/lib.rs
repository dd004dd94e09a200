//! vrhost-io
