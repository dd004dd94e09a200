//! The HTTP layer: routes, authentication, scoping, limits. The listeners
//! and connection limits are in [`crate::listen`].
//!
//! ```text
//!  client ──HTTP/1.1──▶ UnixListener (0600) ──────┐
//!                       TcpListener (opt.), TLS ──┴─▶ axum Router (tokio, 2 threads)
//!                                                 │ body_timeout: 30 s between body chunks
//!                                                 │ authenticate: Bearer → Principal, else 401
//!                                                 │   limits: VR token rate, requests in flight → 429
//!                                                 │ route_layer: admin_only → 403
//!                                                 │              vr_scope   → 404 (another tenant's VR)
//!                                                 │ extractors: path, query, JSON body → 400 naming the field
//!                                                 ▼
//!                                         spawn_blocking ──▶ Backend (&self, does its own locking)
//! ```
//!
//! Scoping runs before any extractor looks at the request, so a tenant token
//! naming any VR but its own gets the same 404 whatever else the request
//! holds: it can never learn whether a name exists.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path as FsPath, PathBuf};
use std::sync::{Arc, OnceLock};

use anyhow::Context as _;
use axum::body::Bytes;
use axum::extract::{
    DefaultBodyLimit, Extension, FromRequest, FromRequestParts, Path, Query, Request, State,
};
use axum::http::{header, request::Parts, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{on, MethodFilter, MethodRouter};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::auth::{Access, Auth, Principal};
use crate::backend::{visible_counters, Backend};
use crate::error::ApiError;
use crate::limits::{bulk_body_limit, Limits, BULK_BODY_LIMIT};
use crate::listen::{bind, body_timeout, run, TlsFiles};
use crate::types::{
    AddressBody, BulkRoutes, CaptureQuery, Filters, IfaceAddr, InterfaceInfo, InterfaceSpec,
    Neighbor, Outcome, OutcomeBody, PageQuery, Prefix, Route, TraceQuery, VrSpec,
    TRACE_COUNT_DEFAULT, TRACE_COUNT_MAX, TRACE_SECONDS_DEFAULT, TRACE_SECONDS_MAX,
};

/// Routes per page when the client gives no `limit`.
pub const DEFAULT_PAGE: u64 = 1000;
/// Most routes per page: a page is built in memory, so it stays bounded.
pub const MAX_PAGE: u64 = 100_000;
/// Largest ordinary request body (a VR description with its routes).
const BODY_LIMIT: usize = 16 << 20;

/// Where the API listens and which tokens it accepts; the binary fills it from
/// the config file.
#[derive(Clone, Debug)]
pub struct ApiConfig {
    /// Unix socket path. A stale socket there is removed; the new one is mode 0600.
    pub socket: PathBuf,
    /// Optional TCP listener (port 0 picks one; see [`ApiHandle::tcp_addr`]).
    pub listen: Option<SocketAddr>,
    /// TLS on the TCP listener.
    pub tls: Option<TlsFiles>,
    /// The tokens it accepts. The backend that creates and deletes VRs keeps
    /// a handle to the same [`Auth`], to install and revoke their tokens.
    pub auth: Arc<Auth>,
}

#[derive(Clone)]
struct AppState {
    backend: Arc<dyn Backend>,
    auth: Arc<Auth>,
    limits: Arc<Limits>,
}

/// One endpoint the router serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// HTTP method.
    pub method: Method,
    /// Path template, axum syntax (`/v1/vrs/{vr}`).
    pub path: &'static str,
    /// Who may call it.
    pub access: Access,
}

/// Builds the router and records every endpoint it adds, so the OpenAPI test
/// can compare the document with what is actually served.
struct Table {
    router: Router<AppState>,
    served: Vec<Endpoint>,
}

impl Table {
    fn add(
        mut self,
        access: Access,
        method: Method,
        path: &'static str,
        handler: MethodRouter<AppState>,
    ) -> Table {
        let handler = match access {
            Access::Any => handler,
            Access::Vr => handler.route_layer(middleware::from_fn(vr_scope)),
            Access::Admin => handler.route_layer(middleware::from_fn(admin_only)),
        };
        self.router = self.router.route(path, handler);
        self.served.push(Endpoint {
            method,
            path,
            access,
        });
        self
    }
}

