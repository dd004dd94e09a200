//! The API over real HTTP on a temporary Unix socket, with the fixture backend.

mod common;

use std::os::unix::fs::{FileTypeExt, PermissionsExt};

use common::{spec, TestServer, OTHER, OWN};
use serde_json::{json, Value};
use vrhost_api::client::RawResponse;
use vrhost_api::types::{BulkRoutes, Neighbor, Outcome, Route, RouteTarget};
use vrhost_api::{endpoints, Access, ApiError, ClientError, Endpoint};

/// A concrete request for an endpoint: path parameters filled for `vr`, and a
/// valid body where the endpoint takes one.
fn request_for(e: &Endpoint, vr: &str) -> (String, Option<(&'static str, Vec<u8>)>) {
    let path = e
        .path
        .replace("{vr}", vr)
        .replace("{iface}", &format!("{vr}0"))
        .replace(
            "{addr}/{len}",
            if e.path.contains("/routes/") {
                "0.0.0.0/0"
            } else {
                "10.0.0.1/24"
            },
        )
        .replace("{address}", "10.0.0.254");
    let json_body = |v: Value| Some(("application/json", v.to_string().into_bytes()));
    let body = match (e.method.as_str(), e.path) {
        ("POST", "/v1/vrs") => json_body(serde_json::to_value(spec("new-vr", "p0")).unwrap()),
        ("POST", p) if p.ends_with("/addresses") => json_body(json!({"address": "10.0.0.9/24"})),
        ("POST", p) if p.ends_with("/interfaces") => json_body(
            json!({"name": "x9", "port": "p0", "vlan": 9, "addresses": ["10.9.0.1/24"]}),
        ),
        ("POST", p) if p.ends_with("/routes") => {
            json_body(json!({"prefix": "10.99.0.0/16", "via": "10.0.0.254"}))
        }
        ("POST", p) if p.ends_with("/bulk") => json_body(
            json!({"add": [{"prefix": "10.98.0.0/16", "blackhole": true}], "delete": ["10.97.0.0/16"]}),
        ),
        ("PUT", p) if p.ends_with("/filters") => json_body(json!({
            "filter": [{"name": "edge", "default": "deny", "rule": [
                {"action": "permit", "protocol": "tcp", "dst_port": "1024-65535"}
            ]}],
            "interface": [{"name": format!("{vr}0"), "filter_in": "edge"}],
        })),
        ("POST", p) if p.ends_with("/neighbors") => {
            json_body(json!({"address": "10.0.0.7", "mac": "02:00:00:00:00:07"}))
        }
        ("POST", "/v1/config/reload") => Some((
            "application/toml",
            b"[[router]]\nname = \"red\"\n[[router.interface]]\nname = \"red0\"\nport = \"p0\"\naddresses = [\"10.0.0.1/24\"]\n".to_vec(),
        )),
        _ => None,
    };
    (path, body)
}

fn send(client: &vrhost_api::Client, e: &Endpoint, vr: &str) -> RawResponse {
    let (path, body) = request_for(e, vr);
    client
        .raw(
            e.method.as_str(),
            &path,
            body.as_ref().map(|(t, b)| (*t, b.as_slice())),
        )
        .unwrap_or_else(|err| panic!("{} {path}: {err}", e.method))
}

fn text(r: &RawResponse) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

fn error_of(r: &RawResponse) -> Value {
    serde_json::from_slice(&r.body).unwrap_or_else(|_| panic!("not a JSON error body: {}", text(r)))
}

#[test]
fn admin_uses_every_endpoint() {
    let s = TestServer::start();
    let c = s.admin();

    let vrs = c.vrs().unwrap();
    assert_eq!(
        vrs.iter().map(|v| v.name.as_str()).collect::<Vec<_>>(),
        [OTHER, OWN]
    );
    let red = c.vr(OWN).unwrap();
    assert_eq!(red.interfaces[0].name, "red0");
    assert_eq!(red.routes_v4, 1);
    assert_eq!(c.interfaces(OWN).unwrap(), red.interfaces);

    // Create and delete a VR.
    let created = c.create_vr(&spec("green", "p1")).unwrap();
    assert_eq!(created.name, "green");
    assert!(matches!(
        c.create_vr(&spec("green", "p1")),
        Err(ClientError::Api(ApiError::Conflict(_)))
    ));
    c.delete_vr("green").unwrap();
    assert_eq!(c.vr("green").unwrap_err().api(), Some(&ApiError::NoSuchVr));

    // Addresses: add is idempotent, delete honours missing_ok.
    let a = "10.0.1.1/24".parse().unwrap();
    assert_eq!(c.add_address(OWN, "red0", a).unwrap(), Outcome::Created);
    assert_eq!(c.add_address(OWN, "red0", a).unwrap(), Outcome::Unchanged);
    assert!(c.addresses(OWN, "red0").unwrap().contains(&a));
    assert_eq!(
        c.delete_address(OWN, "red0", a, false).unwrap(),
        Outcome::Deleted
    );
    assert!(matches!(
        c.delete_address(OWN, "red0", a, false),
        Err(ClientError::Api(ApiError::NotFound(_)))
    ));
    assert_eq!(
        c.delete_address(OWN, "red0", a, true).unwrap(),
        Outcome::Missing
    );
    assert!(matches!(
        c.addresses(OWN, "nope"),
        Err(ClientError::Api(ApiError::NotFound(_)))
    ));

    // Routes: single, idempotent, conflict, replace, delete, bulk, paging.
    let r = Route::via(
        "10.50.0.0/16".parse().unwrap(),
        "10.0.0.254".parse().unwrap(),
    );
    assert_eq!(c.add_route(OWN, &r, false).unwrap(), Outcome::Created);
    assert_eq!(c.add_route(OWN, &r, false).unwrap(), Outcome::Unchanged);
    let bh = Route {
        prefix: r.prefix,
        target: RouteTarget::Blackhole,
    };
    assert!(matches!(
        c.add_route(OWN, &bh, false),
        Err(ClientError::Api(ApiError::Conflict(_)))
    ));
    assert_eq!(c.add_route(OWN, &bh, true).unwrap(), Outcome::Replaced);
    assert_eq!(
        c.delete_route(OWN, r.prefix, false).unwrap(),
        Outcome::Deleted
    );
    assert_eq!(
        c.delete_route(OWN, r.prefix, true).unwrap(),
        Outcome::Missing
    );
    assert!(matches!(
        c.delete_route(OWN, r.prefix, false),
        Err(ClientError::Api(ApiError::NotFound(_)))
    ));
    let add: Vec<Route> = (0..250u32)
        .map(|i| Route {
            prefix: format!("172.16.{}.0/24", i).parse().unwrap(),
            target: RouteTarget::Unreachable,
        })
        .collect();
    let bulk = BulkRoutes {
        add: add.clone(),
        delete: vec!["192.0.2.0/24".parse().unwrap()],
        replace: false,
    };
    let res = c.bulk_routes(OWN, &bulk).unwrap();
    assert_eq!((res.created, res.missing), (250, 1));
    let res = c.bulk_routes(OWN, &bulk).unwrap();
    assert_eq!(
        (res.created, res.unchanged, res.missing),
        (0, 250, 1),
        "bulk add is idempotent"
    );
    let page = c.routes(OWN, 10, 100).unwrap();
    assert_eq!((page.total, page.offset, page.routes.len()), (251, 10, 100));
    assert_eq!(c.all_routes(OWN).unwrap().len(), 251);
    let del = BulkRoutes {
        delete: add.iter().map(|r| r.prefix).collect(),
        ..BulkRoutes::default()
    };
    assert_eq!(c.bulk_routes(OWN, &del).unwrap().deleted, 250);
    // A bad route in a bulk request changes nothing and names its index.
    let bad = BulkRoutes {
        add: vec![
            add[0].clone(),
            Route::via(
                "10.60.0.0/16".parse().unwrap(),
                "192.0.2.1".parse().unwrap(),
            ),
        ],
        ..BulkRoutes::default()
    };
    match c.bulk_routes(OWN, &bad) {
        Err(ClientError::Api(ApiError::BadRequest { field, .. })) => {
            assert_eq!(field, "add[1].via")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(c.routes(OWN, 0, 10).unwrap().total, 1);

    // Neighbours.
    let n = Neighbor {
        address: "10.0.0.7".parse().unwrap(),
        mac: "02:00:00:00:00:07".parse().unwrap(),
        interface: None,
    };
    assert_eq!(c.add_neighbor(OWN, &n).unwrap(), Outcome::Created);
    assert_eq!(c.add_neighbor(OWN, &n).unwrap(), Outcome::Unchanged);
    let listed = c.neighbors(OWN).unwrap();
    assert!(listed
        .iter()
        .any(|x| x.address == n.address && x.interface.as_deref() == Some("red0")));
    assert_eq!(
        c.delete_neighbor(OWN, n.address, false).unwrap(),
        Outcome::Deleted
    );
    assert_eq!(
        c.delete_neighbor(OWN, n.address, true).unwrap(),
        Outcome::Missing
    );

    // Counters, ports, workers.
    let vc = c.vr_counters(OWN).unwrap();
    assert_eq!(vc.total.drops["ttl_exceeded"], 3);
    assert_eq!(c.counters().unwrap().len(), 2);
    assert_eq!(c.ports().unwrap().len(), 2);
    assert_eq!(c.workers().unwrap().len(), 2);

    // Reload: a bad config changes nothing and lists its keys.
    let bad = "[[router]]\nname = \"x\"\n[[router.interface]]\nname = \"x0\"\nport = \"p9\"\n";
    match c.reload(bad) {
        Err(ClientError::Api(ApiError::Config(issues))) => {
            assert_eq!(issues[0].key, "router[0].interfaces[0].port");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(c.vrs().unwrap().len(), 2);
    let good = "[[router]]\nname = \"red\"\n[[router]]\nname = \"violet\"\n";
    let report = c.reload(good).unwrap();
    assert_eq!(report.created, ["violet"]);
    assert_eq!(report.deleted, [OTHER]);
    assert_eq!(report.changed, [OWN]);

    assert!(c.metrics().unwrap().contains("vrhost_vr_rx_packets_total"));
    assert_eq!(c.openapi().unwrap()["openapi"], "3.1.0");
}

#[test]
fn another_vrs_token_learns_nothing_on_any_endpoint() {
    let s = TestServer::start();
    let red = s.client(Some(&s.own));
    let absent = "no-such-vr-0000";
    for e in endpoints() {
        let other = send(&red, &e, OTHER);
        let label = format!("{} {}", e.method, e.path);
        assert!(
            !text(&other).contains(OTHER),
            "{label}: body names the other VR: {}",
            text(&other)
        );
        match e.access {
            Access::Vr => {
                assert_eq!(other.status, 404, "{label}: {}", text(&other));
                let missing = send(&red, &e, absent);
                assert_eq!(
                    (other.status, &other.body),
                    (missing.status, &missing.body),
                    "{label}: another tenant's VR must answer exactly like a missing one"
                );
                assert_eq!(error_of(&other)["error"], "no_such_vr");
            }
            Access::Admin => {
                assert_eq!(other.status, 403, "{label}: {}", text(&other));
                assert_eq!(error_of(&other)["error"], "forbidden");
            }
            Access::Any => assert_eq!(other.status, 200, "{label}: {}", text(&other)),
        }
    }
    // Even a malformed body or query answers the same 404: scoping comes first.
    for (method, path, body) in [
        ("POST", "/v1/vrs/{}/routes", "{not json"),
        ("POST", "/v1/vrs/{}/routes/bulk", "{\"add\": 5}"),
        ("GET", "/v1/vrs/{}/routes?limit=banana", ""),
        ("DELETE", "/v1/vrs/{}/routes/10.0.0.1/8", ""),
    ] {
        let a = red
            .raw(
                method,
                &path.replace("{}", OTHER),
                Some(("application/json", body.as_bytes())),
            )
            .unwrap();
        let b = red
            .raw(
                method,
                &path.replace("{}", absent),
                Some(("application/json", body.as_bytes())),
            )
            .unwrap();
        assert_eq!((a.status, &a.body), (404, &b.body), "{method} {path}");
    }
    // Listings hold only the token's own VR.
    let vrs = red.vrs().unwrap();
    assert_eq!(
        vrs.iter().map(|v| v.name.as_str()).collect::<Vec<_>>(),
        [OWN]
    );
    assert_eq!(red.counters().unwrap().len(), 1);
    // The token does work on its own VR.
    for e in endpoints().iter().filter(|e| e.access == Access::Vr) {
        let r = send(&red, e, OWN);
        assert!(
            (200..300).contains(&r.status),
            "{} {}: {} {}",
            e.method,
            e.path,
            r.status,
            text(&r)
        );
    }
    // And the other VR is untouched by all of the above.
    let admin = s.admin();
    assert_eq!(admin.vr(OTHER).unwrap().routes_v4, 1);
    assert_eq!(admin.neighbors(OTHER).unwrap().len(), 1);
}

#[test]
fn requests_without_a_valid_token_are_401() {
    let s = TestServer::start();
    for client in [
        s.client(None),
        s.client(Some("not-a-token")),
        s.client(Some("")),
    ] {
        for e in endpoints() {
            let r = send(&client, &e, OWN);
            assert_eq!(r.status, 401, "{} {}", e.method, e.path);
            assert_eq!(error_of(&r)["error"], "unauthorized");
        }
    }
}

#[test]
fn bad_requests_answer_400_naming_the_field() {
    let s = TestServer::start();
    let c = s.admin();
    let cases: &[(&str, &str, &str, &str)] = &[
        ("POST", "/v1/vrs/red/routes", "{not json", "body"),
        (
            "POST",
            "/v1/vrs/red/routes",
            r#"{"prefix": "10.0.0.1/8", "via": "10.0.0.254"}"#,
            "prefix",
        ),
        (
            "POST",
            "/v1/vrs/red/routes",
            r#"{"prefix": "10.0.0.0/8", "via": "banana"}"#,
            "via",
        ),
        (
            "POST",
            "/v1/vrs/red/routes",
            r#"{"prefix": "10.0.0.0/8", "via": "10.0.0.254", "gw": 1}"#,
            "gw",
        ),
        (
            "POST",
            "/v1/vrs/red/routes",
            r#"{"prefix": "10.0.0.0/8"}"#,
            "body",
        ),
        (
            "POST",
            "/v1/vrs/red/routes",
            r#"{"prefix": "10.0.0.0/8", "interface": "red0"}"#,
            "body",
        ),
        (
            "POST",
            "/v1/vrs/red/routes/bulk",
            r#"{"add": [{"prefix": "10.0.0.0/8", "blackhole": true}, {"prefix": "bad"}]}"#,
            "add[1].prefix",
        ),
        (
            "POST",
            "/v1/vrs/red/routes/bulk",
            r#"{"delete": ["10.0.0.0/40"]}"#,
            "delete[0]",
        ),
        (
            "POST",
            "/v1/vrs/red/interfaces/red0/addresses",
            r#"{"address": "10.0.0.1"}"#,
            "address",
        ),
        (
            "POST",
            "/v1/vrs/red/neighbors",
            r#"{"address": "10.0.0.7", "mac": "zz"}"#,
            "mac",
        ),
        (
            "POST",
            "/v1/vrs",
            r#"{"name": "x", "interfaces": [{"name": "x0", "port": "p0", "vlan": "ten"}]}"#,
            "interfaces[0].vlan",
        ),
        (
            "POST",
            "/v1/vrs",
            r#"{"name": "x", "interfaces": [{"name": "x0", "port": "p7"}]}"#,
            "interfaces[0].port",
        ),
        ("DELETE", "/v1/vrs/red/routes/10.0.0.1/8", "", "prefix"),
        ("DELETE", "/v1/vrs/red/routes/10.0.0.0/99", "", "prefix"),
        (
            "DELETE",
            "/v1/vrs/red/interfaces/red0/addresses/10.0.0.1/x",
            "",
            "address",
        ),
        ("DELETE", "/v1/vrs/red/neighbors/not-an-ip", "", "address"),
        ("GET", "/v1/vrs/red/routes?limit=banana", "", "query"),
        ("GET", "/v1/vrs/red/routes?limit=100001", "", "limit"),
        ("GET", "/v1/vrs/red/routes?offest=3", "", "query"),
        (
            "DELETE",
            "/v1/vrs/red/routes/10.0.0.0/8?missing_ok=perhaps",
            "",
            "query",
        ),
    ];
    for (method, path, body, field) in cases {
        let body = (!body.is_empty()).then_some(("application/json", body.as_bytes()));
        let r = c.raw(method, path, body).unwrap();
        assert_eq!(r.status, 400, "{method} {path}: {}", text(&r));
        let e = error_of(&r);
        assert_eq!(e["error"], "bad_request");
        assert_eq!(e["field"], *field, "{method} {path}: {e}");
        assert!(!e["message"].as_str().unwrap_or("").is_empty());
    }
    let r = c.raw("GET", "/v1/nothing-here", None).unwrap();
    assert_eq!(
        (r.status, error_of(&r)["error"].as_str()),
        (404, Some("not_found"))
    );
}

#[test]
fn openapi_describes_exactly_what_is_served() {
    let s = TestServer::start();
    let c = s.admin();
    let doc = c.openapi().unwrap();
    let served = endpoints();
    let mut described = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            described += 1;
            let e = served
                .iter()
                .find(|e| e.path == path && e.method.as_str().eq_ignore_ascii_case(method))
                .unwrap_or_else(|| panic!("{method} {path} is described but not served"));
            let access = match e.access {
                Access::Any => "any",
                Access::Vr => "vr",
                Access::Admin => "admin",
            };
            assert_eq!(op["x-vrhost-access"], access, "{method} {path}");
        }
    }
    assert_eq!(
        described,
        served.len(),
        "every served endpoint is described"
    );
    // Every recorded endpoint really is routed (not the fallback, not 405).
    for e in &served {
        let r = send(&c, e, OWN);
        let fallback = r.status == 404 && error_of(&r)["message"] == "no such endpoint";
        assert!(
            !fallback && r.status != 405,
            "{} {} is not routed: {}",
            e.method,
            e.path,
            r.status
        );
    }
}

/// Parses Prometheus / OpenMetrics text into (series, value), checking every
/// line's syntax.
fn parse_metrics(text: &str) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.last(), Some(&"# EOF"));
    for line in lines {
        if let Some(meta) = line.strip_prefix("# ") {
            let kind = meta.split(' ').next().unwrap();
            assert!(["HELP", "TYPE", "UNIT", "EOF"].contains(&kind), "{line}");
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("bad line {line}"));
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value in {line}"));
        let name_end = series.find('{').unwrap_or(series.len());
        let name = &series[..name_end];
        assert!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad metric name in {line}"
        );
        if name_end < series.len() {
            let labels = series[name_end..]
                .strip_prefix('{')
                .and_then(|l| l.strip_suffix('}'))
                .unwrap();
            for pair in labels.split("\",").filter(|p| !p.is_empty()) {
                let (k, v) = pair
                    .split_once("=\"")
                    .unwrap_or_else(|| panic!("bad label in {line}"));
                assert!(
                    k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                    "{line}"
                );
                assert!(!v.trim_end_matches('"').contains('"'), "{line}");
            }
        }
        out.push((series.to_string(), value));
    }
    out
}

