//! `vrhost ctl` against a real server on a temporary socket.

mod common;

use std::process::ExitCode;

use clap::Parser;
use common::{TestServer, OTHER, OWN};
use vrhost_api::{ctl_main, CtlArgs};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    ctl: CtlArgs,
}

fn ctl(s: &TestServer, token: &str, args: &[&str]) -> String {
    let socket = s.socket();
    let mut argv = vec![
        "ctl",
        "--socket",
        socket.to_str().unwrap(),
        "--token",
        token,
    ];
    argv.extend_from_slice(args);
    let cli = Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let code = ctl_main(cli.ctl).unwrap_or_else(|e| panic!("{argv:?}: {e:#}"));
    format!("{code:?}")
}

fn ok() -> String {
    format!("{:?}", ExitCode::SUCCESS)
}

fn failed() -> String {
    format!("{:?}", ExitCode::from(1))
}

#[test]
fn ctl_drives_every_resource() {
    let s = TestServer::start();
    let a = s.admin.clone();
    let dir = s.dir.path();

    for args in [
        &["vrs"][..],
        &["--json", "vrs"],
        &["vr", "show", OWN],
        &["routes", "list", OWN],
        &["routes", "add", OWN, "10.70.0.0/16", "--via", "10.0.0.254"],
        &["routes", "add", OWN, "10.71.0.0/16", "--blackhole"],
        &["routes", "add", OWN, "2001:db8:71::/48", "--unreachable"],
        &["routes", "del", OWN, "10.71.0.0/16"],
        &["routes", "del", OWN, "10.71.0.0/16", "--missing-ok"],
        &["addr", "list", OWN, "red0"],
        &["addr", "add", OWN, "red0", "10.0.5.1/24"],
        &["addr", "del", OWN, "red0", "10.0.5.1/24"],
        &["neigh", "list", OWN],
        &["neigh", "add", OWN, "10.0.0.8", "02:00:00:00:00:08"],
        &["neigh", "del", OWN, "10.0.0.8"],
        &["counters"],
        &["counters", OWN],
        &["ports"],
        &["workers"],
    ] {
        assert_eq!(ctl(&s, &a, args), ok(), "{args:?}");
    }
    let c = s.admin();
    let routes = c.all_routes(OWN).unwrap();
    assert_eq!(routes.len(), 3, "{routes:?}");

    // Bulk load from a routes file.
    let file = dir.join("routes.txt");
    std::fs::write(
        &file,
        "# extra\n10.80.0.0/16 10.0.0.254\n10.81.0.0/16 blackhole\n",
    )
    .unwrap();
    assert_eq!(
        ctl(&s, &a, &["routes", "load", OWN, file.to_str().unwrap()]),
        ok()
    );
    assert_eq!(c.all_routes(OWN).unwrap().len(), 5);

    // Create a VR from a config excerpt, then delete it.
    let vr = dir.join("green.toml");
    std::fs::write(
        &vr,
        "[[router]]\nname = \"green\"\n[[router.interface]]\nname = \"g0\"\nport = \"p0\"\nvlan = 7\naddresses = [\"10.0.0.1/24\"]\n",
    )
    .unwrap();
    assert_eq!(
        ctl(&s, &a, &["vr", "create", "--file", vr.to_str().unwrap()]),
        ok()
    );
    assert_eq!(c.vr("green").unwrap().interfaces[0].vlan, Some(7));
    assert_eq!(ctl(&s, &a, &["vr", "delete", "green"]), ok());

    // Reload: rejected (exit 1, nothing changed), then accepted.
    let conf = dir.join("new.toml");
    std::fs::write(&conf, "[[router]]\nname = \"\"\n").unwrap();
    assert_eq!(ctl(&s, &a, &["reload", conf.to_str().unwrap()]), failed());
    assert_eq!(c.vrs().unwrap().len(), 2);
    std::fs::write(&conf, "[[router]]\nname = \"red\"\n").unwrap();
    assert_eq!(ctl(&s, &a, &["reload", conf.to_str().unwrap()]), ok());
    assert_eq!(c.vrs().unwrap().len(), 1);
}

#[test]
fn ctl_reports_api_errors_with_exit_status_1() {
    let s = TestServer::start();
    let own = s.own.clone();
    assert_eq!(ctl(&s, &own, &["vr", "show", OTHER]), failed());
    assert_eq!(ctl(&s, &own, &["ports"]), failed());
    assert_eq!(ctl(&s, "wrong", &["vrs"]), failed());
    assert_eq!(
        ctl(&s, &own, &["routes", "del", OWN, "10.99.0.0/16"]),
        failed()
    );
    assert_eq!(ctl(&s, &own, &["vr", "show", OWN]), ok());
}

#[test]
fn ctl_without_a_server_is_an_error_naming_the_socket() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("absent.sock");
    let cli = Cli::try_parse_from(["ctl", "--socket", socket.to_str().unwrap(), "vrs"]).unwrap();
    let err = ctl_main(cli.ctl).unwrap_err();
    assert!(format!("{err:#}").contains("absent.sock"), "{err:#}");
}

#[test]
fn tables_render_server_data() {
    let s = TestServer::start();
    let c = s.admin();
    let vrs = vrhost_api::table::vrs(&c.vrs().unwrap());
    assert!(vrs.starts_with("NAME"), "{vrs}");
    assert!(vrs.lines().any(|l| l.starts_with("red ")), "{vrs}");
    let counters = vrhost_api::table::counters(&c.counters().unwrap());
    assert!(counters.contains("red/red0"), "{counters}");
    assert!(counters.contains("ttl_exceeded"), "{counters}");
    // The mock's red took 4.5 s of worker time (1.5 s a letter).
    assert!(
        counters
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["red", "4.500"]),
        "{counters}"
    );
    let routes = vrhost_api::table::routes(&c.all_routes(OWN).unwrap());
    assert!(
        routes.contains("0.0.0.0/0") && routes.contains("via 10.0.0.254"),
        "{routes}"
    );
    let detail = vrhost_api::table::vr_detail(&c.vr(OWN).unwrap());
    assert!(detail.contains("10.0.0.1/24, 2001:db8::1/64"), "{detail}");
}
