//! The lock on the control side's table writer, shared by the runtime, the
//! API backend and live captures.

use std::sync::{Mutex, MutexGuard};

use vrhost_dataplane::TableWriter;

/// Locks the table writer. A poisoned lock means a thread panicked halfway
/// through a change to the working tables; going on could publish that half
/// change, so this panics too (and `vrhost run`, whose panics abort, stops).
pub fn lock(writer: &Mutex<TableWriter>) -> MutexGuard<'_, TableWriter> {
    match writer.lock() {
        Ok(guard) => guard,
        Err(_) => panic!(
            "the control lock is poisoned: a thread panicked while changing the tables; \
             refusing to publish a half-applied change"
        ),
    }
}
