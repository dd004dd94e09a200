//! What one run of `vrhost run` leaves for the next, so that a restart (a
//! `SIGTERM`, an upgrade to a new binary, a crash and its supervisor) costs
//! the tenants no session and about a second of forwarding.
//!
//! ```text
//!   run 1 ──────────────────────────────┐ SIGTERM / crash
//!     TAP mirrors (persistent) ◀─ hold ─┤ keeper (`vrhost keep-taps`, own process group):
//!     runtime_dir/mirrors.json          │   holds a disabled queue of every TAP: carrier stays up,
//!     runtime_dir/fpm-ROUTER.json       │   sees run 1's pipe close, waits ≤ tap_hold
//!                                       ▼
//!   run 2: adopts the TAPs by name (MAC, MTU, queues = workers), cleans up
//!          the mirrors run 1 made that the config lost, reads the namespaces'
//!          tables and the FPM snapshot into the FIB, then forwards;
//!          run 1's keeper sees run 2's queues and exits; run 2 starts its own.
//! ```
//!
//! * [`RuntimeDir`]: the directory (`[dataplane] runtime_dir`), locked by
//!   one instance at a time, with the list of mirrors ([`MirrorRecord`]) and
//!   each router's FPM routes.
//! * [`Keeper`] / [`keeper_main`]: the process that holds the TAPs' carrier.
//!   Without it a TAP with no reader loses its carrier, and FRR's zebra takes
//!   the interface down and bgpd drops its sessions at once (measured: FRR
//!   8.4 resets an eBGP session within the same second).
//!
//! What still goes: the VR's interface or the VR deleted (through the API
//! or a reload) deletes its TAPs; a mirror the next config no longer has is
//! deleted at that start. Namespaces are never deleted: they are the
//! tenants'.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Write as _};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use vrhost_cp::{Hop, IpPrefix, Link, RouteTarget, TapProbe};

// ------------------------------------------------------------ runtime dir --

/// One TAP mirror a run made, as the next run finds it in `mirrors.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MirrorRecord {
    /// The namespace it is in.
    pub netns: String,
    /// The TAP's name (the VR interface's).
    pub tap: String,
    /// The addresses the config put on it (`ADDR/LEN`): the next run takes
    /// off those its config dropped, and leaves the tenant's own alone.
    pub addresses: Vec<String>,
}

impl MirrorRecord {
    /// The configured addresses that parse.
    pub fn addrs(&self) -> Vec<(IpAddr, u8)> {
        self.addresses
            .iter()
            .filter_map(|a| {
                let (addr, len) = a.split_once('/')?;
                Some((addr.parse().ok()?, len.parse().ok()?))
            })
            .collect()
    }
}

#[derive(Default, Serialize, Deserialize)]
struct MirrorFile {
    mirrors: Vec<MirrorRecord>,
}

/// `[dataplane] runtime_dir`, locked for as long as this value lives: a
/// second vrhost given the same directory refuses to start rather than
/// take over (and delete) the first one's mirrors.
pub struct RuntimeDir {
    path: PathBuf,
    _lock: File,
}

