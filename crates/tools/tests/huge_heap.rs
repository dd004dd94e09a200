//! The tools that forward run on a heap of transparent huge pages however
//! large their environment is (`vrhost_daemon::huge_heap`: glibc 2.36
//! takes its tunable or not depending on a stale stack byte that moves with
//! the environment's size, and the process starts again until it does).

use std::process::Command;

const TOOLS: &str = env!("CARGO_BIN_EXE_vrhost-tools");

#[test]
fn the_heap_is_on_huge_pages_whatever_the_environment() {
    let mode =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    let asks = mode.contains("[madvise]");
    for pad in 0..8 {
        let out = Command::new(TOOLS)
            .args([
                "bench",
                "--vrs",
                "1",
                "--routes-per-vr",
                "100",
                "--seconds",
                "0.2",
            ])
            .args(["--workers", "1", "--json"])
            .env("VRHOST_TEST_ENV_SIZE", "x".repeat(pad))
            .env_remove("VRHOST_HUGE_HEAP")
            .env_remove("VRHOST_HUGE_HEAP_PAD")
            .env_remove("GLIBC_TUNABLES")
            .output()
            .expect("run vrhost-tools bench");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
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
    // A process that inherited the pad from a parent started again, but
    // whose own environment turns huge pages off: it starts once, quietly.
    let out = Command::new(TOOLS)
        .args([
            "bench",
            "--vrs",
            "1",
            "--routes-per-vr",
            "100",
            "--seconds",
            "0.2",
        ])
        .args(["--workers", "1", "--json"])
        .env("VRHOST_HUGE_HEAP", "off")
        .env("VRHOST_HUGE_HEAP_PAD", "xx")
        .env_remove("GLIBC_TUNABLES")
        .output()
        .expect("run vrhost-tools bench");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        !stderr.contains("huge pages") && !stderr.contains("did not take"),
        "{stderr}"
    );
}
