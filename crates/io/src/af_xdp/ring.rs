//! One AF_XDP ring: a power-of-two array of descriptors plus a producer
//! index, a consumer index and a flags word, all `mmap`ed from the socket
//! and shared with the kernel.
//!
//! ```text
//!            cached_cons            cached_prod
//!                 │  entries ready      │   free slots
//!   ─────────┬────▼───┬───┬───┬───┬────▼──┬───┬───────
//!    consumed│ d │ d │ d │ d │ d │       │   │ (mask wraps)
//!   ─────────┴────────┴───┴───┴───┴───────┴───┴───────
//! ```
//!
//! Indexes are free-running `u32`s (slot = index & mask), so all
//! arithmetic wraps. One side produces and the other consumes: we produce
//! on FILL and TX, and consume RX and COMPLETION. The producer publishes
//! with a Release store after writing descriptors; the consumer reads the
//! producer index with an Acquire load before reading them (and the same
//! in the other direction for freed slots), which is the protocol of the
//! kernel's `xsk_queue.h`.
#![allow(unsafe_code)]

use std::io;
use std::marker::PhantomData;
use std::mem::size_of;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::sys::{Mmap, Pod};

/// A mapped ring of `T` (`xdp_desc` for RX/TX, `u64` addresses for
/// FILL/COMPLETION).
pub(crate) struct Ring<T: Pod> {
    map: Mmap,
    producer: usize,
    consumer: usize,
    flags: usize,
    desc: usize,
    mask: u32,
    size: u32,
    /// Producer side: our next index. Consumer side: the last producer
    /// index we saw.
    cached_prod: u32,
    /// Consumer side: our next index. Producer side: the kernel's consumer
    /// index plus `size`, so `cached_cons - cached_prod` is the free room.
    cached_cons: u32,
    _t: PhantomData<T>,
}

impl<T: Pod> Ring<T> {
    /// Maps the ring of `size` entries described by `off` at page offset
    /// `pgoff` of socket `fd`. `producer_side` says whether we produce.
    pub(crate) fn map(
        fd: &OwnedFd,
        off: &libc::xdp_ring_offset,
        size: u32,
        pgoff: libc::off_t,
        producer_side: bool,
    ) -> io::Result<Ring<T>> {
        if !size.is_power_of_two() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "ring size must be a power of two",
            ));
        }
        let len = off.desc as usize + size as usize * size_of::<T>();
        for o in [off.producer, off.consumer, off.flags] {
            if o as usize + 4 > len || o & 3 != 0 {
                return Err(io::Error::other("kernel ring offsets outside the ring"));
            }
        }
        if (off.desc as usize) & (std::mem::align_of::<T>() - 1) != 0 {
            return Err(io::Error::other("kernel ring descriptors misaligned"));
        }
        let map = Mmap::shared(fd, len, pgoff)?;
        let mut r = Ring {
            map,
            producer: off.producer as usize,
            consumer: off.consumer as usize,
            flags: off.flags as usize,
            desc: off.desc as usize,
            mask: size - 1,
            size,
            cached_prod: 0,
            cached_cons: 0,
            _t: PhantomData,
        };
        r.cached_prod = r.word(r.producer).load(Ordering::Acquire);
        r.cached_cons = r.word(r.consumer).load(Ordering::Acquire);
        if producer_side {
            r.cached_cons = r.cached_cons.wrapping_add(size);
        }
        Ok(r)
    }

    /// A shared index or flags word.
    #[inline]
    fn word(&self, at: usize) -> &AtomicU32 {
        // SAFETY: `map` checked that `at + 4 <= len` and `at % 4 == 0`, and
        // the mapping is page aligned, so the word is in bounds and aligned.
        // The kernel accesses it only with word-sized (READ_ONCE /
        // smp_store_release) operations, so an atomic view is sound for as
        // long as the mapping (owned by `self`) lives.
        unsafe { AtomicU32::from_ptr(self.map.ptr().add(at).cast::<u32>()) }
    }

    #[inline]
    fn slot(&self, index: u32) -> *mut T {
        let i = (index & self.mask) as usize;
        // SAFETY: `i < size`, and `desc + size * size_of::<T>() <= len` by
        // construction, so the slot is inside the mapping; `desc` is aligned
        // for `T` (checked in `map`) and so is every slot.
        unsafe {
            self.map
                .ptr()
                .add(self.desc + i * size_of::<T>())
                .cast::<T>()
        }
    }

    /// True when the kernel asked to be woken (`XDP_RING_NEED_WAKEUP`).
    #[inline]
    pub(crate) fn needs_wakeup(&self) -> bool {
        self.word(self.flags).load(Ordering::Acquire) & libc::XDP_RING_NEED_WAKEUP != 0
    }

    // ---- producer side (FILL, TX) ----

    /// Free slots, at least `want` if the kernel has freed that many.
    #[inline]
    pub(crate) fn free(&mut self, want: u32) -> u32 {
        let free = self.cached_cons.wrapping_sub(self.cached_prod);
        if free >= want {
            return free;
        }
        self.cached_cons = self
            .word(self.consumer)
            .load(Ordering::Acquire)
            .wrapping_add(self.size);
        self.cached_cons.wrapping_sub(self.cached_prod)
    }

    /// Writes entry `i` past our producer index; `i` must be below what
    /// [`Self::free`] returned.
    #[inline]
    pub(crate) fn write(&mut self, i: u32, value: T) {
        let p = self.slot(self.cached_prod.wrapping_add(i));
        // SAFETY: the slot is in bounds and aligned (see `slot`), and it is
        // free: the caller stays below `free()`, so the kernel has consumed
        // it and will not read it until `submit` publishes it.
        unsafe { p.write(value) }
    }

    /// Publishes `n` written entries to the kernel.
    #[inline]
    pub(crate) fn submit(&mut self, n: u32) {
        self.cached_prod = self.cached_prod.wrapping_add(n);
        self.word(self.producer)
            .store(self.cached_prod, Ordering::Release);
    }

    /// Entries we produced that the kernel has not consumed yet.
    #[inline]
    pub(crate) fn outstanding(&self) -> u32 {
        self.cached_prod
            .wrapping_sub(self.word(self.consumer).load(Ordering::Acquire))
    }

    // ---- consumer side (RX, COMPLETION) ----

    /// Entries ready to read, at most `max`.
    #[inline]
    pub(crate) fn available(&mut self, max: u32) -> u32 {
        let mut n = self.cached_prod.wrapping_sub(self.cached_cons);
        if n == 0 {
            self.cached_prod = self.word(self.producer).load(Ordering::Acquire);
            n = self.cached_prod.wrapping_sub(self.cached_cons);
        }
        n.min(max).min(self.size)
    }

    /// Reads entry `i` past our consumer index; `i` must be below what
    /// [`Self::available`] returned.
    #[inline]
    pub(crate) fn read(&self, i: u32) -> T {
        let p = self.slot(self.cached_cons.wrapping_add(i));
        // SAFETY: in bounds and aligned (see `slot`); the kernel published
        // this entry (our Acquire load of its producer index ordered its
        // write before this read) and will not overwrite it before
        // `release` hands the slot back. `T: Pod`, so any bytes form a valid `T`.
        unsafe { p.read() }
    }

    /// Hands `n` read entries back to the kernel.
    #[inline]
    pub(crate) fn release(&mut self, n: u32) {
        self.cached_cons = self.cached_cons.wrapping_add(n);
        self.word(self.consumer)
            .store(self.cached_cons, Ordering::Release);
    }
}
