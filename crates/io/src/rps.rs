//! Receive packet steering (RPS) for a virtual interface an af_packet port
//! reads: where the kernel's receive work for its frames runs.
//!
//! A veth receives each frame on the core that sent it: `veth_xmit` queues
//! it to that core's backlog, whose softirq runs `packet_rcv` into vrhost's
//! ring. A tenant's TCP sender transmits from two cores, though: its own,
//! and the worker's, where vrhost's send of an ACK runs the tenant's stack
//! inline and that stack sends the next segments. Two backlogs drain
//! independently, so the flow's segments reach the ring out of order, and
//! the receiver asks for retransmissions of segments that were never lost
//! (`scripts/bench-tcp-veth.sh -r af_packet@sender`: hundreds a second on
//! one stream). RPS on the interface's receive queues sends every frame of
//! a flow to one backlog, on a core chosen by the flow's hash among those
//! given, so order holds; giving it the cores that run no worker also keeps
//! that work off the workers' cores (docs/operations.md, "Where the kernel
//! receives").
//!
//! [`Steering::apply`] sets it where vrhost may: the interface vrhost acts
//! on, as sysfs shows it (checked, not assumed: sysfs shows the namespace
//! it was mounted in, which for a thread that entered another namespace
//! with `setns` is not its own; the interface's index and MAC there must
//! match what the kernel reports in the caller's); a virtual one (no
//! `device` link: a veth, not a NIC, whose interrupts' affinity is the
//! operator's); whose queues' masks are all empty, or already the one vrhost
//! would write (left by a run that ended without undoing it: adopted). Any
//! other mask is an operator's and is kept; one that includes a worker's
//! core is reported as such. The cores given are those [`steer_cpus`]
//! finds: online, not isolated, not `nohz_full`, no worker's.
//!
//! Dropping the [`Steering`] empties each mask it set, if the interface
//! still has the index it had and the mask still reads as the kernel showed
//! it after the write (an operator who changed it meanwhile keeps the
//! change).

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::{netdev, IoError};

/// The masks vrhost set on one interface's receive queues; emptied again
/// when dropped.
#[derive(Debug)]
pub struct Steering {
    ifname: String,
    /// The interface's sysfs directory, and its index there.
    dir: PathBuf,
    ifindex: String,
    /// Each queue's `rps_cpus` file, and what it read after the write.
    files: Vec<(PathBuf, String)>,
}

/// What [`Steering::apply`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Applied {
    /// The interface's queues now steer to the cores given.
    Set {
        /// The mask written ([`mask_text`]).
        mask: String,
        /// They already did: an earlier run left them so.
        adopted: bool,
    },
    /// Left as it was, and why.
    Kept(String),
    /// Left as an operator set it, although that puts the kernel's receive
    /// work on a worker's core.
    OnWorkers(String),
}

impl Steering {
    /// Points RPS on every receive queue of `ifname` at `cpus` (not one of
    /// `workers`), where vrhost may (the module's rules): what it did, and
    /// the [`Steering`] that undoes it when dropped. An error only where
    /// sysfs failed in a way none of the rules expects.
    pub fn apply(
        ifname: &str,
        cpus: &[usize],
        workers: &[usize],
    ) -> Result<(Applied, Option<Steering>), IoError> {
        Self::apply_at(Path::new("/sys/class/net"), ifname, cpus, workers)
    }

