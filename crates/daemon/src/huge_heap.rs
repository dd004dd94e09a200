//! A heap on transparent huge pages for the processes that forward.
//!
//! With a thousand VRs taking turns in every burst, each frame reads its own
//! VR's state: the FIB's index and entries, the VR's line, a gateway slot, a
//! neighbor entry, two interfaces' counters, its fair-share record. Spread
//! over 4 KiB pages that is thousands of pages, far more than the TLB holds,
//! so most of those reads also walk the page tables. glibc's malloc backs its
//! heap with transparent huge pages (`madvise(MADV_HUGEPAGE)` on what it
//! maps) when the `glibc.malloc.hugetlb=1` tunable is set and the kernel's
//! transparent huge pages are in `madvise` mode; tunables are read once, when
//! a process starts, so a process that wants them and lacks them starts
//! itself again with them ([`reexec`]). (In `always` mode every mapping gets
//! them without asking, and nothing is done.)
//!
//! glibc 2.35 and 2.36 (Debian 12) read the mode into a buffer they do not
//! terminate, and compare it as a string: whether the tunable takes depends
//! on one stale byte of the stack, which moves with the size of the
//! environment (under `setarch -R`, of seven environment sizes tried, two
//! took). So a process started again checks that glibc advises what it maps
//! (`glibc_advises`) and, if it does not, starts again with
//! [`PAD`] one byte longer, at most 32 times (a few milliseconds
//! each, before any thread starts); later glibc versions take the tunable
//! on the first start.
//!
//! `vrhost bench --vrs 1000 --routes-per-vr 1000` forwarded 13% more with it
//! (median of five alternated pairs) and one VR with the same routes the
//! same (docs/scaling.md). Set `VRHOST_HUGE_HEAP=off` to keep 4 KiB pages;
//! nothing changes either where the kernel's transparent huge pages are
//! `never`.

use std::ffi::OsString;

/// The environment variable a process started again carries: its length
/// moves the stack glibc reads the mode on, and its presence says that
/// the tunable is this module's to check.
pub const PAD: &str = "VRHOST_HUGE_HEAP_PAD";

/// Starts with the tunable, each with [`PAD`] one byte longer, before a
/// process goes on with 4 KiB pages: two sizes of seven took here, so 32
/// starts all miss with a chance of about (5/7)^32, 2e-5.
const TRIES: usize = 32;

/// What [`reexec`] found in this process: glibc took the tunable, or not
/// (after the last start), for [`report`] to say once logging is up. Unset
/// where it did not check: a process not started again by it, such as a
/// child that inherited [`PAD`].
static CHECKED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// The tunable.
const TUNABLE: &str = "glibc.malloc.hugetlb=1";

/// What decides whether this process asks glibc for huge pages, read once
/// at start.
struct Wants {
    /// `VRHOST_HUGE_HEAP=off`.
    off: bool,
    /// `GLIBC_TUNABLES`, empty when unset.
    current: String,
    /// The kernel's transparent huge pages are in `madvise` mode
    /// (`transparent_hugepage/enabled` reads `always [madvise] never`): the
    /// only mode that needs the tunable.
    madvise: bool,
}

impl Wants {
    /// This process's environment and the kernel's mode.
    fn read() -> Wants {
        Wants::new(
            std::env::var_os("VRHOST_HUGE_HEAP").as_deref(),
            &std::env::var("GLIBC_TUNABLES").unwrap_or_default(),
            &std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
                .unwrap_or_default(),
        )
    }

    fn new(switch: Option<&std::ffi::OsStr>, current: &str, thp: &str) -> Wants {
        Wants {
            off: switch.is_some_and(|v| v == "off"),
            current: current.to_string(),
            madvise: thp.contains("[madvise]"),
        }
    }

    /// The `GLIBC_TUNABLES` value to start again with, where the
    /// environment lacks the tunable and may have it: the current value
    /// with the tunable appended. `None` when the tunable is set already
    /// (to any value), when turned off, or outside `madvise` mode.
    fn tunables(&self) -> Option<OsString> {
        if self.off || self.current.contains("glibc.malloc.hugetlb") || !self.madvise {
            return None;
        }
        Some(if self.current.is_empty() {
            TUNABLE.into()
        } else {
            format!("{}:{TUNABLE}", self.current).into()
        })
    }