/// `on(method, handler)` with the method named once for both the router and the record.
macro_rules! endpoint {
    ($table:expr, $access:ident, $method:ident, $path:literal, $handler:expr) => {
        $table.add(
            Access::$access,
            Method::$method,
            $path,
            on(MethodFilter::$method, $handler),
        )
    };
}

fn table() -> Table {
    let t = Table {
        router: Router::new(),
        served: Vec::new(),
    };
    let t = endpoint!(t, Any, GET, "/v1/vrs", list_vrs);
    let t = endpoint!(t, Admin, POST, "/v1/vrs", create_vr);
    let t = endpoint!(t, Vr, GET, "/v1/vrs/{vr}", get_vr);
    let t = endpoint!(t, Admin, DELETE, "/v1/vrs/{vr}", delete_vr);
    let t = endpoint!(t, Vr, GET, "/v1/vrs/{vr}/interfaces", list_interfaces);
    let t = endpoint!(t, Admin, POST, "/v1/vrs/{vr}/interfaces", add_interface);
    let t = endpoint!(
        t,
        Admin,
        DELETE,
        "/v1/vrs/{vr}/interfaces/{iface}",
        delete_interface
    );
    let t = endpoint!(
        t,
        Vr,
        GET,
        "/v1/vrs/{vr}/interfaces/{iface}/addresses",
        list_addresses
    );
    let t = endpoint!(
        t,
        Vr,
        POST,
        "/v1/vrs/{vr}/interfaces/{iface}/addresses",
        add_address
    );
    let t = endpoint!(
        t,
        Vr,
        DELETE,
        "/v1/vrs/{vr}/interfaces/{iface}/addresses/{addr}/{len}",
        delete_address
    );
    let t = endpoint!(
        t,
        Vr,
        GET,
        "/v1/vrs/{vr}/interfaces/{iface}/capture",
        capture
    );
    let t = endpoint!(t, Vr, GET, "/v1/vrs/{vr}/routes", list_routes);
    let t = endpoint!(t, Vr, POST, "/v1/vrs/{vr}/routes", add_route);
    let t = endpoint!(
        t,
        Vr,
        DELETE,
        "/v1/vrs/{vr}/routes/{addr}/{len}",
        delete_route
    );
    let t = t.add(
        Access::Vr,
        Method::POST,
        "/v1/vrs/{vr}/routes/bulk",
        on(MethodFilter::POST, bulk_routes),
    );
    let t = endpoint!(t, Vr, GET, "/v1/vrs/{vr}/filters", get_filters);
    let t = endpoint!(t, Vr, PUT, "/v1/vrs/{vr}/filters", set_filters);
    let t = endpoint!(t, Vr, GET, "/v1/vrs/{vr}/neighbors", list_neighbors);
    let t = endpoint!(t, Vr, POST, "/v1/vrs/{vr}/neighbors", add_neighbor);
    let t = endpoint!(
        t,
        Vr,
        DELETE,
        "/v1/vrs/{vr}/neighbors/{address}",
        delete_neighbor
    );
    let t = endpoint!(t, Vr, GET, "/v1/vrs/{vr}/counters", vr_counters);
    let t = endpoint!(t, Vr, GET, "/v1/vrs/{vr}/trace", trace);
    let t = endpoint!(t, Any, GET, "/v1/counters", all_counters);
    let t = endpoint!(t, Admin, GET, "/v1/ports", ports);
    let t = endpoint!(t, Admin, GET, "/v1/workers", workers);
    let t = t.add(
        Access::Admin,
        Method::POST,
        "/v1/config/reload",
        on(MethodFilter::POST, reload).layer(DefaultBodyLimit::max(BULK_BODY_LIMIT)),
    );
    let t = endpoint!(t, Any, GET, "/metrics", metrics);
    endpoint!(t, Any, GET, "/openapi.json", openapi)
}

/// Every endpoint [`router`] serves, in registration order.
pub fn endpoints() -> Vec<Endpoint> {
    table().served
}

