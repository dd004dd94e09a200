//! vrhost-dataplane