#[test]
fn metrics_parse_and_a_vr_token_sees_only_its_series() {
    let s = TestServer::start();
    let admin = parse_metrics(&s.admin().metrics().unwrap());
    let get =
        |m: &[(String, f64)], series: &str| m.iter().find(|(s, _)| s == series).map(|(_, v)| *v);
    assert_eq!(
        get(&admin, "vrhost_vr_rx_packets_total{vr=\"red\"}"),
        Some(103.0)
    );
    assert_eq!(
        get(
            &admin,
            "vrhost_vr_drops_total{vr=\"red\",reason=\"ttl_exceeded\"}"
        ),
        Some(3.0)
    );
    assert_eq!(
        get(
            &admin,
            "vrhost_interface_tx_bytes_total{vr=\"red\",interface=\"red0\"}"
        ),
        Some(5761.0)
    );
    assert_eq!(
        get(&admin, "vrhost_port_rx_packets_total{port=\"p1\"}"),
        Some(101.0)
    );
    assert_eq!(get(&admin, "vrhost_worker_load{worker=\"1\"}"), Some(0.5));
    // The mock's red: 1.5 s of worker time for each letter of its name.
    assert_eq!(
        get(&admin, "vrhost_vr_busy_seconds_total{vr=\"red\"}"),
        Some(4.5)
    );
    assert_eq!(
        get(&admin, "vrhost_vr_routes{vr=\"red\",family=\"ipv4\"}"),
        Some(1.0)
    );
    assert!(admin.iter().any(|(s, _)| s.contains(OTHER)));

    let own = s.client(Some(&s.own)).metrics().unwrap();
    let parsed = parse_metrics(&own);
    assert!(!own.contains(OTHER), "a VR token's metrics name another VR");
    assert!(parsed
        .iter()
        .all(|(s, _)| !s.starts_with("vrhost_port_") && !s.starts_with("vrhost_worker_")));
    assert_eq!(
        get(&parsed, "vrhost_vr_rx_packets_total{vr=\"red\"}"),
        Some(103.0)
    );
}