/// The API as an axum router: every endpoint behind bearer-token
/// authentication. Serve it with [`serve`] or mount it yourself.
pub fn router(backend: Arc<dyn Backend>, auth: Arc<Auth>) -> Router {
    let state = AppState {
        backend,
        auth,
        limits: Arc::new(Limits::default()),
    };
    table()
        .router
        .fallback(no_such_endpoint)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::from_fn_with_state(state.clone(), authenticate))
        .layer(middleware::from_fn(body_timeout))
        .with_state(state)
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut resp = (status, Json(self.body())).into_response();
        if self == ApiError::Unauthorized {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            // A client without a valid token gets no kept-alive connection
            // to hold a slot with.
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        resp
    }
}

async fn no_such_endpoint() -> ApiError {
    ApiError::NotFound("no such endpoint".into())
}

// ---- middleware ----------------------------------------------------------

/// The token of an `Authorization: Bearer <token>` header.
fn bearer(req: &Request) -> Option<&str> {
    let value = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

async fn authenticate(State(st): State<AppState>, mut req: Request, next: Next) -> Response {
    match bearer(&req).and_then(|t| st.auth.authenticate(t)) {
        Some(p) => match st.limits.admit(&p) {
            Ok(_admitted) => {
                req.extensions_mut().insert(p);
                next.run(req).await
            }
            Err(e) => e.into_response(),
        },
        None => ApiError::Unauthorized.into_response(),
    }
}

fn principal(parts: &Parts) -> Result<Principal, ApiError> {
    // `authenticate` wraps every route, so this is only missing if the
    // router was assembled wrongly.
    parts
        .extensions
        .get::<Principal>()
        .cloned()
        .ok_or_else(|| ApiError::Internal("request reached a handler unauthenticated".into()))
}

async fn admin_only(req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    match principal(&parts).and_then(|p| p.require_admin()) {
        Ok(()) => next.run(Request::from_parts(parts, body)).await,
        Err(e) => e.into_response(),
    }
}

async fn vr_scope(req: Request, next: Next) -> Response {
    let (mut parts, body) = req.into_parts();
    let params = Path::<HashMap<String, String>>::from_request_parts(&mut parts, &())
        .await
        .map_err(|e| ApiError::bad("path", e.body_text()));
    let check = params.and_then(|Path(params)| {
        let vr = params
            .get("vr")
            .ok_or_else(|| ApiError::Internal("VR-scoped route without {vr}".into()))?;
        principal(&parts)?.require_vr(vr)
    });
    match check {
        Ok(()) => next.run(Request::from_parts(parts, body)).await,
        Err(e) => e.into_response(),
    }
}

// ---- extractors: every rejection is a 400 naming what was wrong ----------

/// A JSON body; a bad one answers 400 with the path of the offending field
/// (`add[3].prefix`).
struct JsonBody<T>(T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(|e| ApiError::bad("body", e.body_text()))?;
        parse_json(&bytes).map(JsonBody)
    }
}

fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        // serde_path_to_error writes `.` for the top level and `?` where
        // the syntax broke before a key was known.
        let path = e.path().to_string();
        let path = path.trim_end_matches(".?");
        let field = if path.is_empty() || path == "." || path == "?" {
            "body".to_string()
        } else {
            path.to_string()
        };
        ApiError::bad(field, e.into_inner().to_string())
    })?;
    de.end()
        .map_err(|e| ApiError::bad("body", format!("trailing data: {e}")))?;
    Ok(value)
}

/// Path parameters; a bad one answers 400 naming `path`.
struct PathParams<T>(T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for PathParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(t)| PathParams(t))
            .map_err(|e| ApiError::bad("path", e.body_text()))
    }
}

/// Query parameters; a bad one answers 400 naming `query`.
struct QueryParams<T>(T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for QueryParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(t)| QueryParams(t))
            .map_err(|e| ApiError::bad("query", e.body_text()))
    }
}

/// `?missing_ok=true`: deleting what is not there answers 200 `missing`, not 404.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct MissingOk {
    #[serde(default)]
    missing_ok: bool,
}

/// `?replace=true`: an existing route of the same prefix is replaced, not a 409.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Replace {
    #[serde(default)]
    replace: bool,
}

