//! End-to-end test of the `vhost_user` port with a real VM: a QEMU guest
//! (TCG, no KVM) whose virtio-net device is attached over vhost-user to a VR
//! interface pings a host namespace through the VR and sends it 2 MiB over
//! TCP, checked by SHA-256 on both ends; then QEMU is restarted and the new
//! guest does it again through the same `vrhost run` (reconnection).
//!
//! The same with two queue pairs, one per worker, the guest sending
//! through its second. And the paper's set-up: a tenant's control plane
//! (FRR) in such a guest peers over the data plane with BIRD in a host
//! namespace, and the routes it learns drive the VR's FIB through FPM.
//!
//! The tests run `scripts/test-vhost-user-vm.sh` and
//! `scripts/test-vm-control-plane.sh` (see them for the topologies) with
//! this build's `vrhost`, one at a time. Requirements: root (namespaces, veth), and
//! `qemu-system-x86_64`, a static `busybox`, `cpio`, `ip` and a Debian cloud
//! kernel in /boot (`qemu-system-x86 busybox-static cpio iproute2
//! linux-image-cloud-amd64`); for the control plane, `frr` and `bird2`. Without them the test fails, it never skips.

mod common;

use common::{require_root, require_tools};
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

const VRHOST: &str = env!("CARGO_BIN_EXE_vrhost");

/// One guest at a time: two TCG guests at once would starve each other
/// on a small machine.
static ONE_VM: Mutex<()> = Mutex::new(());

/// Runs `scripts/NAME` with this build's `vrhost` and `env`; its stdout,
/// once it exited 0.
fn script(name: &str, env: &[(&str, &str)]) -> String {
    let _one = ONE_VM.lock().unwrap_or_else(|e| e.into_inner());
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scripts")
        .join(name);
    let out = Command::new("bash")
        .arg(&script)
        .env("VRHOST", VRHOST)
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("running scripts/{name}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "scripts/{name} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    stdout
}

#[test]
fn a_qemu_guest_on_vhost_user_pings_and_sends_through_a_vr_twice() {
    require_root("e2e_vm", "network namespaces and veth");
    require_tools(
        &["qemu-system-x86_64", "cpio", "ip", "sha256sum", "python3"],
        "qemu-system-x86 busybox-static cpio iproute2 coreutils",
    );
    let stdout = script("test-vhost-user-vm.sh", &[]);
    for boot in 1..=2 {
        assert!(
            stdout.contains(&format!(
                "boot {boot}: ping and TCP transfer through the VR passed"
            )),
            "boot {boot} did not report its ping and transfer:\n{stdout}"
        );
    }
}

#[test]
fn a_guest_with_two_queue_pairs_sends_through_the_second() {
    require_root("e2e_vm", "network namespaces and veth");
    require_tools(
        &["qemu-system-x86_64", "cpio", "ip", "ethtool", "python3"],
        "qemu-system-x86 busybox-static cpio iproute2 ethtool",
    );
    // Two workers, a queue pair each; the guest sends from its second vCPU.
    let stdout = script("test-vhost-user-vm.sh", &[("QUEUES", "2"), ("BOOTS", "1")]);
    assert!(
        stdout.contains("boot 1: ping and TCP transfer through the VR passed"),
        "the two-queue guest did not report its ping and transfer:\n{stdout}"
    );
    assert!(
        stdout.contains("frames on it, and vrhost forwarded them"),
        "the guest's second queue carried nothing:\n{stdout}"
    );
}

#[test]
fn a_control_plane_in_a_vm_drives_its_vr_through_fpm() {
    require_root("e2e_vm", "network namespaces and veth");
    require_tools(
        &[
            "qemu-system-x86_64",
            "cpio",
            "ip",
            "bird",
            "birdc",
            "/usr/lib/frr/zebra",
        ],
        "qemu-system-x86 busybox-static cpio iproute2 frr bird2",
    );
    let stdout = script("test-vm-control-plane.sh", &[]);
    // The VR's route as `vrhost ctl routes list` prints it, columns aside.
    assert!(
        stdout.lines().any(|l| {
            l.split_whitespace().collect::<Vec<_>>() == ["203.0.113.0/24", "via", "10.2.0.2"]
        }),
        "the VR's FIB lacks 203.0.113.0/24 via 10.2.0.2:\n{stdout}"
    );
    for step in [
        "before the VM: cp-h cannot reach 203.0.113.1",
        "cp-h pings 203.0.113.1 through the VR:",
        "BIRD learned the guest's prefix: 198.51.100.0/24",
        "BIRD withdrew 203.0.113.0/24: gone from the VR",
        "cp-h cannot reach 203.0.113.1 any more",
    ] {
        assert!(stdout.contains(step), "no \"{step}\" in:\n{stdout}");
    }
}