#[test]
fn socket_is_private_stale_sockets_are_replaced_live_ones_are_not() {
    let s = TestServer::start();
    let meta = std::fs::metadata(s.socket()).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);

    // A second server on the same live socket is refused.
    let cfg = vrhost_api::ApiConfig {
        socket: s.socket(),
        listen: None,
        tls: None,
        auth: std::sync::Arc::new(
            vrhost_api::Auth::new(&vrhost_api::hash_token("x"), &[]).expect("hash"),
        ),
    };
    let backend = std::sync::Arc::new(common::FixtureBackend::new());
    let err = vrhost_api::spawn(cfg.clone(), backend.clone())
        .err()
        .expect("refused");
    assert!(err.to_string().contains("another server"), "{err}");

    // A stale socket (left by a dead server) is replaced.
    let stale_path = s.dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale_path).unwrap());
    let h = vrhost_api::spawn(
        vrhost_api::ApiConfig {
            socket: stale_path.clone(),
            ..cfg.clone()
        },
        backend.clone(),
    )
    .unwrap();
    h.stop().unwrap();
    assert!(!stale_path.exists(), "the socket is removed at stop");

    // A regular file is never replaced.
    let file = s.dir.path().join("file");
    std::fs::write(&file, "keep").unwrap();
    assert!(vrhost_api::spawn(
        vrhost_api::ApiConfig {
            socket: file.clone(),
            ..cfg.clone()
        },
        backend.clone()
    )
    .is_err());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep");

    // A bad token hash is refused before any server starts.
    assert!(vrhost_api::Auth::new("nope", &[]).is_err());

    // The socket's directory is created private, and one that others may
    // write to (they could replace the socket) is refused.
    let nested = s.dir.path().join("run/vrhost/api.sock");
    let h = vrhost_api::spawn(
        vrhost_api::ApiConfig {
            socket: nested.clone(),
            ..cfg.clone()
        },
        backend.clone(),
    )
    .unwrap();
    let dir_mode = std::fs::metadata(nested.parent().unwrap())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(dir_mode & 0o777, 0o700);
    h.stop().unwrap();
    let open_dir = s.dir.path().join("open");
    std::fs::create_dir(&open_dir).unwrap();
    std::fs::set_permissions(&open_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let err = vrhost_api::spawn(
        vrhost_api::ApiConfig {
            socket: open_dir.join("api.sock"),
            ..cfg
        },
        backend,
    )
    .err()
    .expect("refused");
    assert!(err.to_string().contains("writable by others"), "{err:#}");
    assert!(!open_dir.join("api.sock").exists());
}

