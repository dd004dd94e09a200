//! The API journal (`[api] state`) as a crash leaves it: the journal a
//! running router wrote, every kind of change in it, cut at every byte,
//! loads the changes of its whole lines (and those alone); a fresh router
//! that replays them holds what the router held after those changes; and
//! the next run's changes append to it so that the run after reads them
//! all.
//!
//! ```text
//!   live router + Journaled ── 13 changes ──▶ state.jsonl, and the state after each
//!   for every cut c:  state.jsonl[..c] ── read ──▶ the whole lines' entries
//!                     ── append one more change ── read ──▶ those, then it
//!   for every k:      fresh router ── replay(first k) ──▶ the state after k changes
//! ```

use std::path::Path;
use std::sync::Arc;

use serde_json::{json, Value};
use vrhost_api::types::{BulkRoutes, IfaceAddr, InterfaceSpec, Neighbor, Prefix, Route, VrSpec};
use vrhost_api::{generate_token, hash_token, Auth, Backend};
use vrhost_config::Config;
use vrhost_daemon::api_backend::{vr_tokens, RuntimeBackend};
use vrhost_daemon::journal::{self, Entry, Journal, Journaled};
use vrhost_daemon::runtime::{Mode, Running, Runtime};

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
  addresses = ["10.0.0.1/24"]
  [[router.route]]
  prefix = "10.9.0.0/16"
  via = "10.0.0.9"
"#;

/// A router running `CONFIG`, and its API backend.
struct Router {
    running: Option<Running>,
    backend: Arc<RuntimeBackend>,
}

impl Router {
    fn start() -> Router {
        let cfg = Config::from_toml_str(CONFIG, Path::new(".")).expect("config");
        let running = Runtime::from_config(&cfg, &cfg.dataplane.workers, Mode::Rtc)
            .expect("runtime")
            .start();
        let auth = Arc::new(
            Auth::new(&hash_token(&generate_token()), &vr_tokens(&cfg)).expect("token hashes"),
        );
        let backend = Arc::new(RuntimeBackend::new(
            &cfg,
            Path::new("./vrhost.toml"),
            &running,
            auth,
        ));
        Router {
            running: Some(running),
            backend,
        }
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        if let Some(r) = self.running.take() {
            r.stop();
        }
    }
}

fn from<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("a valid request")
}

fn addr(s: &str) -> IfaceAddr {
    s.parse().expect("address")
}

fn prefix(s: &str) -> Prefix {
    s.parse().expect("prefix")
}

/// What a router holds, as the API shows it: every VR with its
/// interfaces, routes, static neighbours and rule lists (FIB sizes left
/// out: they depend on the order routes came in).
fn state(b: &dyn Backend) -> Value {
    let mut out = serde_json::Map::new();
    for v in b.list_vrs().expect("vrs") {
        let mut info = serde_json::to_value(&v).expect("json");
        info["fib_bytes"] = Value::Null;
        let name = v.name.clone();
        out.insert(
            name.clone(),
            json!({
                "info": info,
                "routes": b.list_routes(&name, 0, 100_000).expect("routes"),
                "neighbors": b.list_neighbors(&name).expect("neighbours"),
                "filters": b.get_filters(&name).expect("filters"),
            }),
        );
    }
    Value::Object(out)
}