fn prefix_from_path(addr: &str, len: &str) -> Result<Prefix, ApiError> {
    format!("{addr}/{len}")
        .parse()
        .map_err(|m| ApiError::bad("prefix", m))
}

fn addr_from_path(addr: &str, len: &str) -> Result<IfaceAddr, ApiError> {
    format!("{addr}/{len}")
        .parse()
        .map_err(|m| ApiError::bad("address", m))
}

// ---- handlers ------------------------------------------------------------

/// Runs a backend call on a blocking thread: backends lock and may take long
/// (a million-route bulk load), and must not stall the reactor.
async fn call<T, F>(st: &AppState, f: F) -> Result<T, ApiError>
where
    F: FnOnce(&dyn Backend) -> Result<T, ApiError> + Send + 'static,
    T: Send + 'static,
{
    let backend = st.backend.clone();
    tokio::task::spawn_blocking(move || f(&*backend))
        .await
        .map_err(|e| ApiError::Internal(format!("backend call failed: {e}")))?
}

fn json<T: Serialize>(status: StatusCode, body: &T) -> Response {
    (status, Json(body)).into_response()
}

/// 201 for a creation, 200 otherwise; `Missing` is a 404 unless `missing_ok`.
fn outcome(result: Outcome, missing_ok: bool, what: &str) -> Result<Response, ApiError> {
    let status = match result {
        Outcome::Missing if !missing_ok => {
            return Err(ApiError::NotFound(format!("no such {what}")))
        }
        Outcome::Created => StatusCode::CREATED,
        _ => StatusCode::OK,
    };
    Ok(json(status, &OutcomeBody { result }))
}

fn check_addable(route: &Route, field: &str) -> Result<(), ApiError> {
    if route.is_addable() {
        Ok(())
    } else {
        Err(ApiError::bad(
            field,
            format!(
                "route {}: only via, blackhole or unreachable routes can be added",
                route.prefix
            ),
        ))
    }
}

async fn list_vrs(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
) -> Result<Response, ApiError> {
    let mut vrs = call(&st, |b| b.list_vrs()).await?;
    vrs.retain(|v| p.sees(&v.name));
    Ok(json(StatusCode::OK, &vrs))
}

async fn create_vr(
    State(st): State<AppState>,
    JsonBody(spec): JsonBody<VrSpec>,
) -> Result<Response, ApiError> {
    for (i, r) in spec.routes.iter().enumerate() {
        check_addable(r, &format!("routes[{i}]"))?;
    }
    let info = call(&st, move |b| b.create_vr(&spec)).await?;
    info!(vr = %info.name, "VR created through the API");
    Ok(json(StatusCode::CREATED, &info))
}

async fn get_vr(
    State(st): State<AppState>,
    PathParams(vr): PathParams<String>,
) -> Result<Response, ApiError> {
    let info = call(&st, move |b| b.get_vr(&vr)).await?;
    Ok(json(StatusCode::OK, &info))
}

async fn delete_vr(
    State(st): State<AppState>,
    PathParams(vr): PathParams<String>,
) -> Result<Response, ApiError> {
    let name = vr.clone();
    call(&st, move |b| b.delete_vr(&vr)).await?;
    info!(vr = %name, "VR deleted through the API");
    Ok(json(
        StatusCode::OK,
        &OutcomeBody {
            result: Outcome::Deleted,
        },
    ))
}

async fn list_interfaces(
    State(st): State<AppState>,
    PathParams(vr): PathParams<String>,
) -> Result<Response, ApiError> {
    let info = call(&st, move |b| b.get_vr(&vr)).await?;
    let ifaces: Vec<InterfaceInfo> = info.interfaces;
    Ok(json(StatusCode::OK, &ifaces))
}

async fn add_interface(
    State(st): State<AppState>,
    PathParams(vr): PathParams<String>,
    JsonBody(body): JsonBody<InterfaceSpec>,
) -> Result<Response, ApiError> {
    let result = call(&st, move |b| b.add_interface(&vr, &body)).await?;
    outcome(result, false, "interface")
}