    /// Whether this process carries the tunable [`reexec`] gives and still
    /// wants it of glibc (not turned off since, `madvise` mode): only then
    /// is glibc's taking it checked.
    fn carries(&self) -> bool {
        !self.off && self.madvise && self.current.contains(TUNABLE)
    }
}

/// Starts this program again, with the same arguments and the tunable,
/// where the environment lacks it and may have it; started again so, checks that glibc took the tunable, and
/// starts once more with [`PAD`] one byte longer where it did not (see the
/// module documentation). Returns only once there is nothing more to do or
/// nothing that can be done (the process then goes on with 4 KiB pages, and
/// says why at debug level). Call it first thing in `main`, before any
/// thread starts.
pub fn reexec() {
    use std::os::unix::process::CommandExt as _;
    let wants = Wants::read();
    let (tunables, pad) = match (wants.tunables(), std::env::var_os(PAD)) {
        (Some(tunables), None) => (tunables, 0),
        // Started again, yet the tunable is gone (glibc drops the
        // environment's tunables for a binary with file capabilities):
        // starting again would not bring it back.
        (Some(_), Some(_)) => return,
        // Started again with the tunable: did glibc take it? Unknown (no
        // smaps to read) counts as taken: another start would not know
        // better.
        (None, Some(pad)) if wants.carries() => {
            let advises = glibc_advises().unwrap_or(true);
            match next_pad(pad.len(), advises) {
                Some(pad) => (wants.current.into(), pad),
                None => {
                    let _ = CHECKED.set(advises);
                    return;
                }
            }
        }
        _ => return,
    };
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let err = std::process::Command::new(&exe)
        .args(std::env::args_os().skip(1))
        .env("GLIBC_TUNABLES", tunables)
        .env(PAD, "x".repeat(pad))
        .exec();
    tracing::debug!(
        "{}: not restarted with huge pages for the heap: {err}",
        exe.display()
    );
}

/// Says, once logging is up, what [`reexec`] found in this process: at
/// info level that the heap is on huge pages and at which start, at warn
/// level that glibc never took the tunable. Nothing where it did not check.
pub fn report() {
    let Some(&advises) = CHECKED.get() else {
        return;
    };
    let starts = std::env::var_os(PAD).map_or(1, |pad| pad.len() + 1);
    if advises {
        tracing::info!("heap on transparent huge pages (glibc.malloc.hugetlb=1, start {starts})");
    } else {
        tracing::warn!(
            "glibc did not take glibc.malloc.hugetlb=1 in {starts} starts: the heap is on 4 KiB \
             pages (docs/operations.md)"
        );
    }
}

/// The length of [`PAD`] to start again with, for a process started with
/// one of `pad` bytes in which glibc took the tunable (`advises`) or not;
/// `None` to go on.
fn next_pad(pad: usize, advises: bool) -> Option<usize> {
    (!advises && pad + 1 < TRIES).then_some(pad + 1)
}

/// Whether glibc advises huge pages for what it maps, `None` where
/// `/proc/self/smaps` cannot be read or names no flags: a block past its
/// mmap threshold (128 KiB at start) is a mapping of its own, which it
/// advises (`hg` among the mapping's flags) when it took the tunable, if
/// the block spans a huge page (2 MiB; hence 4 MiB). Called once a
/// process, before anything else allocates much: freeing the block raises
/// glibc's threshold to its size.
fn glibc_advises() -> Option<bool> {
    let block = std::hint::black_box(vec![0u8; 4 << 20]);
    let at = block.as_ptr() as usize;
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    smaps.contains("VmFlags:").then(|| advised(&smaps, at))
}

