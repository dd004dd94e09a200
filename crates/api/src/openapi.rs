//! `/openapi.json`: the OpenAPI 3.1 document of the API.
//!
//! Operations are listed here by hand; their schemas come from the types
//! themselves (schemars, JSON Schema 2020-12, which OpenAPI 3.1 uses), so a
//! field added to a type appears in the document without an edit here. A test
//! checks that every endpoint the router serves is described, with the same
//! access level, and nothing else.

use axum::http::Method;
use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, SchemaGenerator};
use serde_json::{json, Map, Value};

use crate::auth::Access;
use crate::error::ErrorBody;
use crate::types::{
    AddressBody, BulkResult, BulkRoutes, Filters, IfaceAddr, InterfaceInfo, InterfaceSpec,
    Neighbor, OutcomeBody, PortInfo, ReloadReport, Route, RoutePage, TraceReport, VrCounters,
    VrInfo, VrSpec, WorkerInfo,
};

/// A query parameter: name, JSON type, description.
type QueryParam = (&'static str, &'static str, &'static str);

const MISSING_OK: QueryParam = (
    "missing_ok",
    "boolean",
    "Answer 200 `missing` instead of 404 when it is not there",
);
const REPLACE: QueryParam = (
    "replace",
    "boolean",
    "Replace an existing route of the same prefix with another target instead of answering 409",
);
const OFFSET: QueryParam = ("offset", "integer", "Routes to skip (default 0)");
const LIMIT: QueryParam = (
    "limit",
    "integer",
    "Most routes to return (default 1000, at most 100000)",
);

const COUNT: QueryParam = ("count", "integer", "Stop after this many frames");
const FILTER: QueryParam = (
    "filter",
    "string",
    "Only frames matching this expression (host, net, port, src/dst, tcp, udp, icmp, icmp6, ip, ip6, arp, vlan, proto; and, or, not, parentheses)",
);
const SNAPLEN: QueryParam = (
    "snaplen",
    "integer",
    "Bytes kept of each frame (default 65535)",
);
const SECONDS: QueryParam = ("seconds", "integer", "Stop after this many seconds");
const TRACE_COUNT: QueryParam = (
    "count",
    "integer",
    "Packets to trace (default 10, at most 1000)",
);
const TRACE_INTERFACE: QueryParam = (
    "interface",
    "string",
    "Only packets that come in on this interface of the VR",
);
const TRACE_SECONDS: QueryParam = (
    "seconds",
    "integer",
    "Answer after this many seconds with what was traced by then (default 10, at most 120)",
);

struct Op {
    method: Method,
    path: &'static str,
    access: Access,
    summary: &'static str,
    query: &'static [QueryParam],
    /// Content type and schema of the request body.
    body: Option<(&'static str, Value)>,
    /// Success status and the schema of its body.
    ok: (u16, Value),
}

fn schema<T: JsonSchema>(g: &mut SchemaGenerator) -> Value {
    serde_json::to_value(g.subschema_for::<T>()).unwrap_or(Value::Null)
}

fn json_body<T: JsonSchema>(g: &mut SchemaGenerator) -> Option<(&'static str, Value)> {
    Some(("application/json", schema::<T>(g)))
}

fn ops(g: &mut SchemaGenerator) -> Vec<Op> {
    use Access::{Admin, Any, Vr};
    let op = |method, path, access, summary, query, body, ok| Op {
        method,
        path,
        access,
        summary,
        query,
        body,
        ok,
    };
    vec![
        op(Method::GET, "/v1/vrs", Any, "List VRs (a VR token sees only its own)", &[], None, (200, schema::<Vec<VrInfo>>(g))),
        op(Method::POST, "/v1/vrs", Admin, "Create a VR", &[], json_body::<VrSpec>(g), (201, schema::<VrInfo>(g))),
        op(Method::GET, "/v1/vrs/{vr}", Vr, "Show a VR", &[], None, (200, schema::<VrInfo>(g))),
        op(Method::DELETE, "/v1/vrs/{vr}", Admin, "Delete a VR", &[], None, (200, schema::<OutcomeBody>(g))),
        op(Method::GET, "/v1/vrs/{vr}/interfaces", Vr, "List a VR's interfaces", &[], None, (200, schema::<Vec<InterfaceInfo>>(g))),
        op(Method::POST, "/v1/vrs/{vr}/interfaces", Admin, "Add an interface to a running VR (idempotent)", &[], json_body::<InterfaceSpec>(g), (201, schema::<OutcomeBody>(g))),
        op(Method::DELETE, "/v1/vrs/{vr}/interfaces/{iface}", Admin, "Remove an interface, its addresses and static neighbours (409 while routes use it)", &[MISSING_OK], None, (200, schema::<OutcomeBody>(g))),
        op(Method::GET, "/v1/vrs/{vr}/interfaces/{iface}/addresses", Vr, "List an interface's addresses", &[], None, (200, schema::<Vec<IfaceAddr>>(g))),
        op(Method::POST, "/v1/vrs/{vr}/interfaces/{iface}/addresses", Vr, "Add an address (idempotent)", &[], json_body::<AddressBody>(g), (201, schema::<OutcomeBody>(g))),
        op(Method::DELETE, "/v1/vrs/{vr}/interfaces/{iface}/addresses/{addr}/{len}", Vr, "Remove an address", &[MISSING_OK], None, (200, schema::<OutcomeBody>(g))),
        op(Method::GET, "/v1/vrs/{vr}/interfaces/{iface}/capture", Vr, "Live capture: the frames the interface receives and sends, as a pcap stream (application/vnd.tcpdump.pcap); 429 when too many captures run", &[COUNT, FILTER, SNAPLEN, SECONDS], None, (200, json!({"type": "string", "format": "binary"}))),
        op(Method::GET, "/v1/vrs/{vr}/routes", Vr, "List routes, one page at a time", &[OFFSET, LIMIT], None, (200, schema::<RoutePage>(g))),
        op(Method::POST, "/v1/vrs/{vr}/routes", Vr, "Add a route (an identical existing route answers 200 `unchanged`)", &[REPLACE], json_body::<Route>(g), (201, schema::<OutcomeBody>(g))),
        op(Method::DELETE, "/v1/vrs/{vr}/routes/{addr}/{len}", Vr, "Remove a route", &[MISSING_OK], None, (200, schema::<OutcomeBody>(g))),
        op(Method::POST, "/v1/vrs/{vr}/routes/bulk", Vr, "Add and delete many routes at once, idempotently (exist_ok, missing_ok)", &[], json_body::<BulkRoutes>(g), (200, schema::<BulkResult>(g))),
        op(Method::GET, "/v1/vrs/{vr}/filters", Vr, "A VR's rule lists with their counters, and every interface's lists", &[], None, (200, schema::<Filters>(g))),
        op(Method::PUT, "/v1/vrs/{vr}/filters", Vr, "Replace a VR's rule lists and the named interfaces' lists, all or nothing", &[], json_body::<Filters>(g), (200, schema::<OutcomeBody>(g))),
        op(Method::GET, "/v1/vrs/{vr}/neighbors", Vr, "List static neighbours", &[], None, (200, schema::<Vec<Neighbor>>(g))),
        op(Method::POST, "/v1/vrs/{vr}/neighbors", Vr, "Add or replace a static neighbour", &[], json_body::<Neighbor>(g), (201, schema::<OutcomeBody>(g))),
        op(Method::DELETE, "/v1/vrs/{vr}/neighbors/{address}", Vr, "Remove a static neighbour", &[MISSING_OK], None, (200, schema::<OutcomeBody>(g))),
        op(Method::GET, "/v1/vrs/{vr}/counters", Vr, "A VR's counters and its interfaces'", &[], None, (200, schema::<VrCounters>(g))),
        op(Method::GET, "/v1/vrs/{vr}/trace", Vr, "Packet trace: the VR's next packets, each with every decision the data plane made about it (with what it was made on) and where it went; 429 when too many traces run", &[TRACE_COUNT, TRACE_INTERFACE, TRACE_SECONDS], None, (200, schema::<TraceReport>(g))),
        op(Method::GET, "/v1/counters", Any, "Counters of every VR the token may see", &[], None, (200, schema::<Vec<VrCounters>>(g))),
        op(Method::GET, "/v1/ports", Admin, "Ports and their counters", &[], None, (200, schema::<Vec<PortInfo>>(g))),
        op(Method::GET, "/v1/workers", Admin, "Worker load", &[], None, (200, schema::<Vec<WorkerInfo>>(g))),
        op(Method::POST, "/v1/config/reload", Admin, "Validate a whole new config and apply it atomically; 422 lists every problem and nothing changes", &[], Some(("application/toml", json!({"type": "string", "description": "The config file, TOML"}))), (200, schema::<ReloadReport>(g))),
        op(Method::GET, "/metrics", Any, "Prometheus metrics (a VR token gets only its VR's series)", &[], None, (200, json!({"type": "string"}))),
        op(Method::GET, "/openapi.json", Any, "This document", &[], None, (200, json!({"type": "object"}))),
    ]
}

fn path_param(name: &str) -> Value {
    let description = match name {
        "vr" => "VR name",
        "iface" => "Interface name",
        "addr" => "Address part of ADDRESS/LENGTH",
        "len" => "Length part of ADDRESS/LENGTH",
        "address" => "The neighbour's IP address",
        _ => "",
    };
    json!({"name": name, "in": "path", "required": true, "description": description,
           "schema": {"type": if name == "len" { "integer" } else { "string" }}})
}

fn path_params(path: &str) -> impl Iterator<Item = &str> {
    path.split('/')
        .filter_map(|seg| seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
}

fn error_response(description: &str) -> Value {
    json!({"description": description,
           "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}})
}

fn operation(op: &Op) -> Value {
    let mut params: Vec<Value> = path_params(op.path).map(path_param).collect();
    params.extend(op.query.iter().map(|(name, ty, description)| {
        json!({"name": name, "in": "query", "required": false, "description": description,
               "schema": {"type": ty}})
    }));
    let (status, ok_schema) = &op.ok;
    let ok_type = if op.path == "/metrics" {
        crate::metrics::CONTENT_TYPE
    } else {
        "application/json"
    };
    let mut responses = Map::new();
    responses.insert(
        status.to_string(),
        json!({"description": "Success", "content": {ok_type: {"schema": ok_schema}}}),
    );
    if *status == 201 {
        responses.insert(
            "200".into(),
            json!({"description": "Already there, identical, or replaced",
                   "content": {"application/json": {"schema": ok_schema}}}),
        );
    }
    responses.insert(
        "400".into(),
        error_response("Malformed request; `field` names the culprit"),
    );
    responses.insert("401".into(), error_response("Missing or invalid token"));
    match op.access {
        Access::Admin => {
            responses.insert("403".into(), error_response("Not the admin token"));
        }
        Access::Vr => {
            responses.insert(
                "404".into(),
                error_response("No such VR, or a VR this token may not see (the same answer)"),
            );
        }
        Access::Any => {}
    }
    if op.method != Method::GET {
        responses.insert("409".into(), error_response("Conflicts with what exists"));
    }
    if op.path == "/v1/config/reload" {
        responses.insert(
            "422".into(),
            error_response("Config rejected: `errors` lists each key and reason"),
        );
    }
    let access = match op.access {
        Access::Any => "any",
        Access::Vr => "vr",
        Access::Admin => "admin",
    };
    let mut out = json!({
        "summary": op.summary,
        "operationId": format!("{} {}", op.method, op.path),
        "parameters": params,
        "responses": responses,
        "x-vrhost-access": access,
    });
    if let Some((content_type, body)) = &op.body {
        out["requestBody"] =
            json!({"required": true, "content": {*content_type: {"schema": body}}});
    }
    out
}

/// The whole document.
pub fn document() -> Value {
    let mut settings = SchemaSettings::draft2020_12();
    settings.definitions_path = "/components/schemas".into();
    let mut g = settings.into_generator();
    let ops = ops(&mut g);
    let _ = g.subschema_for::<ErrorBody>();
    let mut paths = Map::new();
    for op in &ops {
        let item = paths
            .entry(op.path)
            .or_insert_with(|| Value::Object(Map::new()));
        item[op.method.as_str().to_ascii_lowercase()] = operation(op);
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "vrhost management API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Virtual routers on one shared data plane. Every request carries \
                `Authorization: Bearer <token>`: the admin token sees everything; a per-VR \
                token sees and changes only its own VR, and any other VR answers 404 as if it \
                did not exist.",
        },
        "servers": [{"url": "http://localhost"}],
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": g.take_definitions(true),
        },
    })
}

/// `(method, path, access)` of every operation in the document, for tests.
pub fn described() -> Vec<(Method, &'static str, Access)> {
    let mut g = SchemaGenerator::default();
    ops(&mut g)
        .into_iter()
        .map(|op| (op.method, op.path, op.access))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_served_endpoint_is_described_and_nothing_else() {
        let served: Vec<_> = crate::server::endpoints()
            .into_iter()
            .map(|e| (e.method, e.path, e.access))
            .collect();
        let mut described = described();
        for s in &served {
            assert!(described.contains(s), "{s:?} is served but not described");
        }
        described.retain(|d| !served.contains(d));
        assert!(
            described.is_empty(),
            "described but not served: {described:?}"
        );
    }

    #[test]
    fn document_is_openapi_3_1_with_resolvable_refs() {
        let doc = document();
        assert_eq!(doc["openapi"], "3.1.0");
        let text = doc.to_string();
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        for part in text.split("\"$ref\":\"").skip(1) {
            let target = part.split('"').next().unwrap();
            let name = target.strip_prefix("#/components/schemas/").unwrap();
            assert!(schemas.contains_key(name), "dangling $ref {target}");
        }
        for e in crate::server::endpoints() {
            let op = &doc["paths"][e.path][e.method.as_str().to_ascii_lowercase()];
            assert!(op.is_object(), "{} {} missing", e.method, e.path);
        }
    }
}
