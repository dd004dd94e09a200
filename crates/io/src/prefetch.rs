//! The CPU's prefetch instruction, for the engine's FIB lookups.
//!
//! The FIB never executes machine-specific instructions itself (it has no
//! `unsafe`); the runtime hands this function to each worker
//! ([`vrhost_dataplane::Worker::set_prefetch`]), which hands it to
//! `vrhost_fib::FibSnapshot::lookup_batch_prefetch`, as it hands over a
//! clock ([`crate::clock`]).
#![allow(unsafe_code)]

/// Asks the CPU to bring the cache line of each of `lines` into its L1 data
/// cache (`PREFETCHT0`), without waiting for any of them: a hint, so any
/// address will do, a dangling or null one included. A no-op off x86_64.
pub fn prefetch(lines: &[*const u8]) {
    for &line in lines {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: PREFETCHT0 reads nothing into a register and writes
        // nothing: the CPU only starts a cache fill, and drops the hint
        // without a fault for an unmapped or invalid address (Intel SDM
        // vol. 2B, "PREFETCHh"; AMD APM vol. 3, "PREFETCHlevel"). SSE, which
        // it needs, is part of every x86_64 CPU.
        unsafe {
            core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(line.cast());
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = line;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_address_is_only_a_hint() {
        let data = [7u64; 64];
        let lines: Vec<*const u8> = vec![
            data.as_ptr().cast(),
            data.as_ptr().wrapping_add(63).cast(),
            core::ptr::null(),
            usize::MAX as *const u8,
            0xdead_0000 as *const u8,
        ];
        prefetch(&lines);
        prefetch(&[]);
        assert_eq!(data, [7u64; 64], "a prefetch changes no memory");
    }
}