    fn apply_at(
        root: &Path,
        ifname: &str,
        cpus: &[usize],
        workers: &[usize],
    ) -> Result<(Applied, Option<Steering>), IoError> {
        let kept = |why: String| Ok((Applied::Kept(why), None));
        if cpus.is_empty() {
            return kept(
                "no online core is free of workers (isolated and nohz_full ones left out)".into(),
            );
        }
        let dir = root.join(ifname);
        if !dir.is_dir() {
            return kept(format!("{} does not show it", root.display()));
        }
        let Some(ifindex) = same_interface(&dir, ifname)? else {
            return kept(format!(
                "{} shows another network namespace's interface of that name",
                root.display()
            ));
        };
        if dir.join("device").exists() {
            return kept(
                "a device's interface: its interrupts' affinity places its receive work".into(),
            );
        }
        let mut files = Vec::new();
        let queues =
            fs::read_dir(dir.join("queues")).map_err(|e| io_err(ifname, "read queues", e))?;
        for q in queues {
            let q = q.map_err(|e| io_err(ifname, "read queues", e))?;
            if q.file_name().to_string_lossy().starts_with("rx-") {
                files.push(q.path().join("rps_cpus"));
            }
        }
        files.sort();
        if files.is_empty() {
            return kept("no receive queue".into());
        }
        let mask = mask_text(cpus);
        let mut adopted = true;
        for f in &files {
            let now = match fs::read_to_string(f) {
                Ok(now) => now,
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    return kept("this kernel has no RPS (no rps_cpus)".into())
                }
                Err(e) => return Err(io_err(ifname, "read rps_cpus", e)),
            };
            if normalized(&now).is_empty() {
                adopted = false;
            } else if !same_mask(&now, &mask) {
                let why = format!(
                    "already set by an operator ({}: {})",
                    f.display(),
                    now.trim()
                );
                let on: Vec<usize> = parse_mask(&now)
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|c| workers.contains(c))
                    .collect();
                return Ok((
                    match on.is_empty() {
                        true => Applied::Kept(why),
                        false => {
                            Applied::OnWorkers(format!("{why}, which includes worker cores {on:?}"))
                        }
                    },
                    None,
                ));
            }
        }
        let mut set = Steering {
            ifname: ifname.to_string(),
            dir,
            ifindex,
            files: Vec::with_capacity(files.len()),
        };
        for f in files {
            if let Err(e) = fs::write(&f, &mask) {
                // `set` empties what it wrote so far.
                return match e.kind() {
                    ErrorKind::PermissionDenied | ErrorKind::ReadOnlyFilesystem => kept(format!(
                        "sysfs refused the mask ({e}: vrhost without CAP_NET_ADMIN in the \
                         host's user namespace, or a read-only /sys); rps = false says so"
                    )),
                    _ => Err(io_err(ifname, "write rps_cpus", e)),
                };
            }
            // The kernel may leave out cores it keeps from RPS.
            let shown = fs::read_to_string(&f).map_err(|e| io_err(ifname, "read rps_cpus", e))?;
            set.files.push((f, shown));
        }
        Ok((Applied::Set { mask, adopted }, Some(set)))
    }
}

impl Drop for Steering {
    fn drop(&mut self) {
        let index = fs::read_to_string(self.dir.join("ifindex")).unwrap_or_default();
        if index.trim() != self.ifindex {
            tracing::warn!(
                "{}: RPS masks left as they are: the interface is gone or was made anew",
                self.ifname
            );
            return;
        }
        for (f, shown) in &self.files {
            if let Err(e) = release(f, shown) {
                tracing::warn!("{}: could not empty {}: {e}", self.ifname, f.display());
            }
        }
    }
}

/// Empties the mask in `file` if it still names the CPUs of `mask`.
fn release(file: &Path, mask: &str) -> std::io::Result<()> {
    if same_mask(&fs::read_to_string(file)?, mask) {
        fs::write(file, "0")?;
    }
    Ok(())
}

/// A mask as sysfs shows it, without the leading zero groups it pads with
/// (`""` for no CPU).
pub fn normalized(mask: &str) -> &str {
    mask.trim().trim_start_matches(['0', ','])
}

/// The mask of `ifname`'s first receive queue as this process's sysfs
/// shows it, [`normalized`].
pub fn shown(ifname: &str) -> std::io::Result<String> {
    let mask = fs::read_to_string(format!("/sys/class/net/{ifname}/queues/rx-0/rps_cpus"))?;
    Ok(normalized(&mask).to_string())
}

/// Whether two masks as sysfs writes them name the same CPUs.
fn same_mask(a: &str, b: &str) -> bool {
    normalized(a) == normalized(b)
}

/// The CPUs a mask names, or `None` where it is not one.
fn parse_mask(text: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for (i, group) in text.trim().rsplit(',').enumerate() {
        let bits = u32::from_str_radix(group, 16).ok()?;
        out.extend((0..32).filter(|b| bits & (1 << b) != 0).map(|b| i * 32 + b));
    }
    Some(out)
}

/// Whether sysfs's `dir` is the interface `ifname` of the caller's network
/// namespace (same index and MAC as the kernel reports there): its index
/// as sysfs shows it, or `None`.
fn same_interface(dir: &Path, ifname: &str) -> Result<Option<String>, IoError> {
    let read = |name: &str| fs::read_to_string(dir.join(name)).map(|s| s.trim().to_string());
    let (Ok(index), Ok(address)) = (read("ifindex"), read("address")) else {
        return Ok(None);
    };
    let mac = netdev::mac(ifname)?;
    let ours = mac
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":");
    let same = index == netdev::ifindex(ifname)?.to_string() && address == ours;
    Ok(same.then_some(index))
}

fn io_err(ifname: &str, what: &str, e: std::io::Error) -> IoError {
    IoError::Setup {
        ifname: ifname.to_string(),
        reason: format!("RPS: {what}: {e}"),
    }
}

