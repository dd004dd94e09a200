//! The vrhost management API: an HTTP/JSON server over a Unix socket (and
//! optionally TCP), bearer-token authentication with per-VR scoping, an
//! OpenAPI 3.1 document, Prometheus metrics, and the blocking client and
//! command line (`vrhost ctl`) that use it.
//!
//! The split follows grout's `api/` / `control/` / `cli/`:
//! - [`types`]: plain data on the wire;
//! - [`Backend`]: what the server asks of the router (implemented by the
//!   `vrhost` binary over the running data plane);
//! - [`router`] / [`serve`] / [`spawn`]: the HTTP layer;
//! - [`client`] and [`ctl_main`]: the client side, which only talks HTTP.
//!
//! See `docs/api.md` for the endpoints and the authorisation model.

#![forbid(unsafe_code)]

pub mod auth;
pub mod backend;
pub mod client;
pub mod ctl;
pub mod error;
pub mod limits;
pub mod listen;
pub mod metrics;
pub mod openapi;
pub mod server;
pub mod table;
pub mod trace_text;
pub mod types;

pub use auth::{generate_token, hash_token, Access, Auth, BadTokenHash, Principal};
pub use backend::{Backend, CaptureStream};

pub use client::{Client, ClientError};
pub use ctl::{ctl_main, CtlArgs, DEFAULT_SOCKET};
pub use error::{ApiError, ConfigIssue, ErrorBody};
pub use listen::TlsFiles;
pub use server::{endpoints, router, serve, spawn, ApiConfig, ApiHandle, Endpoint};
