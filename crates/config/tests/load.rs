//! The public entry points against real files.

use std::path::PathBuf;

use vrhost_config::{Config, EXAMPLE, EXAMPLE_ROUTES_FILE, EXAMPLE_ROUTES_FILE_NAME};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vrhost-config-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn load_reads_the_routes_file_next_to_the_config() {
    let dir = temp_dir("load");
    std::fs::write(dir.join("vrhost.toml"), EXAMPLE).unwrap();
    std::fs::write(dir.join(EXAMPLE_ROUTES_FILE_NAME), EXAMPLE_ROUTES_FILE).unwrap();
    let c = Config::load(&dir.join("vrhost.toml")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.router("red").unwrap().routes.len(), 8);
    assert_eq!(
        c.ports[0].rx.as_deref(),
        Some(dir.join("red-in.pcap").as_path())
    );
}

#[test]
fn load_reports_a_missing_routes_file() {
    let dir = temp_dir("no-routes");
    std::fs::write(dir.join("vrhost.toml"), EXAMPLE).unwrap();
    let errs = Config::load(&dir.join("vrhost.toml")).unwrap_err();
    assert_eq!(errs.0.len(), 1, "{errs}");
    assert_eq!(errs.0[0].key, "router \"red\".routes_file");
    assert!(errs.0[0].reason.starts_with("cannot read "), "{errs}");
}

#[test]
fn load_reports_a_missing_config() {
    let errs = Config::load(&temp_dir("missing").join("nope.toml")).unwrap_err();
    assert_eq!(errs.0[0].key, "config");
    assert!(errs.0[0].reason.contains("cannot read"), "{errs}");
}

#[test]
fn load_rejects_non_utf8() {
    let dir = temp_dir("utf8");
    std::fs::write(dir.join("bad.toml"), b"name = \"\xff\"\n").unwrap();
    let errs = Config::load(&dir.join("bad.toml")).unwrap_err();
    assert_eq!(errs.0[0].key, "config");
    assert!(
        errs.0[0]
            .reason
            .contains("is not UTF-8 (bad byte at offset 8)"),
        "{errs}"
    );
}

#[test]
fn default_worker_is_the_last_core() {
    let c = Config::from_toml_str("", std::path::Path::new(".")).unwrap();
    let allowed = vrhost_config::allowed_cores();
    assert_eq!(c.dataplane.workers, [*allowed.last().expect("a core")]);
}

#[test]
fn the_config_reference_shows_the_example_verbatim() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/config.md"))
        .unwrap();
    assert!(
        doc.contains(vrhost_config::EXAMPLE),
        "docs/config.md is out of date with EXAMPLE"
    );
    assert!(doc.contains(vrhost_config::EXAMPLE_ROUTES_FILE));
}

#[test]
fn restart_keys_default_resolve_and_are_checked() {
    let base = std::path::Path::new("/etc/vrhost");
    let c = Config::from_toml_str("", base).unwrap();
    assert_eq!(c.dataplane.runtime_dir, PathBuf::from("/run/vrhost"));
    assert_eq!(c.dataplane.tap_hold, std::time::Duration::from_secs(30));
    let c =
        Config::from_toml_str("[dataplane]\nruntime_dir = \"run\"\ntap_hold = 0\n", base).unwrap();
    assert_eq!(c.dataplane.runtime_dir, base.join("run"));
    assert!(c.dataplane.tap_hold.is_zero());
    for bad in ["tap_hold = -1", "tap_hold = 3601", "runtime_dir = \"\""] {
        let errs = Config::from_toml_str(&format!("[dataplane]\n{bad}\n"), base).unwrap_err();
        let key = bad.split(' ').next().unwrap();
        assert!(
            errs.0
                .iter()
                .any(|e| e.to_string().contains(&format!("dataplane.{key}"))),
            "{bad}: {errs}"
        );
    }
}