impl RuntimeDir {
    /// Creates (mode 0700) or opens `path` and takes its lock.
    pub fn open(path: &Path) -> Result<RuntimeDir> {
        use std::os::unix::fs::DirBuilderExt as _;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(path)
            .with_context(|| format!("runtime_dir {}", path.display()))?;
        let lock_path = path.join("lock");
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .with_context(|| format!("runtime_dir: {}", lock_path.display()))?;
        if rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
            bail!(
                "runtime_dir {}: another vrhost holds it; give each instance its own \
                 ([dataplane] runtime_dir)",
                path.display()
            );
        }
        Ok(RuntimeDir {
            path: path.to_path_buf(),
            _lock: lock,
        })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The mirrors the last run made; none when it left no list. A list
    /// that does not parse is logged and taken as empty (nothing is
    /// deleted on its word).
    pub fn mirrors(&self) -> Vec<MirrorRecord> {
        let path = self.path.join("mirrors.json");
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
            Err(e) => {
                tracing::warn!(path = %path.display(), "cannot read the last run's mirrors: {e}");
                return Vec::new();
            }
        };
        match serde_json::from_str::<MirrorFile>(&text) {
            Ok(f) => f.mirrors,
            Err(e) => {
                tracing::warn!(path = %path.display(), "the last run's mirror list does not parse ({e}); ignored");
                Vec::new()
            }
        }
    }

    /// Writes the list of mirrors (whole, through a rename).
    pub fn save_mirrors(&self, mirrors: &[MirrorRecord]) -> Result<()> {
        let f = MirrorFile {
            mirrors: mirrors.to_vec(),
        };
        self.write("mirrors.json", &serde_json::to_vec_pretty(&f)?)
    }

    /// The FPM routes router `router` held when the last run stopped.
    pub fn fpm_routes(&self, router: &str) -> Vec<(IpPrefix, RouteTarget)> {
        let path = self.path.join(format!("fpm-{router}.json"));
        let Ok(text) = std::fs::read_to_string(&path) else {
            return Vec::new();
        };
        match serde_json::from_str::<Vec<SavedRoute>>(&text) {
            Ok(v) => v.into_iter().filter_map(SavedRoute::into_route).collect(),
            Err(e) => {
                tracing::warn!(path = %path.display(), "FPM snapshot does not parse ({e}); ignored");
                Vec::new()
            }
        }
    }

    /// Writes router `router`'s FPM routes for the next run.
    pub fn save_fpm_routes(&self, router: &str, routes: &[(IpPrefix, RouteTarget)]) -> Result<()> {
        let v: Vec<SavedRoute> = routes.iter().filter_map(SavedRoute::of).collect();
        self.write(&format!("fpm-{router}.json"), &serde_json::to_vec(&v)?)
    }

    fn write(&self, name: &str, bytes: &[u8]) -> Result<()> {
        let path = self.path.join(name);
        let tmp = self.path.join(format!(".{name}.tmp"));
        let mut f = File::create(&tmp).with_context(|| format!("{}", tmp.display()))?;
        f.write_all(bytes)
            .and_then(|()| f.sync_all())
            .with_context(|| format!("{}", tmp.display()))?;
        std::fs::rename(&tmp, &path).with_context(|| format!("{}", path.display()))?;
        Ok(())
    }
}

/// One FPM route in a snapshot.
#[derive(Serialize, Deserialize)]
struct SavedRoute {
    prefix: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    via: Vec<(IpAddr, u16)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
}

impl SavedRoute {
    fn of((p, t): &(IpPrefix, RouteTarget)) -> Option<SavedRoute> {
        let (via, kind) = match t {
            RouteTarget::Via { gw, .. } => (vec![(*gw, 1)], None),
            RouteTarget::Multipath(hops) => (hops.iter().map(|h| (h.gw, h.weight)).collect(), None),
            RouteTarget::Blackhole => (Vec::new(), Some("blackhole")),
            RouteTarget::Unreachable => (Vec::new(), Some("unreachable")),
            RouteTarget::Prohibit => (Vec::new(), Some("prohibit")),
            RouteTarget::Connected { .. } => return None,
        };
        Some(SavedRoute {
            prefix: p.to_string(),
            via,
            kind: kind.map(str::to_string),
        })
    }

    fn into_route(self) -> Option<(IpPrefix, RouteTarget)> {
        let prefix: IpPrefix = self.prefix.parse().ok()?;
        let target = match (self.kind.as_deref(), self.via.as_slice()) {
            (Some("blackhole"), _) => RouteTarget::Blackhole,
            (Some("unreachable"), _) => RouteTarget::Unreachable,
            (Some("prohibit"), _) => RouteTarget::Prohibit,
            (None, [(gw, _)]) => RouteTarget::Via {
                gw: *gw,
                ifname: None,
            },
            (None, hops) if hops.len() > 1 => RouteTarget::Multipath(
                hops.iter()
                    .map(|&(gw, weight)| Hop {
                        gw,
                        ifname: None,
                        weight,
                    })
                    .collect(),
            ),
            _ => return None,
        };
        Some((prefix, target))
    }
}

// ----------------------------------------------------------------- keeper --

static KEEPER_PROGRAM: OnceLock<PathBuf> = OnceLock::new();

