//! vrhost-fib
