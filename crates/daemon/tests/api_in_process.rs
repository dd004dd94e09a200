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
use vrhost_daemon::api_backend::RuntimeBackend;
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

[[router]]
name = "blue"
  [[router.interface]]
  name = "blue0"
  port = "p0"
  vlan = 20
  addresses = ["10.0.0.1/24"]
"#;

/// A running data plane for `CONFIG`, the API over it, and the admin and
/// red tokens.
struct Fixture {
    running: Option<Running>,
    app: axum::Router,
    admin: String,
    red: String,
}

impl Fixture {
    fn new() -> Fixture {
        let cfg = Config::from_toml_str(CONFIG, std::path::Path::new(".")).expect("config");
        let rt = Runtime::from_config(&cfg, &cfg.dataplane.workers, Mode::Rtc).expect("runtime");
        let running = rt.start();
        let backend = RuntimeBackend::new(&cfg, std::path::Path::new("./vrhost.toml"), &running);
        let (admin, red) = (generate_token(), generate_token());
        let auth = Auth::new(&hash_token(&admin), &[("red".into(), hash_token(&red))])
            .expect("token hashes");
        Fixture {
            app: vrhost_api::router(Arc::new(backend), auth),
            running: Some(running),
            admin,
            red,
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
    let (s, _) = f
        .post_json(
            &f.red,
            "/v1/vrs/red/routes",
            json!({"prefix": "10.77.0.0/16", "via": "10.0.0.7"}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    assert!(f.route("red", "10.77.0.0/16").is_some());
    assert_eq!(f.route("blue", "10.77.0.0/16"), None);

    let (s, page) = f.call(&f.red, "GET", "/v1/vrs/red/routes", None).await;
    assert_eq!(s, StatusCode::OK);
    assert!(page.to_string().contains("10.77.0.0"), "{page}");

    // Red's token cannot see or change blue, and is told nothing about it.
    let (s, _) = f.call(&f.red, "GET", "/v1/vrs/blue/routes", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, _) = f
        .post_json(
            &f.red,
            "/v1/vrs/blue/routes",
            json!({"prefix": "10.66.0.0/16", "via": "10.0.0.6"}),
        )
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(f.route("blue", "10.66.0.0/16"), None);

    // A gateway no interface covers is refused and changes nothing.
    let (s, _) = f
        .post_json(
            &f.admin,
            "/v1/vrs/blue/routes",
            json!({"prefix": "10.55.0.0/16", "via": "192.0.2.1"}),
        )
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
async fn reload_applies_the_difference_or_nothing() {
    let f = Fixture::new();
    let changed = CONFIG.replace(
        "  prefix = \"10.9.0.0/16\"\n  via = \"10.0.0.9\"",
        "  prefix = \"10.8.0.0/16\"\n  via = \"10.0.0.8\"",
    );
    let (s, report) = f
        .call(
            &f.admin,
            "POST",
            "/v1/config/reload",
            Some(("application/toml", changed.clone())),
        )
        .await;
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
            Some(("application/toml", CONFIG.into())),
        )
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN);

    // A port change needs a restart: refused by key, nothing applied.
    let ports = CONFIG.replace("02:00:00:00:00:01", "02:00:00:00:00:02");
    let (s, err) = f
        .call(
            &f.admin,
            "POST",
            "/v1/config/reload",
            Some(("application/toml", ports)),
        )
        .await;
    assert!(s.is_client_error(), "{s}");
    assert!(err.to_string().contains("\"port\""), "{err}");
    assert!(f.route("red", "10.8.0.0/16").is_some());

    // An invalid file names its key; nothing applied.
    let bad = changed.replace("vlan = 20", "vlan = 5000");
    let (s, err) = f
        .call(
            &f.admin,
            "POST",
            "/v1/config/reload",
            Some(("application/toml", bad)),
        )
        .await;
    assert!(s.is_client_error(), "{s}");
    assert!(err.to_string().contains("vlan"), "{err}");
    let w = lock(&f.running().writer);
    assert!(w.working().vr_index("blue").is_some());
}