/// Whether the mapping of `smaps` (the text of `/proc/PID/smaps`) that
/// holds address `at` has the `hg` flag (`madvise(MADV_HUGEPAGE)`).
fn advised(smaps: &str, at: usize) -> bool {
    let mut holds = false;
    for line in smaps.lines() {
        let range = line.split_once(' ').map_or(line, |(first, _)| first);
        if let Some((start, end)) = range.split_once('-') {
            if let (Ok(start), Ok(end)) = (
                usize::from_str_radix(start, 16),
                usize::from_str_radix(end, 16),
            ) {
                holds = (start..end).contains(&at);
                continue;
            }
        }
        if let Some(flags) = line.strip_prefix("VmFlags:").filter(|_| holds) {
            return flags.split_whitespace().any(|f| f == "hg");
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::{advised, next_pad, Wants};
    use std::ffi::{OsStr, OsString};

    const MADVISE: &str = "always [madvise] never\n";

    fn tunables(switch: Option<&OsStr>, current: &str, thp: &str) -> Option<OsString> {
        Wants::new(switch, current, thp).tunables()
    }

    #[test]
    fn the_tunable_is_appended_once() {
        assert_eq!(
            tunables(None, "", MADVISE),
            Some(OsString::from("glibc.malloc.hugetlb=1"))
        );
        assert_eq!(
            tunables(None, "glibc.malloc.tcache_count=8", MADVISE),
            Some(OsString::from(
                "glibc.malloc.tcache_count=8:glibc.malloc.hugetlb=1"
            ))
        );
        assert_eq!(tunables(None, "glibc.malloc.hugetlb=0", MADVISE), None);
    }

    #[test]
    fn off_and_never_keep_small_pages() {
        assert_eq!(tunables(Some(OsStr::new("off")), "", MADVISE), None);
        assert_eq!(tunables(None, "", "always madvise [never]"), None);
        // Every mapping gets huge pages in `always` mode: nothing to ask.
        assert_eq!(tunables(None, "", "[always] madvise never"), None);
        assert_eq!(tunables(None, "", ""), None);
    }

    #[test]
    fn only_a_process_carrying_the_tunable_is_checked() {
        let carries = |switch, current, thp| Wants::new(switch, current, thp).carries();
        assert!(carries(None, "glibc.malloc.hugetlb=1", MADVISE));
        assert!(carries(
            None,
            "glibc.malloc.tcache_count=8:glibc.malloc.hugetlb=1",
            MADVISE
        ));
        assert!(
            !carries(None, "", MADVISE),
            "no tunable: glibc was not asked"
        );
        assert!(!carries(None, "glibc.malloc.hugetlb=0", MADVISE));
        assert!(!carries(
            Some(OsStr::new("off")),
            "glibc.malloc.hugetlb=1",
            MADVISE
        ));
        assert!(!carries(
            None,
            "glibc.malloc.hugetlb=1",
            "[always] madvise never"
        ));
    }

    #[test]
    fn the_mapping_holding_an_address_is_found_with_its_flags() {
        let smaps = "\
555555554000-555555710000 r--p 00000000 fe:01 1234 /usr/bin/x
Size:               1776 kB
VmFlags: rd mr mw me
7ffff0021000-7ffff4000000 rw-p 00000000 00:00 0
Size:              65404 kB
THPeligible:           1
VmFlags: rd wr mr mw me ac hg
7ffff4000000-7ffff4400000 rw-p 00000000 00:00 0
VmFlags: rd wr mr mw me ac
";
        assert!(advised(smaps, 0x7fff_f002_1000));
        assert!(advised(smaps, 0x7fff_f3ff_ffff));
        assert!(
            !advised(smaps, 0x7fff_f400_0000),
            "the next mapping is not advised"
        );
        assert!(!advised(smaps, 0x5555_5555_4000));
        assert!(!advised(smaps, 0x1000), "no mapping holds it");
    }

    #[test]
    fn a_start_the_tunable_missed_is_retried_with_a_longer_pad() {
        assert_eq!(next_pad(0, true), None);
        assert_eq!(next_pad(0, false), Some(1));
        assert_eq!(next_pad(7, false), Some(8));
        assert_eq!(
            next_pad(super::TRIES - 1, false),
            None,
            "at most TRIES starts"
        );
    }
}
