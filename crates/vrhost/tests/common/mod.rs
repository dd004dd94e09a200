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

/// Fails (never skips) unless the test runs as root; `test` is its
/// `--test` name, `why` what it needs root for.
pub fn require_root(test: &str, why: &str) {
    let status = std::fs::read_to_string("/proc/self/status").expect("reading /proc/self/status");
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("?");
    assert_eq!(
        euid, "0",
        "the {test} tests need root ({why}); run them as root, e.g. \
         `sudo -E cargo test -p vrhost --test {test}`"
    );
}

/// Fails unless every tool is on `PATH` (or in /usr/sbin, /sbin); the
/// message names the Debian `packages` that bring them.
pub fn require_tools(tools: &[&str], packages: &str) {
    let path = std::env::var("PATH").unwrap_or_default();
    let dirs: Vec<std::path::PathBuf> = path
        .split(':')
        .map(std::path::PathBuf::from)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .collect();
    let missing: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|t| !dirs.iter().any(|d| d.join(t).is_file()))
        .collect();
    assert!(
        missing.is_empty(),
        "missing tools {missing:?}: install {packages}"
    );
}

/// The process ids of the TAP keepers a vrhost log names.
pub fn keeper_pids(log: &str) -> Vec<u32> {
    // Without the terminal colours the log may be written with.
    let mut plain = String::with_capacity(log.len());
    let mut in_escape = false;
    for c in log.chars() {
        match (in_escape, c) {
            (false, '\u{1b}') => in_escape = true,
            (true, 'm') => in_escape = false,
            (true, _) => {}
            (false, c) => plain.push(c),
        }
    }
    plain
        .lines()
        .filter(|l| l.contains("TAP keeper holds the mirrors"))
        .filter_map(|l| {
            let at = l.find("pid=")? + 4;
            let digits: String = l[at..].chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .collect()
}
