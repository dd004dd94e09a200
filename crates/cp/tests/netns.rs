//! Namespaces, TAP mirrors and config → namespace addresses, against the
//! real kernel (root).

mod common;

use std::net::IpAddr;

use common::Ns;
use vrhost_cp::{add_address, del_address, ensure_netns, mirror_interface, set_addresses};

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
    // The device lives as long as its queues.
    drop(ports);
    let gone = std::process::Command::new("ip")
        .args(["-n", &ns.name, "link", "show", "red0"])
        .output()
        .unwrap();
    assert!(!gone.status.success(), "red0 outlived its ports");
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
