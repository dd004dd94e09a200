//! vrhost-config: the config model and its validation.
//!
//! [`Config::load`] / [`Config::from_toml_str`] turn a TOML file (the
//! contract in `DESIGN.md`, "Config file") into a [`Config`]: plain data,
//! every reference resolved, every default filled in, every rule checked.
//! A bad file yields [`ConfigErrors`], every problem at once, each with the
//! key an operator should look at.
//!
//! ```
//! use std::path::Path;
//! use vrhost_config::Config;
//!
//! let text = r#"
//!     [[port]]
//!     name = "p0"
//!     driver = "pcap"
//!     rx = "in.pcap"
//!     mac = "02:00:00:00:00:01"
//!
//!     [[router]]
//!     name = "red"
//!       [[router.interface]]
//!       name = "red0"
//!       port = "p0"
//!       vlan = 5000
//!       addresses = ["10.0.0.1/24"]
//! "#;
//! let errors = Config::from_toml_str(text, Path::new(".")).unwrap_err();
//! assert_eq!(errors.0[0].key, r#"router "red".interface "red0".vlan"#);
//! ```

#![forbid(unsafe_code)]

mod addr;
mod build;
mod config;
mod error;
mod example;
mod load;
mod names;
pub mod raw;
mod routes_file;
mod validate;

pub use addr::{
    format_mac, is_group_mac, parse_ip_addr, parse_mac, parse_prefix, AddrError, IfAddr, IpPrefix,
};
pub use build::engine_spec;
pub use config::{
    allowed_cores, available_cores, parse_cpu_list, Action, Api, Config, ControlPlane, Dataplane,
    Driver, FilterSpec, FpmIn, IfaceFilters, Interface, Limits, Neighbor, Path, Paths, PathsError,
    Port, PortRange, Route, RouteTarget, Router, Rule, Tpid, Urpf,
};
pub use error::{ConfigError, ConfigErrors};
pub use example::{EXAMPLE, EXAMPLE_ROUTES_FILE, EXAMPLE_ROUTES_FILE_NAME};
pub use routes_file::{parse_routes, LineError};
