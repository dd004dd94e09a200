//! The real API backend over a running data plane, in process: requests go
//! through `vrhost_api::router` (authentication, parsing, status codes) to
//! `RuntimeBackend` and the table writer the workers read, with no socket
//! and no spawned binary.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{json, Value};
use tower::ServiceExt as _;
use vrhost_api::{generate_token, hash_token, Auth};
use vrhost_config::Config;
use vrhost_daemon::api_backend::{vr_tokens, RuntimeBackend};
use vrhost_daemon::runtime::{lock, Mode, Running, Runtime};

const CONFIG: &str = r#"
[[port]]
name = "p0"
driver = "memory"
mac = "02:00:00:00:00:01"

[[router]]
name = "red"
  [[router.interface]]
  name = "red0"
  port = "p0"
  vlan = 10
  addresses = ["10.0.0.1/24", "2001:db8::1/64"]
  [[router.route]]
  prefix = "10.9.0.0/16"
  via = "10.0.0.9"
  [router.limits]
  max_routes = 1000
  max_nexthop_groups = 2
  max_addresses = 4
  max_neighbors = 2

[[router]]
name = "blue"
  [[router.interface]]
  name = "blue0"
  port = "p0"
  vlan = 20
  addresses = ["10.0.0.1/24"]
"#;

/// A running data plane for `CONFIG` with red's token, the API over it, the
/// admin and red tokens, and the config text in force.
struct Fixture {
    running: Option<Running>,
    app: axum::Router,
    admin: String,
    red: String,
    config: String,
}

impl Fixture {
    fn new() -> Fixture {
        let (admin, red) = (generate_token(), generate_token());
        let config = CONFIG.replacen(
            "name = \"red\"\n",
            &format!(
                "name = \"red\"\napi_token_sha256 = \"{}\"\n",
                hash_token(&red)
            ),
            1,
        );
        let cfg = Config::from_toml_str(&config, std::path::Path::new(".")).expect("config");
        let rt = Runtime::from_config(&cfg, &cfg.dataplane.workers, Mode::Rtc).expect("runtime");
        let running = rt.start();
        let auth =
            Arc::new(Auth::new(&hash_token(&admin), &vr_tokens(&cfg)).expect("token hashes"));
        let backend = RuntimeBackend::new(
            &cfg,
            std::path::Path::new("./vrhost.toml"),
            &running,
            auth.clone(),
        );
        Fixture {
            app: vrhost_api::router(Arc::new(backend), auth),
            running: Some(running),
            admin,
            red,
            config,
        }
    }

    fn running(&self) -> &Running {
        self.running.as_ref().expect("running")
    }

    /// Sends one request; returns the status and the JSON body (`Null` when
    /// there is none).
    async fn call(
        &self,
        token: &str,
        method: &str,
        path: &str,
        body: Option<(&str, String)>,
    ) -> (StatusCode, Value) {
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header("authorization", format!("Bearer {token}"));
        let body = match body {
            Some((content_type, b)) => {
                req = req.header("content-type", content_type);
                Body::from(b)
            }
            None => Body::empty(),
        };
        let resp = self
            .app
            .clone()
            .oneshot(req.body(body).expect("request"))
            .await
            .expect("response");
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 24)
            .await
            .expect("body");
        let v = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        (status, v)
    }

    async fn post_json(&self, token: &str, path: &str, v: Value) -> (StatusCode, Value) {
        self.call(
            token,
            "POST",
            path,
            Some(("application/json", v.to_string())),
        )
        .await
    }

    /// `POST /v1/config/reload` of `text` with the admin token.
    async fn reload(&self, text: impl Into<String>) -> (StatusCode, Value) {
        let body = Some(("application/toml", text.into()));
        self.call(&self.admin, "POST", "/v1/config/reload", body)
            .await
    }

    /// Whether the table writer has a VR named `name`.
    fn has_vr(&self, name: &str) -> bool {
        lock(&self.running().writer)
            .working()
            .vr_index(name)
            .is_some()
    }

    /// Adds `prefix` via `gw` to `vr` with `token`; the status.
    async fn add_route(&self, token: &str, vr: &str, prefix: &str, gw: &str) -> StatusCode {
        let path = format!("/v1/vrs/{vr}/routes");
        self.post_json(token, &path, json!({"prefix": prefix, "via": gw}))
            .await
            .0
    }

    /// The route for `prefix` in VR `vr` as the table writer holds it.
    fn route(&self, vr: &str, prefix: &str) -> Option<String> {
        let w = lock(&self.running().writer);
        let v = w.working().vr_index(vr)?;
        let (addr, len) = prefix.split_once('/')?;
        w.route(v, addr.parse().ok()?, len.parse().ok()?)
            .map(|h| format!("{h:?}"))
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Some(r) = self.running.take() {
            r.stop();
        }
    }
}

