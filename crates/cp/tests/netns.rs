//! Namespaces, TAP mirrors and config → namespace addresses, against the
//! real kernel (root).

mod common;

use std::net::IpAddr;

use common::Ns;
use vrhost_cp::{
    add_address, del_address, delete_mirror, ensure_netns, hold_tap, mirror, mirror_interface,
    set_addresses, Link, TapProbe,
};

#[test]
fn namespace_is_created_then_adopted() {
    let ns = Ns::unique("create");
    let first = ensure_netns(&ns.name).expect("create");
    assert!(first.created);
    // Visible to iproute2, with lo up.
    assert!(common::ip("netns list").contains(&ns.name));
    let lo = ns.ip("link show lo");
    assert!(lo.contains("UP"), "lo is not up: {lo}");
    let again = ensure_netns(&ns.name).expect("adopt");
    assert!(!again.created);
}

#[test]
fn namespace_made_by_ip_is_adopted() {
    let ns = Ns::unique("adopt");
    common::ip(&format!("netns add {}", ns.name));
    let info = ensure_netns(&ns.name).expect("adopt");
    assert!(!info.created);
    assert!(ns.ip("link show lo").contains("UP"));
}

#[test]
fn stale_handle_is_an_error_not_a_panic() {
    let ns = Ns::unique("stale");
    std::fs::create_dir_all("/run/netns").unwrap();
    let path = format!("/run/netns/{}", ns.name);
    std::fs::write(&path, b"").unwrap();
    let err = ensure_netns(&ns.name).expect_err("a plain file is no namespace");
    assert!(err.to_string().contains("cannot be entered"), "{err}");
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn tap_mirror_has_name_mac_mtu_and_queues() {
    let ns = Ns::unique("tap");
    ensure_netns(&ns.name).unwrap();
    let mac = [0x02, 0x00, 0x00, 0x00, 0x0a, 0x01];
    let ports = mirror_interface(&ns.name, "red0", mac, 1400, 3).expect("mirror");
    assert_eq!(ports.len(), 3);
    assert!(ports.iter().all(|p| p.name() == "red0"));
    let show = ns.ip("-d link show red0");
    assert!(show.contains("02:00:00:00:0a:01"), "{show}");
    assert!(show.contains("mtu 1400"), "{show}");
    assert!(show.contains("state UP") || show.contains(",UP"), "{show}");
    assert!(
        show.contains("tun type tap") && show.contains("multi_queue"),
        "{show}"
    );
    // Not in the caller's namespace.
    assert!(std::process::Command::new("ip")
        .args(["link", "show", "red0"])
        .output()
        .unwrap()
        .stdout
        .is_empty());
    // The device outlives its queues (persistent), with carrier off. A
    // process another test spawns at that moment holds copies of the
    // queues' descriptors until it execs (they close on exec), so the
    // last queue may detach a moment later: wait up to 2 s for it.
    drop(ports);
    let mut show = ns.ip("-d link show red0");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while !show.contains("NO-CARRIER") && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
        show = ns.ip("-d link show red0");
    }
    assert!(
        show.contains("persist on") && show.contains("NO-CARRIER"),
        "{show}"
    );
    // Gone once deleted; deleting again is fine.
    delete_mirror(&ns.name, "red0").expect("delete");
    delete_mirror(&ns.name, "red0").expect("delete again");
    let gone = std::process::Command::new("ip")
        .args(["-n", &ns.name, "link", "show", "red0"])
        .output()
        .unwrap();
    assert!(!gone.status.success(), "red0 outlived delete_mirror");
}