async fn delete_interface(
    State(st): State<AppState>,
    PathParams((vr, iface)): PathParams<(String, String)>,
    QueryParams(q): QueryParams<MissingOk>,
) -> Result<Response, ApiError> {
    let result = call(&st, move |b| b.delete_interface(&vr, &iface)).await?;
    outcome(result, q.missing_ok, "interface")
}

async fn list_addresses(
    State(st): State<AppState>,
    PathParams((vr, iface)): PathParams<(String, String)>,
) -> Result<Response, ApiError> {
    let addrs = call(&st, move |b| b.list_addresses(&vr, &iface)).await?;
    Ok(json(StatusCode::OK, &addrs))
}

async fn add_address(
    State(st): State<AppState>,
    PathParams((vr, iface)): PathParams<(String, String)>,
    JsonBody(body): JsonBody<AddressBody>,
) -> Result<Response, ApiError> {
    let result = call(&st, move |b| b.add_address(&vr, &iface, body.address)).await?;
    outcome(result, false, "address")
}

async fn delete_address(
    State(st): State<AppState>,
    PathParams((vr, iface, addr, len)): PathParams<(String, String, String, String)>,
    QueryParams(q): QueryParams<MissingOk>,
) -> Result<Response, ApiError> {
    let addr = addr_from_path(&addr, &len)?;
    let result = call(&st, move |b| b.delete_address(&vr, &iface, addr)).await?;
    outcome(result, q.missing_ok, "address")
}

async fn list_routes(
    State(st): State<AppState>,
    PathParams(vr): PathParams<String>,
    QueryParams(q): QueryParams<PageQuery>,
) -> Result<Response, ApiError> {
    let offset = q.offset.unwrap_or(0);
    let limit = q.limit.unwrap_or(DEFAULT_PAGE);
    if limit > MAX_PAGE {
        return Err(ApiError::bad(
            "limit",
            format!("at most {MAX_PAGE} routes per page"),
        ));
    }
    let page = call(&st, move |b| b.list_routes(&vr, offset, limit)).await?;
    Ok(json(StatusCode::OK, &page))
}

async fn add_route(
    State(st): State<AppState>,
    PathParams(vr): PathParams<String>,
    QueryParams(q): QueryParams<Replace>,
    JsonBody(route): JsonBody<Route>,
) -> Result<Response, ApiError> {
    check_addable(&route, "body")?;
    let result = call(&st, move |b| b.add_route(&vr, &route, q.replace)).await?;
    outcome(result, false, "route")
}

async fn delete_route(
    State(st): State<AppState>,
    PathParams((vr, addr, len)): PathParams<(String, String, String)>,
    QueryParams(q): QueryParams<MissingOk>,
) -> Result<Response, ApiError> {
    let prefix = prefix_from_path(&addr, &len)?;
    let result = call(&st, move |b| b.delete_route(&vr, prefix)).await?;
    outcome(result, q.missing_ok, "route")
}

/// A bulk load: the body may hold every route the VR may have, once over
/// (the admin's up to [`BULK_BODY_LIMIT`]); one bulk load per token at a
/// time. A body over the limit is refused from its `Content-Length` before
/// it is read, or as soon as it passes the limit when it has none.
async fn bulk_routes(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    PathParams(vr): PathParams<String>,
    body: Request,
) -> Result<Response, ApiError> {
    let limit = match &p {
        Principal::Admin => BULK_BODY_LIMIT,
        Principal::Vr(_) => {
            let name = vr.clone();
            let info = call(&st, move |b| b.get_vr(&name)).await?;
            bulk_body_limit(info.policy.max_routes.unwrap_or(0))
        }
    };
    let too_large = || {
        ApiError::TooLarge(format!(
            "a bulk body for this VR is at most {limit} bytes (its route limit, both families, once)"
        ))
    };
    let declared = body
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let reserve = declared.map_or(limit, |n| n as usize);
    let slot = st.limits.bulk(&p, reserve)?;
    let bytes = axum::body::to_bytes(body.into_body(), limit)
        .await
        .map_err(|_| too_large())?;
    let req: BulkRoutes = parse_json(&bytes)?;
    drop(bytes);
    for (i, r) in req.add.iter().enumerate() {
        check_addable(r, &format!("add[{i}]"))?;
    }
    // The slot goes with the work: a client that hangs up does not free it
    // while its bulk load still runs.
    let result = call(&st, move |b| {
        let _slot = slot;
        b.bulk_routes(&vr, &req)
    })
    .await?;
    Ok(json(StatusCode::OK, &result))
}