/// Every kind of change the journal keeps, made through `b`; returns the
/// state before the first and after each.
fn changes(b: &dyn Backend) -> Vec<Value> {
    let mut states = vec![state(b)];
    let mut step = |r: Result<(), vrhost_api::ApiError>| {
        r.expect("change applies");
        states.push(state(b));
    };
    let green: VrSpec = from(json!({
        "name": "green",
        "interfaces": [{"name": "green0", "port": "p0", "vlan": 30, "addresses": ["10.30.0.1/24"]}],
    }));
    step(b.create_vr(&green).map(drop));
    let red9: InterfaceSpec =
        from(json!({"name": "red9", "port": "p0", "vlan": 9, "addresses": ["10.9.9.1/24"]}));
    step(b.add_interface("red", &red9).map(drop));
    step(b.add_address("red", "red0", addr("10.0.5.1/24")).map(drop));
    let r: Route = from(json!({"prefix": "10.50.0.0/16", "via": "10.0.5.9"}));
    step(b.add_route("red", &r, false).map(drop));
    let bulk: BulkRoutes = from(json!({
        "add": [{"prefix": "10.51.0.0/16", "via": "10.0.0.9"},
                {"prefix": "10.52.0.0/16", "blackhole": true}],
        "delete": ["10.9.0.0/16"],
    }));
    step(b.bulk_routes("red", &bulk).map(drop));
    let n: Neighbor = from(json!({"address": "10.0.0.7", "mac": "02:00:00:00:00:07"}));
    step(b.add_neighbor("red", &n).map(drop));
    let filters = vrhost_api::ctl::parse_filters_file(
        "[[filter]]\nname = \"edge\"\n[[filter.rule]]\naction = \"deny\"\nprotocol = \"udp\"\n\
         dst_port = 9\n[[interface]]\nname = \"red0\"\nfilter_in = \"edge\"\n",
    )
    .expect("filters file");
    step(b.set_filters("red", &filters).map(drop));
    step(b.delete_route("red", prefix("10.50.0.0/16")).map(drop));
    step(
        b.delete_neighbor("red", "10.0.0.7".parse().expect("address"))
            .map(drop),
    );
    step(
        b.delete_address("red", "red0", addr("10.0.5.1/24"))
            .map(drop),
    );
    step(b.delete_interface("red", "red9").map(drop));
    step(b.delete_vr("green"));
    let r: Route = from(json!({"prefix": "10.53.0.0/16", "unreachable": true}));
    step(b.add_route("red", &r, false).map(drop));
    states
}

#[test]
fn a_journal_cut_at_every_byte_loads_the_changes_of_its_whole_lines() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.jsonl");
    // The live router, journaling.
    let states = {
        let live = Router::start();
        let b = Journaled::new(live.backend.clone(), Journal::new(&path));
        changes(&b)
    };
    let bytes = std::fs::read(&path).expect("journal");
    let full = journal::read(&path).expect("the whole journal loads");
    assert_eq!(full.len(), states.len() - 1, "one line per change");
    let kinds: std::collections::BTreeSet<String> = full
        .iter()
        .map(|e| serde_json::to_value(e).expect("json")["op"].to_string())
        .collect();
    assert_eq!(kinds.len(), 12, "every kind of entry: {kinds:?}");

    // What a crash can leave: the journal cut at any byte. It loads the
    // entries of its whole lines; the next run's first change appends to
    // them, and the run after that loads both.
    let later = Entry::DeleteRoute {
        vr: "red".into(),
        prefix: prefix("10.53.0.0/16"),
    };
    let cut_path = dir.path().join("cut.jsonl");
    for cut in 0..=bytes.len() {
        let whole = bytes[..cut].iter().filter(|&&b| b == b'\n').count();
        std::fs::write(&cut_path, &bytes[..cut]).expect("write");
        let got = journal::read(&cut_path).unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        assert_eq!(got, full[..whole], "cut at byte {cut}");
        Journal::new(&cut_path).append(&later).expect("append");
        let got = journal::read(&cut_path)
            .unwrap_or_else(|e| panic!("cut at {cut}, then a change appended: {e}"));
        assert_eq!(got.len(), whole + 1, "cut at byte {cut}, then a change");
        assert_eq!(got[..whole], full[..whole]);
        assert_eq!(got[whole], later);
    }

    // What those entries rebuild: a fresh router that replays the first k
    // holds what the live one held after k changes.
    for (k, want) in states.iter().enumerate() {
        let fresh = Router::start();
        let applied = journal::replay(&*fresh.backend, &full[..k], &path);
        assert_eq!(applied, k, "every entry of the first {k} applies");
        assert_eq!(state(&*fresh.backend), *want, "after {k} entries");
    }
}