#[tokio::test]
async fn routes_through_the_api_reach_the_tables_and_stay_in_their_vr() {
    let f = Fixture::new();
    let s = f.add_route(&f.red, "red", "10.77.0.0/16", "10.0.0.7").await;
    assert_eq!(s, StatusCode::CREATED);
    assert!(f.route("red", "10.77.0.0/16").is_some());
    assert_eq!(f.route("blue", "10.77.0.0/16"), None);

    let (s, page) = f.call(&f.red, "GET", "/v1/vrs/red/routes", None).await;
    assert_eq!(s, StatusCode::OK);
    assert!(page.to_string().contains("10.77.0.0"), "{page}");

    // Red's token cannot see or change blue, and is told nothing about it.
    let (s, _) = f.call(&f.red, "GET", "/v1/vrs/blue/routes", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let s = f
        .add_route(&f.red, "blue", "10.66.0.0/16", "10.0.0.6")
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(f.route("blue", "10.66.0.0/16"), None);

    // A gateway no interface covers is refused and changes nothing.
    let s = f
        .add_route(&f.admin, "blue", "10.55.0.0/16", "192.0.2.1")
        .await;
    assert!(s.is_client_error(), "{s}");
    assert_eq!(f.route("blue", "10.55.0.0/16"), None);

    // Malformed bodies are a clear 400, never a panic.
    let (s, _) = f
        .call(
            &f.red,
            "POST",
            "/v1/vrs/red/routes",
            Some(("application/json", "{\"prefix\": ".into())),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let (s, _) = f
        .call(&f.red, "DELETE", "/v1/vrs/red/routes/10.77.0.0/99", None)
        .await;
    assert!(s.is_client_error(), "{s}");
    assert!(f.route("red", "10.77.0.0/16").is_some());
}

#[tokio::test]
async fn a_multipath_route_through_the_api_lists_every_next_hop() {
    let f = Fixture::new();
    let path = "/v1/vrs/red/routes";
    let body =
        json!({"prefix": "10.78.0.0/16", "via": ["10.0.0.7", "10.0.0.8"], "weights": [1, 3]});
    let (s, v) = f.post_json(&f.red, path, body.clone()).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let hop = f.route("red", "10.78.0.0/16").unwrap();
    assert!(hop.starts_with("Group"), "{hop}");
    // The same again is unchanged; another weight needs replace.
    let (s, _) = f.post_json(&f.red, path, body).await;
    assert_eq!(s, StatusCode::OK);
    let other = json!({"prefix": "10.78.0.0/16", "via": ["10.0.0.7", "10.0.0.8"]});
    let (s, _) = f.post_json(&f.red, path, other).await;
    assert_eq!(s, StatusCode::CONFLICT);
    let (s, page) = f.call(&f.red, "GET", path, None).await;
    assert_eq!(s, StatusCode::OK);
    let listed = page["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["prefix"] == "10.78.0.0/16")
        .cloned()
        .unwrap();
    assert_eq!(listed["via"], json!(["10.0.0.7", "10.0.0.8"]), "{listed}");
    assert_eq!(listed["weights"], json!([1, 3]), "{listed}");
    // Bad lists are a 400 naming the problem, and change nothing.
    for (bad, why) in [
        (
            json!({"prefix": "10.79.0.0/16", "via": ["10.0.0.7", "10.0.0.7"]}),
            "given twice",
        ),
        (
            json!({"prefix": "10.79.0.0/16", "via": ["10.0.0.7", "10.0.0.8"], "weights": [1]}),
            "1 weights for 2",
        ),
        (
            json!({"prefix": "10.79.0.0/16", "via": ["10.0.0.7", "2001:db8::1"]}),
            "same family",
        ),
        (
            json!({"prefix": "10.79.0.0/16", "via": "10.0.0.7", "weights": [1]}),
            "weights go with a list",
        ),
    ] {
        let (s, v) = f.post_json(&f.red, path, bad).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
        assert!(v.to_string().contains(why), "{v}");
    }
    // Red may name two gateway sets: a third is refused until a route
    // naming one of the others goes.
    let (s, v) = f
        .post_json(
            &f.red,
            path,
            json!({"prefix": "10.80.0.0/16", "via": ["10.0.0.7", "10.0.0.9"]}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let third = json!({"prefix": "10.81.0.0/16", "via": ["10.0.0.8", "10.0.0.9"]});
    let (s, v) = f.post_json(&f.red, path, third.clone()).await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert!(
        v.to_string()
            .contains("multipath group limit reached (2 groups)"),
        "{v}"
    );
    assert_eq!(f.route("red", "10.81.0.0/16"), None);
    let (s, _) = f
        .call(&f.red, "DELETE", "/v1/vrs/red/routes/10.80.0.0/16", None)
        .await;
    assert!(s.is_success(), "{s}");
    let (s, v) = f.post_json(&f.red, path, third).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    // One gateway off every subnet refuses the whole route.
    let off = json!({"prefix": "10.79.0.0/16", "via": ["10.0.0.7", "192.0.2.1"]});
    let (s, _) = f.post_json(&f.red, path, off).await;
    assert!(s.is_client_error(), "{s}");
    assert_eq!(f.route("red", "10.79.0.0/16"), None);
}

#[tokio::test]
async fn reload_applies_the_difference_or_nothing() {
    let f = Fixture::new();
    let changed = f.config.replace(
        "  prefix = \"10.9.0.0/16\"\n  via = \"10.0.0.9\"",
        "  prefix = \"10.8.0.0/16\"\n  via = \"10.0.0.8\"",
    );
    let (s, report) = f.reload(changed.clone()).await;
    assert_eq!(s, StatusCode::OK, "{report}");
    assert_eq!(report["changed"], json!(["red"]));
    assert_eq!(report["created"], json!([]));
    assert!(f.route("red", "10.8.0.0/16").is_some());
    assert_eq!(f.route("red", "10.9.0.0/16"), None);

    // Only the admin reloads.
    let (s, _) = f
        .call(
            &f.red,
            "POST",
            "/v1/config/reload",
            Some(("application/toml", f.config.clone())),
        )
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN);

    // A port change needs a restart: refused by key, nothing applied.
    let ports = f.config.replace("02:00:00:00:00:01", "02:00:00:00:00:02");
    let (s, err) = f.reload(ports).await;
    assert!(s.is_client_error(), "{s}");
    assert!(err.to_string().contains("\"port\""), "{err}");
    assert!(f.route("red", "10.8.0.0/16").is_some());

    // An invalid file names its key; nothing applied.
    let bad = changed.replace("vlan = 20", "vlan = 5000");
    let (s, err) = f.reload(bad).await;
    assert!(s.is_client_error(), "{s}");
    assert!(err.to_string().contains("vlan"), "{err}");
    assert!(f.has_vr("blue"));
}

#[tokio::test]
async fn tokens_follow_the_vr_they_open() {
    let f = Fixture::new();
    let (s, _) = f.call(&f.red, "GET", "/v1/vrs/red", None).await;
    assert_eq!(s, StatusCode::OK);

    // Delete red: its token is revoked at once.
    let (s, _) = f.call(&f.admin, "DELETE", "/v1/vrs/red", None).await;
    assert_eq!(s, StatusCode::OK);
    let (s, _) = f.call(&f.red, "GET", "/v1/vrs/red", None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);

    // A new VR named red is someone else's: the old token neither reads it
    // nor adds routes to it.
    let spec = json!({"name": "red", "interfaces": [
        {"name": "red0", "port": "p0", "vlan": 10, "addresses": ["10.0.0.1/24"]}]});
    let (s, body) = f.post_json(&f.admin, "/v1/vrs", spec.clone()).await;
    assert_eq!(s, StatusCode::CREATED, "{body}");
    let (s, _) = f.call(&f.red, "GET", "/v1/vrs/red", None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let s = f.add_route(&f.red, "red", "10.77.0.0/16", "10.0.0.7").await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    assert_eq!(f.route("red", "10.77.0.0/16"), None);
    let (s, _) = f.call(&f.admin, "DELETE", "/v1/vrs/red", None).await;
    assert_eq!(s, StatusCode::OK);

    // Created with its own token in the same request, which works at once;
    // a hash another token has is refused, and no VR is created.
    let green = generate_token();
    let mut with_token = spec.clone();
    with_token["api_token_sha256"] = json!(hash_token(&green));
    let mut clash = spec.clone();
    clash["api_token_sha256"] = json!(hash_token(&f.admin));
    let (s, body) = f.post_json(&f.admin, "/v1/vrs", clash).await;
    assert_eq!(s, StatusCode::CONFLICT, "{body}");
    assert!(!f.has_vr("red"), "a refused create changes nothing");
    let (s, body) = f.post_json(&f.admin, "/v1/vrs", with_token).await;
    assert_eq!(s, StatusCode::CREATED, "{body}");
    let (s, _) = f.call(&green, "GET", "/v1/vrs/red", None).await;
    assert_eq!(s, StatusCode::OK);
    let (s, _) = f.call(&green, "GET", "/v1/vrs/blue", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);

    // A reload of the unchanged config does not hand the config router's
    // token to the VR now called red: that VR is not the config's.
    let (s, report) = f.reload(f.config.clone()).await;
    assert_eq!(s, StatusCode::OK, "{report}");
    let (s, _) = f.call(&f.red, "GET", "/v1/vrs/red", None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let (s, _) = f.call(&green, "GET", "/v1/vrs/red", None).await;
    assert_eq!(s, StatusCode::OK);

    // A reload that adds a router whose port and VLAN an API-made VR holds
    // is refused by key, and changes nothing.
    let mut spec = spec.clone();
    spec["name"] = json!("violet");
    spec["interfaces"][0]["vlan"] = json!(40);
    let (s, body) = f.post_json(&f.admin, "/v1/vrs", spec).await;
    assert_eq!(s, StatusCode::CREATED, "{body}");
    let clash = format!(
        "{}\n[[router]]\nname = \"indigo\"\n  [[router.interface]]\n  name = \"i0\"\n  port = \"p0\"\n  vlan = 40\n  addresses = [\"10.4.0.1/24\"]\n",
        f.config
    );
    let (s, err) = f.reload(clash).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
    assert!(err.to_string().contains("violet"), "{err}");
    assert!(!f.has_vr("indigo"));
    let clash_name = f.config.replace("name = \"blue\"", "name = \"violet\"");
    let (s, err) = f.reload(clash_name).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
    assert!(f.has_vr("blue"), "nothing applied");
}

#[tokio::test]
async fn reload_rotates_tokens_at_once_and_refuses_duplicates() {
    let f = Fixture::new();
    let new_red = generate_token();
    let rotated = f.config.replace(&hash_token(&f.red), &hash_token(&new_red));
    let (s, report) = f.reload(rotated.clone()).await;
    assert_eq!(s, StatusCode::OK, "{report}");
    let (s, _) = f.call(&f.red, "GET", "/v1/vrs/red", None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "the old token stops at once");
    let (s, _) = f.call(&new_red, "GET", "/v1/vrs/red", None).await;
    assert_eq!(s, StatusCode::OK);

    // A VR created through the API keeps its token across a reload, and a
    // reload giving blue that same hash is refused whole.
    let green = generate_token();
    let spec = json!({"name": "green", "api_token_sha256": hash_token(&green), "interfaces": [
        {"name": "green0", "port": "p0", "vlan": 30, "addresses": ["10.0.3.1/24"]}]});
    let (s, body) = f.post_json(&f.admin, "/v1/vrs", spec).await;
    assert_eq!(s, StatusCode::CREATED, "{body}");
    let clash = rotated
        .replace(
            "name = \"blue\"\n",
            &format!(
                "name = \"blue\"\napi_token_sha256 = \"{}\"\n",
                hash_token(&green)
            ),
        )
        .replace("prefix = \"10.9.0.0/16\"", "prefix = \"10.19.0.0/16\"");
    let (s, err) = f.reload(clash).await;
    assert_eq!(s, StatusCode::CONFLICT, "{err}");
    assert!(err.to_string().contains("same token hash"), "{err}");
    assert!(
        f.route("red", "10.9.0.0/16").is_some(),
        "nothing of the refused reload applied"
    );
    let (s, _) = f.call(&green, "GET", "/v1/vrs/green", None).await;
    assert_eq!(s, StatusCode::OK);
    let (s, _) = f.call(&new_red, "GET", "/v1/vrs/red", None).await;
    assert_eq!(s, StatusCode::OK);

    // A reload that drops red's token revokes it.
    let (s, _) = f.reload(CONFIG).await;
    assert_eq!(s, StatusCode::OK);
    let (s, _) = f.call(&new_red, "GET", "/v1/vrs/red", None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
}

/// Sends a bulk body of `bytes` with red's token: `declared` puts its length
/// in `Content-Length`, otherwise it streams with none.
fn bulk_request(token: &str, body: Body, declared: Option<usize>) -> Request<Body> {
    let mut req = Request::builder()
        .method("POST")
        .uri("/v1/vrs/red/routes/bulk")
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json");
    if let Some(n) = declared {
        req = req.header("content-length", n.to_string());
    }
    req.body(body).expect("request")
}

#[tokio::test]
async fn a_tenant_cannot_make_the_api_hold_more_than_its_limits() {
    let f = Fixture::new();
    let send = |req: Request<Body>| {
        let app = f.app.clone();
        async move { app.oneshot(req).await.expect("response").status() }
    };
    // red may hold 1000 routes a family: its bulk body is at most
    // 2000 × 128 B + 64 KiB. 500 MB declared is refused before a byte is read.
    let s = send(bulk_request(&f.red, Body::empty(), Some(500 << 20))).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
    // Streamed with no length, it is cut off at the limit.
    let chunk = axum::body::Bytes::from(vec![b' '; 64 << 10]);
    let stream =
        futures_util::stream::iter(std::iter::repeat_n(chunk, 16).map(Ok::<_, std::io::Error>));
    let s = send(bulk_request(&f.red, Body::from_stream(stream), None)).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
    // A delete-only body is bounded the same way.
    let deletes: Vec<String> = (0..20_000)
        .map(|i| format!("10.{}.{}.0/24", i / 256, i % 256))
        .collect();
    let body = json!({ "delete": deletes }).to_string();
    let n = body.len();
    let s = send(bulk_request(&f.red, Body::from(body), Some(n))).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);

    // One bulk load per token at a time: while one is still sending its
    // body, a second answers 429; blue and the admin are not held up.
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<axum::body::Bytes, std::io::Error>>(1);
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    let first = tokio::spawn(f.app.clone().oneshot(bulk_request(
        &f.red,
        Body::from_stream(stream),
        None,
    )));
    tx.send(Ok(axum::body::Bytes::from_static(b"{\"add\": [")))
        .await
        .expect("send");
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let s = send(bulk_request(&f.red, Body::from("{}"), Some(2))).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS);
    let (s, _) = f
        .post_json(&f.admin, "/v1/vrs/blue/routes/bulk", json!({}))
        .await;
    assert_eq!(s, StatusCode::OK);
    tx.send(Ok(axum::body::Bytes::from_static(b"]}")))
        .await
        .expect("send");
    drop(tx);
    let done = first.await.expect("task").expect("response");
    assert_eq!(done.status(), StatusCode::OK);
    let s = send(bulk_request(&f.red, Body::from("{}"), Some(2))).await;
    assert_eq!(s, StatusCode::OK, "the slot is free again");

    // Addresses and static neighbours are bounded per VR: red holds three
    // addresses (two configured, the IPv6 link-local) of its four.
    let addrs = "/v1/vrs/red/interfaces/red0/addresses";
    let (s, _) = f
        .post_json(&f.red, addrs, json!({"address": "10.0.1.1/24"}))
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let (s, body) = f
        .post_json(&f.red, addrs, json!({"address": "10.0.2.1/24"}))
        .await;
    assert_eq!(s, StatusCode::CONFLICT, "{body}");
    assert!(body.to_string().contains("address limit"), "{body}");
    for (i, want) in [
        (7, StatusCode::CREATED),
        (8, StatusCode::CREATED),
        (9, StatusCode::CONFLICT),
    ] {
        let n = json!({"address": format!("10.0.0.{i}"), "mac": "02:00:00:00:00:07"});
        let (s, body) = f.post_json(&f.red, "/v1/vrs/red/neighbors", n).await;
        assert_eq!(s, want, "{body}");
    }

    // A tenant token is rate-limited; the admin is not, and red's own
    // routes were never touched by the refused loads.
    let mut limited = 0;
    for _ in 0..1000 {
        let (s, _) = f.call(&f.red, "GET", "/v1/vrs/red", None).await;
        limited += usize::from(s == StatusCode::TOO_MANY_REQUESTS);
    }
    assert!(limited > 400, "{limited} of 1000 refused");
    let (s, _) = f.call(&f.admin, "GET", "/v1/vrs/red", None).await;
    assert_eq!(s, StatusCode::OK);
    assert!(f.route("red", "10.9.0.0/16").is_some());
}

#[tokio::test]
async fn qinq_interfaces_through_the_api() {
    let f = Fixture::new();
    let path = "/v1/vrs/red/interfaces";
    let body = json!({"name": "red7", "port": "p0", "vlan": 70, "inner_vlan": 7,
        "vlan_tpid": "0x88a8", "addresses": ["10.70.0.1/24"]});
    let (s, v) = f.post_json(&f.admin, path, body.clone()).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let (_, list) = f.call(&f.red, "GET", path, None).await;
    let red7 = list
        .as_array()
        .and_then(|l| l.iter().find(|i| i["name"] == "red7"))
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(red7["inner_vlan"], 7, "{list}");
    assert_eq!(red7["vlan_tpid"], "0x88a8", "{list}");
    // Another interface on the same (port, outer, inner): 409; another
    // inner VLAN: fine.
    let mut clash = body.clone();
    clash["name"] = json!("red6");
    clash["addresses"] = json!(["10.71.0.1/24"]);
    let (s, _) = f.post_json(&f.admin, path, clash.clone()).await;
    assert_eq!(s, StatusCode::CONFLICT);
    clash["inner_vlan"] = json!(8);
    let (s, v) = f.post_json(&f.admin, path, clash).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    // No outer VLAN, or a TPID that is none: 400.
    for bad in [
        json!({"name": "red5", "port": "p0", "inner_vlan": 7}),
        json!({"name": "red5", "port": "p0", "vlan": 5, "vlan_tpid": "0x9100"}),
    ] {
        let (s, v) = f.post_json(&f.admin, path, bad).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    }
}

#[tokio::test]
async fn an_interface_added_with_urpf_keeps_it() {
    let f = Fixture::new();
    let path = "/v1/vrs/red/interfaces";
    let body = json!({"name": "red9", "port": "p0", "vlan": 90,
        "addresses": ["10.90.0.1/24"], "urpf": "strict"});
    let (s, v) = f.post_json(&f.admin, path, body.clone()).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let (s, list) = f.call(&f.red, "GET", path, None).await;
    assert_eq!(s, StatusCode::OK);
    let find = |name: &str| {
        list.as_array()
            .and_then(|l| l.iter().find(|i| i["name"] == name))
            .cloned()
            .unwrap_or(Value::Null)
    };
    assert_eq!(find("red9")["urpf"], "strict", "{list}");
    assert_eq!(find("red0").get("urpf"), None, "off is left out: {list}");
    // The same again is unchanged; the same name with another check is refused.
    let (s, _) = f.post_json(&f.admin, path, body.clone()).await;
    assert_eq!(s, StatusCode::OK);
    let mut other = body;
    other["urpf"] = json!("loose");
    let (s, _) = f.post_json(&f.admin, path, other).await;
    assert_eq!(s, StatusCode::CONFLICT);
    // A word that is not a check: 400, nothing added.
    let bad = json!({"name": "red8", "port": "p0", "vlan": 80, "urpf": "sometimes"});
    let (s, _) = f.post_json(&f.admin, path, bad).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let (_, list) = f.call(&f.red, "GET", path, None).await;
    assert!(!list.to_string().contains("red8"), "{list}");
}

#[tokio::test]
async fn a_tenant_replaces_its_filters_whole_or_not_at_all() {
    let f = Fixture::new();
    let path = "/v1/vrs/red/filters";
    let put = |v: Value| Some(("application/json", v.to_string()));
    let lists = json!({
        "filter": [
            {"name": "edge", "default": "deny", "rule": [
                {"action": "permit", "protocol": "tcp", "dst_port": "1024-65535"},
                {"action": "permit", "src": "192.0.2.0/24", "protocol": "icmp", "icmp_type": 8},
            ]},
            {"name": "up", "rule": [{"action": "deny", "dst": "2001:db8:dead::/48"}]},
        ],
        "interface": [{"name": "red0", "filter_in": "edge", "filter_out": "up"}],
    });
    let (s, v) = f.call(&f.red, "PUT", path, put(lists.clone())).await;
    assert_eq!(
        (s, &v["result"]),
        (StatusCode::OK, &json!("replaced")),
        "{v}"
    );
    let (s, v) = f.call(&f.red, "PUT", path, put(lists.clone())).await;
    assert_eq!(
        (s, &v["result"]),
        (StatusCode::OK, &json!("unchanged")),
        "{v}"
    );
    let (s, got) = f.call(&f.red, "GET", path, None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(got["filter"][0]["name"], "edge");
    assert_eq!(got["filter"][0]["default"], "deny");
    assert_eq!(got["filter"][0]["rule"][0]["dst_port"], "1024-65535");
    assert_eq!(got["filter"][0]["rule"][0]["hits"], 0);
    assert_eq!(got["filter"][0]["rule"][1]["protocol"], "icmp");
    assert_eq!(got["filter"][0]["default_hits"], 0);
    assert_eq!(got["filter"][1]["default"], "permit");
    assert_eq!(
        got["interface"],
        json!([{"name": "red0", "filter_in": "edge", "filter_out": "up"}])
    );
    // The interface listing names them too.
    let (_, ifaces) = f.call(&f.red, "GET", "/v1/vrs/red/interfaces", None).await;
    assert_eq!(ifaces[0]["filter_in"], "edge", "{ifaces}");
    // A bad rule, a list red0 still names going away, an unknown list:
    // refused with the field, and nothing changes.
    for (body, field) in [
        (
            json!({"filter": [{"name": "edge", "rule": [{"action": "deny", "dst_port": 80}]}, {"name": "up"}]}),
            "filter[0].rule[0]",
        ),
        (
            json!({"filter": [{"name": "edge", "rule": [{"action": "deny", "protocol": "tcp", "dst_port": "90-80"}]}, {"name": "up"}]}),
            "filter[0].rule[0].dst_port",
        ),
        (
            json!({"filter": [{"name": "edge"}, {"name": "edge"}]}),
            "filter[1].name",
        ),
        (json!({"filter": [{"name": "edge"}]}), "interface"),
        (
            json!({"filter": [{"name": "edge"}, {"name": "up"}], "interface": [{"name": "red0", "filter_in": "nope"}]}),
            "interface",
        ),
    ] {
        let (s, v) = f.call(&f.red, "PUT", path, put(body.clone())).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{body}: {v}");
        assert_eq!(v["field"], field, "{body}: {v}");
    }
    let (_, after) = f.call(&f.red, "GET", path, None).await;
    assert_eq!(after, got, "nothing changed");
    // Blue's token sees red's filters as it sees a VR that is not there;
    // blue has none of its own.
    let (s, v) = f.call(&f.admin, "GET", "/v1/vrs/blue/filters", None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["filter"], json!([]));
    // An interface created with a list of its VR.
    let body = json!({"name": "red8", "port": "p0", "vlan": 80,
        "addresses": ["10.80.0.1/24"], "filter_in": "edge"});
    let (s, v) = f.post_json(&f.admin, "/v1/vrs/red/interfaces", body).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let (_, got) = f.call(&f.red, "GET", path, None).await;
    assert_eq!(
        got["interface"][1],
        json!({"name": "red8", "filter_in": "edge"})
    );
    let body = json!({"name": "red7", "port": "p0", "vlan": 70,
        "addresses": ["10.70.0.1/24"], "filter_out": "nope"});
    let (s, v) = f.post_json(&f.admin, "/v1/vrs/red/interfaces", body).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
}
