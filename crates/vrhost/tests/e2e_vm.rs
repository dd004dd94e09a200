//! End-to-end test of the `vhost_user` port with a real VM: a QEMU guest
//! (TCG, no KVM) whose virtio-net device is attached over vhost-user to a VR
//! interface pings a host namespace through the VR and sends it 2 MiB over
//! TCP, checked by SHA-256 on both ends; then QEMU is restarted and the new
//! guest does it again through the same `vrhost run` (reconnection).
//!
//! The test runs `scripts/test-vhost-user-vm.sh` (see it for the topology)
//! with this build's `vrhost`. Requirements: root (namespaces, veth), and
//! `qemu-system-x86_64`, a static `busybox`, `cpio`, `ip` and a Debian cloud
//! kernel in /boot (`qemu-system-x86 busybox-static cpio iproute2
//! linux-image-cloud-amd64`). Without them the test fails, it never skips.

mod common;

use common::{require_root, require_tools};
use std::path::Path;
use std::process::Command;

const VRHOST: &str = env!("CARGO_BIN_EXE_vrhost");

#[test]
fn a_qemu_guest_on_vhost_user_pings_and_sends_through_a_vr_twice() {
    require_root("e2e_vm", "network namespaces and veth");
    require_tools(
        &["qemu-system-x86_64", "cpio", "ip", "sha256sum", "python3"],
        "qemu-system-x86 busybox-static cpio iproute2 coreutils",
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/test-vhost-user-vm.sh");
    let out = Command::new("bash")
        .arg(&script)
        .env("VRHOST", VRHOST)
        .output()
        .expect("running scripts/test-vhost-user-vm.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the vhost-user VM test failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    for boot in 1..=2 {
        assert!(
            stdout.contains(&format!(
                "boot {boot}: ping and TCP transfer through the VR passed"
            )),
            "boot {boot} did not report its ping and transfer:\n{stdout}"
        );
    }
}
