//! The config's entry points: a file or a string, through validation, to a
//! [`Config`].
//!
//! ```text
//!   TOML text ──toml──▶ Table ──raw::decode_document──▶ Document (raw structs)
//!                                                          │
//!             routes files ──routes_file::scan──┐          │
//!                                               ▼          ▼
//!                                         validate::validate ──▶ Config | ConfigErrors
//! ```

use std::path::Path;

use crate::config::{allowed_cores, Config};
use crate::error::ConfigErrors;
use crate::validate::{self, Env};

impl Config {
    /// Parses and validates a config. Relative `rx`, `tx` and `routes_file`
    /// paths resolve against `base_dir`; routes files are read. Workers are
    /// checked against the cores this process may run on ([`allowed_cores`]).
    ///
    /// # Errors
    /// Every problem found, each with its key path; see [`ConfigErrors`].
    pub fn from_toml_str(text: &str, base_dir: &Path) -> Result<Config, ConfigErrors> {
        Self::check_with_cores(text, base_dir, &allowed_cores())
    }

    /// Like [`Config::from_toml_str`], for a machine with `cores` cores
    /// (e.g. to check a config meant for another machine). The default
    /// worker is core `cores - 1`.
    ///
    /// # Errors
    /// Every problem found, each with its key path; see [`ConfigErrors`].
    pub fn from_toml_str_with_cores(
        text: &str,
        base_dir: &Path,
        cores: usize,
    ) -> Result<Config, ConfigErrors> {
        let all: Vec<usize> = (0..cores.max(1)).collect();
        Self::check_with_cores(text, base_dir, &all)
    }

    /// Like [`Config::from_toml_str`], with workers allowed on `cores` only.
    ///
    /// # Errors
    /// Every problem found, each with its key path; see [`ConfigErrors`].
    pub fn check_with_cores(
        text: &str,
        base_dir: &Path,
        cores: &[usize],
    ) -> Result<Config, ConfigErrors> {
        let read = |p: &Path| std::fs::read(p);
        validate::parse(
            text,
            &Env {
                cores,
                base_dir,
                read: &read,
            },
        )
    }

    /// Reads, parses and validates the config file at `path`; relative paths
    /// inside it resolve against its directory.
    ///
    /// # Errors
    /// Every problem found; an unreadable file is reported with key `config`.
    pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
        let bytes = std::fs::read(path).map_err(|e| {
            ConfigErrors::one("config", format!("cannot read {}: {e}", path.display()))
        })?;
        let text = String::from_utf8(bytes).map_err(|e| {
            ConfigErrors::one(
                "config",
                format!(
                    "{} is not UTF-8 (bad byte at offset {}); TOML files must be UTF-8",
                    path.display(),
                    e.utf8_error().valid_up_to()
                ),
            )
        })?;
        let base_dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        Self::from_toml_str(&text, base_dir)
    }
}