/// Names the program whose `keep-taps` subcommand is the keeper (the
/// `vrhost` binary, `std::env::current_exe()`). Without it (a daemon run
/// inside a test binary) no keeper is started, and a restart shows the
/// tenants a link down.
pub fn use_keeper(program: PathBuf) {
    let _ = KEEPER_PROGRAM.set(program);
}

/// A running keeper. Dropping it (or this process ending, however it ends)
/// closes its pipe: from then on it holds the TAPs for at most its hold
/// time, and lets each go as soon as a new vrhost reads it.
pub struct Keeper {
    child: Child,
    _pipe: ChildStdin,
}

impl Keeper {
    /// Starts `vrhost keep-taps` on `taps` ((namespace, TAP)) and waits
    /// until it holds them. `None` when no keeper program is set.
    pub fn spawn(taps: &[(String, String)], hold: Duration) -> Result<Option<Keeper>> {
        let Some(program) = KEEPER_PROGRAM.get() else {
            tracing::debug!(
                "no keeper program: the TAP mirrors lose their carrier when vrhost stops"
            );
            return Ok(None);
        };
        if taps.is_empty() || hold.is_zero() {
            return Ok(None);
        }
        use std::os::unix::process::CommandExt as _;
        let mut cmd = Command::new(program);
        cmd.arg("keep-taps")
            .arg("--hold-ms")
            .arg(hold.as_millis().to_string())
            .args(taps.iter().map(|(ns, tap)| format!("{ns}/{tap}")))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            // Its own process group: a Ctrl-C meant for `vrhost run` in a
            // terminal must not take the keeper with it.
            .process_group(0);
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting the TAP keeper {}", program.display()))?;
        let pipe = child.stdin.take().context("keeper stdin")?;
        let out = child.stdout.take().context("keeper stdout")?;
        let mut line = String::new();
        BufReader::new(out)
            .read_line(&mut line)
            .context("waiting for the TAP keeper")?;
        if line.trim() != "ready" {
            let _ = child.kill();
            let _ = child.wait();
            bail!("the TAP keeper did not start (it said {line:?})");
        }
        tracing::info!(
            pid = child.id(),
            taps = taps.len(),
            hold_s = hold.as_secs(),
            "TAP keeper holds the mirrors"
        );
        Ok(Some(Keeper { child, _pipe: pipe }))
    }

    /// The keeper's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// How often a keeper whose vrhost is gone looks for the next one.
const KEEPER_POLL: Duration = Duration::from_millis(20);

/// `vrhost keep-taps --hold-ms MS NETNS/TAP…`: holds a disabled queue of
/// each TAP (its carrier stays up, no frame is steered to it) while the
/// vrhost that started it lives (its standard input open); then for at most
/// `hold`, letting each TAP go once another process reads it (a new vrhost
/// attached its queues) or it is deleted. Says `ready` on standard output
/// once it holds them.
pub fn keeper_main(hold: Duration, taps: &[String]) -> ExitCode {
    let mut held = Vec::new();
    for t in taps {
        let Some((ns, tap)) = t.split_once('/') else {
            tracing::error!(tap = t, "keep-taps: expected NETNS/TAP");
            continue;
        };
        match vrhost_cp::hold_tap(ns, tap) {
            Ok(h) => held.push((ns.to_string(), tap.to_string(), h)),
            Err(e) => tracing::warn!("keep-taps: {e}"),
        }
    }
    // The vrhost that started us, to tell its queues from the next one's.
    let parent = std::os::unix::process::parent_id();
    let parent_start = process_start(parent);
    println!("ready");
    let _ = std::io::stdout().flush();
    // The pipe from vrhost: EOF (or an error) when it is gone.
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
        let _ = tx.send(());
    });
    let mut probes: HashMap<String, Option<TapProbe>> = HashMap::new();
    // While vrhost lives: only let go of deleted TAPs, once a second.
    while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
        rx.recv_timeout(Duration::from_secs(1))
    {
        held.retain(|(ns, tap, _)| probe(&mut probes, ns, tap) != Seen::Gone);
    }
    let gone_at = Instant::now();
    // Our pipe closes while a killed vrhost's other files may still be
    // open: its TAP queues count as readers until every thread of it is
    // dead. Its main thread may be a zombie already while its workers still
    // exit (the files close with the last thread): a keeper that took the
    // zombie for the end saw the old queues, let go, and the carrier
    // dropped under the tenants' sessions. Only then do queues mean a new
    // vrhost.
    while parent_start.is_some()
        && holds_files(parent, parent_start)
        && gone_at.elapsed() < Duration::from_secs(5)
    {
        std::thread::sleep(Duration::from_millis(2));
    }
    tracing::info!(
        taps = held.len(),
        hold_s = hold.as_secs(),
        "keep-taps: vrhost is gone; holding the TAP mirrors' carrier for the next one"
    );
    while !held.is_empty() && gone_at.elapsed() < hold {
        held.retain(|(ns, tap, _)| match probe(&mut probes, ns, tap) {
            Seen::Held => true,
            Seen::Gone => false,
            Seen::TakenOver => {
                tracing::info!(
                    netns = ns,
                    tap,
                    after_ms = gone_at.elapsed().as_millis() as u64,
                    "keep-taps: a new vrhost reads the TAP; let go"
                );
                false
            }
        });
        std::thread::sleep(KEEPER_POLL);
    }
    if !held.is_empty() {
        tracing::warn!(
            taps = held.len(),
            "keep-taps: no vrhost took the TAP mirrors over in {} s; their carrier goes down",
            hold.as_secs()
        );
    }
    ExitCode::SUCCESS
}