#[test]
fn tcp_listener_serves_the_same_api() {
    let s = TestServer::start_with(Some("127.0.0.1:0".parse().unwrap()));
    let addr = s.handle.tcp_addr().expect("bound");
    let c = vrhost_api::Client::url(&format!("http://{addr}"), Some(s.other.clone())).unwrap();
    let vrs = c.vrs().unwrap();
    assert_eq!(vrs.len(), 1);
    assert_eq!(vrs[0].name, OTHER);
    assert_eq!(c.vr(OWN).unwrap_err().api(), Some(&ApiError::NoSuchVr));
}

/// A self-signed certificate for `localhost`, written as `cert.pem` and
/// `key.pem` into `dir`.
fn self_signed(dir: &std::path::Path) -> vrhost_api::TlsFiles {
    let c = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("cert");
    let files = vrhost_api::TlsFiles {
        cert: dir.join("cert.pem"),
        key: dir.join("key.pem"),
    };
    std::fs::write(&files.cert, c.cert.pem()).expect("cert.pem");
    std::fs::write(&files.key, c.key_pair.serialize_pem()).expect("key.pem");
    files
}

#[test]
fn tls_listener_serves_the_api_and_refuses_plain_http() {
    let s = TestServer::start_tls(Some("127.0.0.1:0".parse().unwrap()), |d| {
        Some(self_signed(d))
    });
    let port = s.handle.tcp_addr().expect("bound").port();
    let ca = s.dir.path().join("cert.pem");
    let url = format!("https://localhost:{port}");
    let c = vrhost_api::Client::url_with_ca(&url, Some(s.other.clone()), Some(&ca)).unwrap();
    let vrs = c.vrs().unwrap();
    assert_eq!(vrs.len(), 1);
    assert_eq!(vrs[0].name, OTHER);

    // Plain HTTP on the TLS port gets no answer; a wrong CA is refused.
    let plain = vrhost_api::Client::url(&format!("http://127.0.0.1:{port}"), Some(s.other.clone()))
        .unwrap()
        .with_timeout(std::time::Duration::from_secs(15));
    assert!(plain.vrs().is_err());
    let other = tempfile::tempdir().unwrap();
    let wrong = self_signed(other.path());
    let c =
        vrhost_api::Client::url_with_ca(&url, Some(s.other.clone()), Some(&wrong.cert)).unwrap();
    assert!(c.vrs().is_err(), "a certificate from another CA");
    assert!(
        vrhost_api::Client::url(&url, None).is_err(),
        "https needs a CA file"
    );

    // Unreadable TLS files stop the server from starting, naming the file.
    let bad = vrhost_api::TlsFiles {
        cert: s.dir.path().join("missing.pem"),
        key: s.dir.path().join("key.pem"),
    };
    let err = vrhost_api::spawn(
        vrhost_api::ApiConfig {
            socket: s.dir.path().join("b.sock"),
            listen: Some("127.0.0.1:0".parse().unwrap()),
            tls: Some(bad),
            auth: std::sync::Arc::new(
                vrhost_api::Auth::new(&vrhost_api::hash_token("x"), &[]).unwrap(),
            ),
        },
        s.backend.clone(),
    )
    .err()
    .expect("refused");
    assert!(format!("{err:#}").contains("missing.pem"), "{err:#}");
}