async fn get_filters(
    State(st): State<AppState>,
    PathParams(vr): PathParams<String>,
) -> Result<Response, ApiError> {
    let f = call(&st, move |b| b.get_filters(&vr)).await?;
    Ok(json(StatusCode::OK, &f))
}

async fn set_filters(
    State(st): State<AppState>,
    PathParams(vr): PathParams<String>,
    JsonBody(f): JsonBody<Filters>,
) -> Result<Response, ApiError> {
    let result = call(&st, move |b| b.set_filters(&vr, &f)).await?;
    Ok(json(StatusCode::OK, &OutcomeBody { result }))
}

async fn list_neighbors(
    State(st): State<AppState>,
    PathParams(vr): PathParams<String>,
) -> Result<Response, ApiError> {
    let list = call(&st, move |b| b.list_neighbors(&vr)).await?;
    Ok(json(StatusCode::OK, &list))
}

async fn add_neighbor(
    State(st): State<AppState>,
    PathParams(vr): PathParams<String>,
    JsonBody(n): JsonBody<Neighbor>,
) -> Result<Response, ApiError> {
    let result = call(&st, move |b| b.add_neighbor(&vr, &n)).await?;
    outcome(result, false, "neighbor")
}

async fn delete_neighbor(
    State(st): State<AppState>,
    PathParams((vr, address)): PathParams<(String, String)>,
    QueryParams(q): QueryParams<MissingOk>,
) -> Result<Response, ApiError> {
    let addr = address
        .parse()
        .map_err(|_| ApiError::bad("address", format!("'{address}' is not an IP address")))?;
    let result = call(&st, move |b| b.delete_neighbor(&vr, addr)).await?;
    outcome(result, q.missing_ok, "neighbor")
}

/// Pieces of a capture in flight to the client, at most.
const CAPTURE_PIECES: usize = 16;

/// A live capture as a pcap stream. The backend's stream is drained on a
/// blocking thread; when the client goes away the channel closes, the
/// thread ends and drops the stream, which stops the capture.
async fn capture(
    State(st): State<AppState>,
    PathParams((vr, iface)): PathParams<(String, String)>,
    QueryParams(q): QueryParams<CaptureQuery>,
) -> Result<Response, ApiError> {
    let mut stream = call(&st, move |b| b.capture(&vr, &iface, &q)).await?;
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(CAPTURE_PIECES);
    tokio::task::spawn_blocking(move || {
        while let Some(piece) = stream.next_chunk(std::time::Duration::from_millis(100)) {
            if piece.is_empty() {
                if tx.is_closed() {
                    break;
                }
                continue;
            }
            if tx.blocking_send(Ok(Bytes::from(piece))).is_err() {
                break;
            }
        }
    });
    let body = axum::body::Body::from_stream(futures_util::stream::unfold(rx, |mut rx| async {
        rx.recv().await.map(|piece| (piece, rx))
    }));
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/vnd.tcpdump.pcap")],
        body,
    )
        .into_response())
}

/// The next packets of a VR, traced: the query's count and time checked
/// (400 naming the field) and defaulted, then the backend waits for them
/// on a blocking thread.
async fn trace(
    State(st): State<AppState>,
    PathParams(vr): PathParams<String>,
    QueryParams(mut q): QueryParams<TraceQuery>,
) -> Result<Response, ApiError> {
    let count = q.count.unwrap_or(TRACE_COUNT_DEFAULT);
    if !(1..=TRACE_COUNT_MAX).contains(&count) {
        return Err(ApiError::bad(
            "count",
            format!("packets to trace: 1 to {TRACE_COUNT_MAX}"),
        ));
    }
    let seconds = q.seconds.unwrap_or(TRACE_SECONDS_DEFAULT);
    if !(1..=TRACE_SECONDS_MAX).contains(&seconds) {
        return Err(ApiError::bad(
            "seconds",
            format!("seconds to wait: 1 to {TRACE_SECONDS_MAX}"),
        ));
    }
    (q.count, q.seconds) = (Some(count), Some(seconds));
    let report = call(&st, move |b| b.trace(&vr, &q)).await?;
    Ok(json(StatusCode::OK, &report))
}