/// Whether process `pid`, started at `start`, may still hold files: it
/// runs, or its main thread is a zombie while others of its threads still
/// exit (a thread group's files close with its last thread). Once it is
/// reaped, a process that took its pid is not it (`start` differs) unless
/// it is a zombie itself, whose threads are then waited for too, which at
/// worst holds the keeper a little longer.
fn holds_files(pid: u32, start: Option<u64>) -> bool {
    if process_start(pid).is_some_and(|s| Some(s) == start) {
        return true;
    }
    std::fs::read_dir(format!("/proc/{pid}/task")).is_ok_and(|d| d.count() > 1)
}

/// The start time of process `pid` (`/proc/PID/stat` field 22) while it
/// runs; `None` once it is a zombie or gone.
fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces: fields count from its ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    if matches!(fields.first(), Some(&("Z" | "X" | "x"))) {
        return None;
    }
    fields.get(19)?.parse().ok()
}

#[derive(PartialEq, Eq)]
enum Seen {
    Held,
    Gone,
    TakenOver,
}

fn probe(probes: &mut HashMap<String, Option<TapProbe>>, ns: &str, tap: &str) -> Seen {
    let p = probes
        .entry(ns.to_string())
        .or_insert_with(|| TapProbe::open(ns).ok());
    let Some(p) = p else {
        // The namespace cannot be entered any more: it is gone.
        return Seen::Gone;
    };
    match p.get(tap) {
        Ok(Some(Link::Tap(t))) if t.queues > 0 => Seen::TakenOver,
        Ok(Some(Link::Tap(_))) => Seen::Held,
        Ok(_) => Seen::Gone,
        Err(e) => {
            tracing::debug!(netns = ns, tap, "keep-taps: {e}");
            Seen::Held
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fpm_snapshot_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let rd = RuntimeDir::open(dir.path()).unwrap();
        let routes = vec![
            (
                "10.1.0.0/16".parse().unwrap(),
                RouteTarget::Via {
                    gw: "192.0.2.1".parse().unwrap(),
                    ifname: None,
                },
            ),
            (
                "2001:db8::/32".parse().unwrap(),
                RouteTarget::Multipath(vec![
                    Hop {
                        gw: "2001:db8::1".parse().unwrap(),
                        ifname: None,
                        weight: 1,
                    },
                    Hop {
                        gw: "2001:db8::2".parse().unwrap(),
                        ifname: None,
                        weight: 3,
                    },
                ]),
            ),
            ("10.2.0.0/16".parse().unwrap(), RouteTarget::Blackhole),
            ("10.3.0.0/16".parse().unwrap(), RouteTarget::Unreachable),
            ("10.4.0.0/16".parse().unwrap(), RouteTarget::Prohibit),
        ];
        rd.save_fpm_routes("red", &routes).unwrap();
        assert_eq!(rd.fpm_routes("red"), routes);
        assert!(rd.fpm_routes("blue").is_empty());
        // A second instance on the same directory is refused.
        let err = RuntimeDir::open(dir.path()).err().expect("locked");
        assert!(err.to_string().contains("another vrhost"), "{err}");
    }

    /// The FPM snapshot and the mirror list are written whole through a
    /// rename; one cut short anyway (a copy, a full disk) is refused
    /// whole, never read in part: no FPM route, and no mirror deleted on
    /// its word.
    #[test]
    fn a_restart_file_cut_at_any_byte_loads_whole_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let rd = RuntimeDir::open(dir.path()).unwrap();
        let routes: Vec<(IpPrefix, RouteTarget)> = (0..4u8)
            .map(|i| {
                let gw = format!("192.0.2.{}", i + 1).parse().unwrap();
                let prefix = format!("10.{i}.0.0/16").parse().unwrap();
                (prefix, RouteTarget::Via { gw, ifname: None })
            })
            .collect();
        rd.save_fpm_routes("red", &routes).unwrap();
        let mirrors = vec![MirrorRecord {
            netns: "vr-red".into(),
            tap: "red0".into(),
            addresses: vec!["10.0.0.1/24".into()],
        }];
        rd.save_mirrors(&mirrors).unwrap();
        let loads: [(&str, &dyn Fn() -> bool); 2] = [
            ("fpm-red.json", &|| rd.fpm_routes("red").is_empty()),
            ("mirrors.json", &|| rd.mirrors().is_empty()),
        ];
        for (name, nothing) in loads {
            let path = dir.path().join(name);
            let bytes = std::fs::read(&path).unwrap();
            for cut in 0..bytes.len() {
                std::fs::write(&path, &bytes[..cut]).unwrap();
                assert!(nothing(), "{name} cut at byte {cut} read in part");
            }
            std::fs::write(&path, &bytes).unwrap();
        }
        assert_eq!(rd.fpm_routes("red"), routes);
        assert_eq!(rd.mirrors(), mirrors);
    }

    #[test]
    fn process_start_tells_a_live_process_from_a_dead_one() {
        assert!(process_start(std::process::id()).is_some());
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        // Exited but not reaped: a zombie.
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(process_start(pid), None);
        child.wait().unwrap();
        assert_eq!(process_start(pid), None);
    }

    /// A killed vrhost's main thread can be a zombie while its workers
    /// still exit, holding its TAP queues: it still holds its files until
    /// its last thread is gone. (Python stands in: a thread that sleeps,
    /// and a main thread that exits alone through the raw `exit` syscall.)
    #[test]
    fn a_zombie_whose_threads_still_run_still_holds_its_files() {
        let script = "import ctypes, os, threading, time\n\
            threading.Thread(target=time.sleep, args=(1.5,)).start()\n\
            nr = {'x86_64': 60, 'aarch64': 93}[os.uname().machine]\n\
            ctypes.CDLL(None).syscall(nr, 0)\n";
        let mut child = std::process::Command::new("python3")
            .args(["-c", script])
            .spawn()
            .expect("python3 (apt-get install python3)");
        let pid = child.id();
        let start = process_start(pid);
        assert!(start.is_some());
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(process_start(pid), None, "its main thread is a zombie");
        assert!(holds_files(pid, start), "its other thread still runs");
        std::thread::sleep(Duration::from_millis(1600));
        assert!(!holds_files(pid, start), "every thread gone");
        child.wait().unwrap();
        assert!(!holds_files(pid, start), "reaped");
        assert!(holds_files(
            std::process::id(),
            process_start(std::process::id())
        ));
    }

    #[test]
    fn mirror_list_round_trips_and_survives_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let rd = RuntimeDir::open(dir.path()).unwrap();
        assert!(rd.mirrors().is_empty());
        let m = vec![MirrorRecord {
            netns: "vr-red".into(),
            tap: "red0".into(),
            addresses: vec!["10.0.0.1/24".into(), "2001:db8::1/64".into(), "junk".into()],
        }];
        rd.save_mirrors(&m).unwrap();
        assert_eq!(rd.mirrors(), m);
        assert_eq!(m[0].addrs().len(), 2);
        std::fs::write(dir.path().join("mirrors.json"), "{not json").unwrap();
        assert!(rd.mirrors().is_empty());
    }
}