#[test]
fn slow_and_idle_clients_are_cut_off_and_connections_are_capped() {
    use std::io::{Read, Write};
    let s = TestServer::start_with(Some("127.0.0.1:0".parse().unwrap()));
    let addr = s.handle.tcp_addr().expect("bound");
    let c = vrhost_api::Client::url(&format!("http://{addr}"), Some(s.other.clone())).unwrap();
    // Headers a byte at a time, never finished: closed after the header
    // timeout while other clients are served.
    let t0 = std::time::Instant::now();
    let mut slow = std::net::TcpStream::connect(addr).unwrap();
    slow.write_all(b"GET /v1/vrs HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    slow.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    assert!(c.vrs().is_ok());
    let mut buf = Vec::new();
    let _ = slow.read_to_end(&mut buf);
    let took = t0.elapsed();
    assert!(
        took >= vrhost_api::listen::HEADER_TIMEOUT && took < std::time::Duration::from_secs(25),
        "closed after {took:?}"
    );

    // Past the cap of connections from one address, a new one is closed at
    // once; the API serves again once the idle ones are gone.
    let idle: Vec<_> = (0..vrhost_api::listen::MAX_PER_PEER)
        .map(|_| std::net::TcpStream::connect(addr).unwrap())
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut extra = std::net::TcpStream::connect(addr).unwrap();
    extra
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let mut one = [0u8; 1];
    assert!(matches!(extra.read(&mut one), Ok(0) | Err(_)));
    drop(idle);
    let t0 = std::time::Instant::now();
    while c.vrs().is_err() {
        assert!(t0.elapsed() < std::time::Duration::from_secs(5));
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