/// What a restart of vrhost does to a mirror: the new process adopts the
/// persistent TAP by name, with its addresses; while nobody reads it, a
/// hold keeps its carrier (a tenant's zebra would take the link down
/// without); a device another process reads is refused.
#[test]
fn tap_mirror_is_adopted_and_held_across_a_restart() {
    let ns = Ns::unique("adopt");
    ensure_netns(&ns.name).unwrap();
    let mac = [0x02, 0x00, 0x00, 0x00, 0x0b, 0x01];
    let m = mirror(&ns.name, "red0", mac, 1500, 2).expect("mirror");
    assert!(!m.adopted);
    set_addresses(&ns.name, "red0", &[("10.0.0.1".parse().unwrap(), 24)]).unwrap();
    let index = ns.ip("-o link show red0");
    // Another reader: refused, naming the device.
    let err = mirror(&ns.name, "red0", mac, 1500, 2)
        .err()
        .expect("refused");
    assert!(err.to_string().contains("in use"), "{err}");
    // The hold, then the old process goes.
    let hold = hold_tap(&ns.name, "red0").expect("hold");
    let mut probe = TapProbe::open(&ns.name).expect("probe");
    match probe.get("red0").expect("get") {
        Some(Link::Tap(t)) => {
            assert!(t.persist && t.multi_queue && t.vnet_hdr, "{t:?}");
            assert_eq!((t.queues, t.disabled), (2, 1), "{t:?}");
        }
        other => panic!("red0: {other:?}"),
    }
    drop(m);
    let show = ns.ip("link show red0");
    assert!(
        !show.contains("NO-CARRIER") && show.contains("LOWER_UP"),
        "the hold did not keep the carrier: {show}"
    );
    // The new process adopts it: same device (ifindex), same address.
    let m = mirror(&ns.name, "red0", mac, 1500, 3).expect("adopt");
    assert!(m.adopted);
    assert_eq!(m.ports.len(), 3);
    let again = ns.ip("-o link show red0");
    assert_eq!(
        index.split(':').next(),
        again.split(':').next(),
        "not the same device: {index} / {again}"
    );
    assert!(ns.ip("addr show red0").contains("10.0.0.1/24"));
    match probe.get("red0").expect("get") {
        Some(Link::Tap(t)) => assert_eq!((t.queues, t.disabled), (3, 1), "{t:?}"),
        other => panic!("red0: {other:?}"),
    }
    drop(hold);
    drop(m);
    // With neither hold nor reader: carrier off.
    assert!(ns.ip("link show red0").contains("NO-CARRIER"));
    // A device of the name that is no multi-queue TAP is replaced.
    delete_mirror(&ns.name, "red0").unwrap();
    ns.ip("tuntap add red0 mode tap");
    let m = mirror(&ns.name, "red0", mac, 1500, 1).expect("replace");
    assert!(!m.adopted);
    assert!(ns.ip("-d link show red0").contains("multi_queue"));
    // A hold never creates a device.
    let err = hold_tap(&ns.name, "nosuch0").unwrap_err();
    assert!(err.to_string().contains("nosuch0"), "{err}");
}

#[test]
fn config_addresses_are_pushed_into_the_namespace() {
    let ns = Ns::unique("addr");
    ensure_netns(&ns.name).unwrap();
    let _ports = mirror_interface(&ns.name, "red0", [2, 0, 0, 0, 0, 1], 1500, 1).unwrap();
    let a4: IpAddr = "10.0.0.1".parse().unwrap();
    let a6: IpAddr = "2001:db8::1".parse().unwrap();
    set_addresses(&ns.name, "red0", &[(a4, 24), (a6, 64)]).unwrap();
    let show = ns.ip("addr show red0");
    assert!(show.contains("inet 10.0.0.1/24"), "{show}");
    assert!(show.contains("inet6 2001:db8::1/64"), "{show}");
    // Idempotent.
    add_address(&ns.name, "red0", a4, 24).unwrap();
    // Replacing the set removes what is not in it, keeps link-local.
    let b4: IpAddr = "10.0.1.1".parse().unwrap();
    set_addresses(&ns.name, "red0", &[(b4, 24), (a6, 64)]).unwrap();
    let show = ns.ip("addr show red0");
    assert!(!show.contains("10.0.0.1/24"), "{show}");
    assert!(show.contains("inet 10.0.1.1/24"), "{show}");
    assert!(show.contains("fe80::"), "link-local removed: {show}");
    del_address(&ns.name, "red0", a6, 64).unwrap();
    del_address(&ns.name, "red0", a6, 64).unwrap(); // absent: still fine
    assert!(!ns.ip("addr show red0").contains("2001:db8::1"));
    // Errors name the interface.
    let err = add_address(&ns.name, "nosuch0", a4, 24).unwrap_err();
    assert!(err.to_string().contains("nosuch0"), "{err}");
    assert!(add_address(&ns.name, "red0", a4, 33).is_err());
}