/// A CPU mask as sysfs writes it: hexadecimal, in comma-separated groups of
/// 32 bits, most significant first (`3`, `1,00000000`).
pub fn mask_text(cpus: &[usize]) -> String {
    let words = cpus.iter().max().map_or(1, |&m| m / 32 + 1);
    let mut w = vec![0u32; words];
    for &c in cpus {
        w[c / 32] |= 1 << (c % 32);
    }
    let mut out = format!("{:x}", w[words - 1]);
    for x in w[..words - 1].iter().rev() {
        out.push_str(&format!(",{x:08x}"));
    }
    out
}

/// The cores an interface's receive work may be steered to, given the
/// workers' cores: online (`/sys/devices/system/cpu/online`), not isolated
/// or `nohz_full` (the kernel keeps RPS off those), and not a worker's; or
/// `None` where the online cores cannot be read.
pub fn steer_cpus(workers: &[usize]) -> Option<Vec<usize>> {
    let list = |name: &str| {
        fs::read_to_string(format!("/sys/devices/system/cpu/{name}"))
            .ok()
            .and_then(|t| parse_cpu_list(&t))
    };
    let online = list("online")?;
    let (isolated, nohz) = (
        list("isolated").unwrap_or_default(),
        list("nohz_full").unwrap_or_default(),
    );
    Some(
        online
            .into_iter()
            .filter(|c| !workers.contains(c) && !isolated.contains(c) && !nohz.contains(c))
            .collect(),
    )
}

/// Parses a kernel CPU list (`0-3,5,8-9`).
fn parse_cpu_list(text: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                if b < a || b - a > 1 << 16 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_are_written_as_sysfs_reads_them() {
        assert_eq!(mask_text(&[0]), "1");
        assert_eq!(mask_text(&[0, 1]), "3");
        assert_eq!(mask_text(&[1, 4]), "12");
        assert_eq!(mask_text(&[31]), "80000000");
        assert_eq!(mask_text(&[32]), "1,00000000");
        assert_eq!(mask_text(&[0, 33, 70]), "40,00000002,00000001");
    }

    #[test]
    fn an_empty_mask_is_zeros_and_commas() {
        let empty = |m: &str| normalized(m).is_empty();
        assert!(empty("0\n"));
        assert!(empty("00000000,00000000\n"));
        assert!(!empty("2\n"));
        assert!(!empty("00000000,00000001"));
    }

    #[test]
    fn a_mask_is_emptied_only_as_it_was_written() {
        let f = std::env::temp_dir().join(format!("vrhost-rps-mask-{}", std::process::id()));
        fs::write(&f, "00000000,00000001\n").unwrap();
        release(&f, "1").unwrap();
        assert_eq!(fs::read_to_string(&f).unwrap(), "0", "ours: emptied");
        fs::write(&f, "3\n").unwrap();
        release(&f, "1").unwrap();
        assert_eq!(
            fs::read_to_string(&f).unwrap(),
            "3\n",
            "changed since: kept"
        );
        fs::remove_file(&f).unwrap();
        assert!(same_mask("1,00000000\n", "1,00000000"));
        assert!(!same_mask("1,00000000", "1"));
    }

    #[test]
    fn masks_read_back_name_their_cpus() {
        assert_eq!(parse_mask("0\n"), Some(vec![]));
        assert_eq!(parse_mask("12"), Some(vec![1, 4]));
        assert_eq!(parse_mask("40,00000002,00000001"), Some(vec![0, 33, 70]));
        assert_eq!(parse_mask("zz"), None);
        for cpus in [vec![0], vec![1, 2, 31, 32, 63, 64, 100]] {
            assert_eq!(parse_mask(&mask_text(&cpus)), Some(cpus));
        }
        assert_eq!(normalized("00000000,00000003\n"), "3");
        assert_eq!(normalized("0"), "");
    }

    #[test]
    fn cpu_lists_parse_and_bad_ones_do_not() {
        assert_eq!(parse_cpu_list("0-1\n"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0,2-4,7"), Some(vec![0, 2, 3, 4, 7]));
        assert_eq!(parse_cpu_list("3"), Some(vec![3]));
        assert_eq!(parse_cpu_list("4-2"), None);
        assert_eq!(parse_cpu_list("a-b"), None);
        assert_eq!(parse_cpu_list("0-99999999"), None);
    }

    #[test]
    fn nothing_is_set_without_cores_or_without_the_interface() {
        let root = std::env::temp_dir().join(format!("vrhost-rps-{}", std::process::id()));
        fs::create_dir_all(&root).unwrap();
        let kept = |r: Result<(Applied, Option<Steering>), IoError>| match r {
            Ok((Applied::Kept(why), None)) => why,
            other => panic!("expected Kept, got {other:?}"),
        };
        assert!(kept(Steering::apply_at(&root, "nosuch0", &[], &[1])).contains("no online core"));
        assert!(kept(Steering::apply_at(&root, "nosuch0", &[0], &[1])).contains("does not show"));
        fs::remove_dir_all(&root).unwrap();
    }
}
