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
//! [`Steering::apply`] sets it where vrhost may: a virtual interface (no
//! `device` link: veth, not a NIC, whose interrupt affinity is the
//! operator's), whose queues' masks are all empty (an operator's own
//! setting is left alone), seen by sysfs in the namespace vrhost acts in.
//! The last is checked, not assumed: sysfs shows the namespace it was
//! mounted in, which for a thread that entered another namespace with
//! `setns` is not its own; the interface's index and MAC there must match
//! what the kernel reports in the caller's. Dropping the [`Steering`]
//! empties the masks it set, each only if it still reads as vrhost wrote it
//! (an operator who changed it meanwhile keeps the change).

use std::fs;
use std::path::{Path, PathBuf};

use crate::{netdev, IoError};

/// The masks vrhost set on one interface's receive queues; emptied again
/// when dropped.
#[derive(Debug)]
pub struct Steering {
    ifname: String,
    /// Each queue's `rps_cpus` file.
    files: Vec<PathBuf>,
    /// The mask written to each ([`mask_text`]).
    mask: String,
}

/// What [`Steering::apply`] did.
#[derive(Debug)]
pub enum Applied {
    /// The interface's queues now steer to the cores given.
    Set(Steering),
    /// Left as it was, and why.
    Kept(String),
}

impl Steering {
    /// Points RPS on every receive queue of `ifname` at `cpus`, where
    /// vrhost may (the module's rules): `Ok(Applied::Kept(why))` where it
    /// may not, an error where sysfs refused a write (the masks written
    /// before it are emptied again).
    pub fn apply(ifname: &str, cpus: &[usize]) -> Result<Applied, IoError> {
        Self::apply_at(Path::new("/sys/class/net"), ifname, cpus)
    }

    fn apply_at(root: &Path, ifname: &str, cpus: &[usize]) -> Result<Applied, IoError> {
        let kept = |why: String| Ok(Applied::Kept(why));
        if cpus.is_empty() {
            return kept("every core runs a worker".into());
        }
        let dir = root.join(ifname);
        if !dir.is_dir() {
            return kept(format!("{} does not show it", root.display()));
        }
        if dir.join("device").exists() {
            return kept(
                "a device's interface: its interrupts' affinity places its receive work".into(),
            );
        }
        if !same_interface(&dir, ifname)? {
            return kept(format!(
                "{} shows another network namespace's interface of that name",
                root.display()
            ));
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
        for f in &files {
            let now = fs::read_to_string(f).map_err(|e| io_err(ifname, "read rps_cpus", e))?;
            if !is_empty_mask(&now) {
                return kept(format!("already set ({}: {})", f.display(), now.trim()));
            }
        }
        let mask = mask_text(cpus);
        let mut set = Steering {
            ifname: ifname.to_string(),
            files: Vec::with_capacity(files.len()),
            mask,
        };
        for f in files {
            fs::write(&f, &set.mask).map_err(|e| io_err(ifname, "write rps_cpus", e))?;
            set.files.push(f);
        }
        Ok(Applied::Set(set))
    }

    /// The interface it steers.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }
}

impl Drop for Steering {
    fn drop(&mut self) {
        for f in &self.files {
            if let Err(e) = release(f, &self.mask) {
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

/// Whether two masks as sysfs writes them name the same CPUs (sysfs pads
/// what it reads back with leading zero groups).
fn same_mask(a: &str, b: &str) -> bool {
    let strip = |m: &str| m.trim().trim_start_matches(['0', ',']).to_string();
    strip(a) == strip(b)
}

/// Whether sysfs's `dir` is the interface `ifname` of the caller's network
/// namespace: same index and MAC as the kernel reports there.
fn same_interface(dir: &Path, ifname: &str) -> Result<bool, IoError> {
    let read = |name: &str| fs::read_to_string(dir.join(name)).map(|s| s.trim().to_string());
    let (Ok(index), Ok(address)) = (read("ifindex"), read("address")) else {
        return Ok(false);
    };
    let mac = netdev::mac(ifname)?;
    let ours = mac
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":");
    Ok(index == netdev::ifindex(ifname)?.to_string() && address == ours)
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

/// Whether a mask read from sysfs names no CPU.
fn is_empty_mask(text: &str) -> bool {
    same_mask(text, "0")
}

/// The cores the kernel has online (`/sys/devices/system/cpu/online`), or
/// `None` where it cannot be read.
pub fn online_cpus() -> Option<Vec<usize>> {
    parse_cpu_list(&fs::read_to_string("/sys/devices/system/cpu/online").ok()?)
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
        assert!(is_empty_mask("0\n"));
        assert!(is_empty_mask("00000000,00000000\n"));
        assert!(!is_empty_mask("2\n"));
        assert!(!is_empty_mask("00000000,00000001"));
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
        let kept = |r: Result<Applied, IoError>| match r {
            Ok(Applied::Kept(why)) => why,
            other => panic!("expected Kept, got {other:?}"),
        };
        assert!(kept(Steering::apply_at(&root, "nosuch0", &[])).contains("every core"));
        assert!(kept(Steering::apply_at(&root, "nosuch0", &[0])).contains("does not show"));
        // A NIC's interface (a `device` link): left to its interrupts.
        fs::create_dir_all(root.join("nic0/device")).unwrap();
        assert!(kept(Steering::apply_at(&root, "nic0", &[0])).contains("device"));
        fs::remove_dir_all(&root).unwrap();
    }
}