async fn vr_counters(
    State(st): State<AppState>,
    PathParams(vr): PathParams<String>,
) -> Result<Response, ApiError> {
    let c = call(&st, move |b| b.vr_counters(&vr)).await?;
    Ok(json(StatusCode::OK, &c))
}

async fn all_counters(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
) -> Result<Response, ApiError> {
    let all = call(&st, move |b| visible_counters(b, &p)).await?;
    Ok(json(StatusCode::OK, &all))
}

async fn ports(State(st): State<AppState>) -> Result<Response, ApiError> {
    let list = call(&st, |b| b.ports()).await?;
    Ok(json(StatusCode::OK, &list))
}

async fn workers(State(st): State<AppState>) -> Result<Response, ApiError> {
    let list = call(&st, |b| b.workers()).await?;
    Ok(json(StatusCode::OK, &list))
}

async fn reload(State(st): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let text = String::from_utf8(body.to_vec())
        .map_err(|_| ApiError::bad("body", "the config is not UTF-8 text"))?;
    let report = call(&st, move |b| b.reload(&text)).await?;
    info!(
        created = report.created.len(),
        deleted = report.deleted.len(),
        changed = report.changed.len(),
        "config reloaded through the API"
    );
    Ok(json(StatusCode::OK, &report))
}

async fn metrics(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
) -> Result<Response, ApiError> {
    let text = call(&st, move |b| crate::metrics::render(b, &p)).await?;
    Ok(([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], text).into_response())
}

async fn openapi() -> Response {
    static DOC: OnceLock<serde_json::Value> = OnceLock::new();
    json(StatusCode::OK, DOC.get_or_init(crate::openapi::document))
}

/// Serves the API until `shutdown` completes, then removes the socket.
pub async fn serve(
    cfg: ApiConfig,
    backend: Arc<dyn Backend>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let listeners = bind(&cfg.socket, cfg.listen, cfg.tls.as_ref()).await?;
    run(listeners, router(backend, cfg.auth), shutdown).await
}

/// A running API server on its own thread. Dropping it stops the server.
pub struct ApiHandle {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<anyhow::Result<()>>>,
    socket: PathBuf,
    tcp: Option<SocketAddr>,
}

impl ApiHandle {
    /// The Unix socket path.
    pub fn socket(&self) -> &FsPath {
        &self.socket
    }

    /// The TCP address actually bound (port 0 resolved), if any.
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        self.tcp
    }

    /// Stops the server, waits for it, and reports how it ended.
    pub fn stop(mut self) -> anyhow::Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> anyhow::Result<()> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        match self.thread.take() {
            Some(t) => t
                .join()
                .map_err(|_| anyhow::anyhow!("the API thread panicked"))?,
            None => Ok(()),
        }
    }
}

impl Drop for ApiHandle {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            warn!("management API: {e:#}");
        }
    }
}

/// Starts the API on its own thread with its own small tokio runtime, for
/// callers that are not async. Binding errors are returned here.
pub fn spawn(cfg: ApiConfig, backend: Arc<dyn Backend>) -> anyhow::Result<ApiHandle> {
    // Two threads: the API is light, and backend calls run on the blocking pool.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("vrhost-api")
        .enable_all()
        .build()
        .context("starting the API runtime")?;
    let listeners = rt.block_on(bind(&cfg.socket, cfg.listen, cfg.tls.as_ref()))?;
    let tcp = listeners.tcp_addr()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let app = router(backend, cfg.auth.clone());
    let thread = std::thread::Builder::new()
        .name("vrhost-api".into())
        .spawn(move || {
            rt.block_on(run(listeners, app, async move {
                let _ = stopped.await;
            }))
        })
        .context("starting the API thread")?;
    Ok(ApiHandle {
        stop: Some(stop),
        thread: Some(thread),
        socket: cfg.socket,
        tcp,
    })
}
