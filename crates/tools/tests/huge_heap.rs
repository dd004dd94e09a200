//! The tools that forward run on a heap of transparent huge pages however
//! large their environment is (`vrhost_daemon::huge_heap`: glibc 2.36
//! takes its tunable or not depending on a stale stack byte that moves with
//! the environment's size, and the process starts again until it does).

use std::process::Command;

const TOOLS: &str = env!("CARGO_BIN_EXE_vrhost-tools");

/// A short `vrhost-tools bench` with `set` in its environment and
/// `GLIBC_TUNABLES` and the module's variables otherwise absent; its
/// stderr, once it succeeded.
fn bench(set: &[(&str, String)]) -> String {
    let mut cmd = Command::new(TOOLS);
    cmd.args([
        "bench",
        "--vrs",
        "1",
        "--routes-per-vr",
        "100",
        "--seconds",
        "0.2",
    ])
    .args(["--workers", "1", "--json"]);
    for var in [
        "GLIBC_TUNABLES",
        "VRHOST_HUGE_HEAP",
        "VRHOST_HUGE_HEAP_PAD",
        "VRHOST_LOG",
    ] {
        cmd.env_remove(var);
    }
    let out = cmd
        .envs(set.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("run vrhost-tools bench");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    stderr
}

#[test]
fn the_heap_is_on_huge_pages_whatever_the_environment() {
    let mode =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    let asks = mode.contains("[madvise]");
    for pad in 0..8 {
        let stderr = bench(&[("VRHOST_TEST_ENV_SIZE", "x".repeat(pad))]);
        // Only the `madvise` mode needs the tunable (and says so); in
        // `always` and `never` the process does not start again.
        assert_eq!(
            stderr.contains("heap on transparent huge pages"),
            asks,
            "environment of {pad} more bytes, THP mode {mode:?}: {stderr}"
        );
        assert!(!stderr.contains("did not take"), "{stderr}");
    }
}

#[test]
fn off_keeps_small_pages_even_with_the_pad_inherited() {
    // A process that inherited the pad and the tunable from a parent started
    // again, but whose own environment turns huge pages off: it starts once,
    // quietly.
    let stderr = bench(&[
        ("VRHOST_HUGE_HEAP", "off".into()),
        ("VRHOST_HUGE_HEAP_PAD", "xx".into()),
        ("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1".into()),
    ]);
    assert!(
        !stderr.contains("huge pages") && !stderr.contains("did not take"),
        "{stderr}"
    );
}

#[test]
fn a_pad_without_the_tunable_is_not_a_loop() {
    // Started again, but the tunable is gone (glibc drops it for a binary
    // with file capabilities): the process goes on, with no second start
    // and nothing to report.
    let stderr = bench(&[("VRHOST_HUGE_HEAP_PAD", "x".into())]);
    assert!(!stderr.contains("huge pages"), "{stderr}");
}
