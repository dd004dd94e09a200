//! The memory target as a test: an idle VR (two interfaces,
//! connected routes only) costs at most 16 KB of resident memory with one
//! worker, measured as `vrhost vr-memory` measures it. Alone in its binary,
//! so that no other test's allocations move the process's resident set.
//!
//! The test profile measures less than a release build (14,442 B against
//! 15,290 B for `vrhost-tools vr-memory --vrs 1000` on 2026-12-07), so this
//! catches a VR's state growing by a kilobyte or more; docs/scaling.md
//! quotes the release figure.

#[test]
fn an_idle_vr_costs_at_most_16_kb() {
    let bytes = vrhost_tools::sweep::idle_vr_bytes(1000).expect("resident memory is readable");
    assert!(bytes <= 16_000.0, "an idle VR costs {bytes:.0} bytes");
}
