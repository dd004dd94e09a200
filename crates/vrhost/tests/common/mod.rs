//! Shell helpers shared by the end-to-end tests: run a command, read its
//! output, run it in a namespace, stop a daemon.
#![allow(dead_code)]

use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

/// Runs `cmd ARGS` and returns what it did.
pub fn run(cmd: &str, args: &[&str]) -> Output {
    Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {cmd}: {e}"))
}

/// Standard output and error, as text.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs `cmd ARGS` inside network namespace `ns`.
pub fn in_ns(ns: &str, cmd: &str, args: &[&str]) -> Output {
    let mut all = vec!["netns", "exec", ns, cmd];
    all.extend_from_slice(args);
    run("ip", &all)
}

/// Sends a signal by name, through the shell's built-in `kill` (minimal
/// images lack the `kill` binary).
pub fn signal(child: &Child, name: &str) {
    run("sh", &["-c", &format!("kill -{name} {}", child.id())]);
}

/// SIGTERM, up to 3 s to exit (vrhost detaches its XDP programs on the
/// way out), then SIGKILL; always reaped.
pub fn stop(child: &mut Child) {
    if let Ok(None) = child.try_wait() {
        signal(child, "TERM");
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
    }
    let _ = child.wait();
}
