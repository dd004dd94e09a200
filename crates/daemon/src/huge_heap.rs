//! A heap on transparent huge pages for the processes that forward.
//!
//! With a thousand VRs taking turns in every burst, each frame reads its own
//! VR's state: the FIB's index and entries, the VR's line, a gateway slot, a
//! neighbor entry, two interfaces' counters, its fair-share record. Spread
//! over 4 KiB pages that is thousands of pages, far more than the TLB holds,
//! so most of those reads also walk the page tables. glibc's malloc backs its
//! heap with transparent huge pages (`madvise(MADV_HUGEPAGE)` on what it
//! maps) when the `glibc.malloc.hugetlb=1` tunable is set; tunables are read
//! once, when a process starts, so a process that wants them and lacks them
//! starts itself again with them ([`reexec`]).
//!
//! `vrhost bench --vrs 1000 --routes-per-vr 1000` forwarded 13% more with it
//! (median of five alternated pairs) and one VR with the same routes the
//! same (docs/scaling.md). Set `VRHOST_HUGE_HEAP=off` to keep 4 KiB pages;
//! nothing changes either where the kernel's transparent huge pages are
//! `never`.

use std::ffi::OsString;

/// The tunable.
const TUNABLE: &str = "glibc.malloc.hugetlb=1";

/// The `GLIBC_TUNABLES` value this process should start with, if its
/// environment lacks the tunable and it may have it: the current value with
/// the tunable appended. `None` when it is set already, when
/// `VRHOST_HUGE_HEAP=off`, or when the kernel's transparent huge pages are
/// `never` (or unknown).
pub fn wanted() -> Option<OsString> {
    let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").ok()?;
    tunables(
        std::env::var_os("VRHOST_HUGE_HEAP").as_deref(),
        &std::env::var("GLIBC_TUNABLES").unwrap_or_default(),
        &thp,
    )
}

/// [`wanted`] from `VRHOST_HUGE_HEAP`, `GLIBC_TUNABLES` and the kernel's
/// `transparent_hugepage/enabled` (`always [madvise] never`, the mode in
/// brackets).
fn tunables(switch: Option<&std::ffi::OsStr>, current: &str, thp: &str) -> Option<OsString> {
    if switch.is_some_and(|v| v == "off")
        || current.contains("glibc.malloc.hugetlb")
        || !(thp.contains("[always]") || thp.contains("[madvise]"))
    {
        return None;
    }
    Some(if current.is_empty() {
        TUNABLE.into()
    } else {
        format!("{current}:{TUNABLE}").into()
    })
}

/// Starts this program again, with the same arguments and the tunable, if
/// [`wanted`]; returns only if it need not or cannot (then the process goes
/// on with 4 KiB pages, and says why at debug level). Call it first thing in
/// `main`, before any thread starts.
pub fn reexec() {
    use std::os::unix::process::CommandExt as _;
    let Some(tunables) = wanted() else {
        return;
    };
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let err = std::process::Command::new(&exe)
        .args(std::env::args_os().skip(1))
        .env("GLIBC_TUNABLES", tunables)
        .exec();
    tracing::debug!(
        "{}: not restarted with huge pages for the heap: {err}",
        exe.display()
    );
}

#[cfg(test)]
mod tests {
    use super::tunables;
    use std::ffi::{OsStr, OsString};

    const MADVISE: &str = "always [madvise] never\n";

    #[test]
    fn the_tunable_is_appended_once() {
        assert_eq!(
            tunables(None, "", MADVISE),
            Some(OsString::from("glibc.malloc.hugetlb=1"))
        );
        assert_eq!(
            tunables(
                None,
                "glibc.malloc.tcache_count=8",
                "[always] madvise never"
            ),
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
        assert_eq!(tunables(None, "", ""), None);
    }
}
