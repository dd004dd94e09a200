//! Changes made through the API, kept in a journal so that they survive a
//! restart (`[api] state`).
//!
//! ```text
//!   API call ──▶ Journaled<B>: B applies it ──ok──▶ one JSON line appended, fsync ──▶ answer
//!   start:  config file ──▶ tables ──▶ replay(journal) through B ──▶ API, control planes
//! ```
//!
//! Why a journal rather than writing the running state back as a config
//! file: the tables cannot tell a route the API added from one a tenant's
//! FRR installed (those come back from the tenant at start and must not be
//! frozen into a file), and a journal appends one line per change instead of
//! rewriting every route of every VR on each call. The config file stays the
//! operator's own, untouched.
//!
//! Each entry is one line, written whole and fsynced before the call
//! answers. A crash mid-write can only leave the last line short: [`read`]
//! drops a last line without its newline (with a warning), so a journal cut
//! at any byte still loads, and the next run cuts it off before its first
//! change is appended (else the two would make one line that does not
//! parse, refused by the start after). Anything else that does not parse is refused,
//! naming the line. An entry that no longer applies at replay (say the
//! config file changed under it) is logged and skipped.

use std::borrow::Cow;
use std::io::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use thiserror::Error;
use vrhost_api::types::{
    BulkResult, BulkRoutes, Filters, IfaceAddr, InterfaceSpec, Neighbor, Outcome, PortInfo, Prefix,
    ReloadReport, Route, RoutePage, VrCounters, VrInfo, VrSpec, WorkerInfo,
};
use vrhost_api::{ApiError, Backend};

/// One change made through the API, as journaled.
// Entries live one at a time while written, and in a list once at start:
// the owned VR description's size is no concern there.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Entry<'a> {
    /// `POST /v1/vrs`.
    CreateVr {
        /// The VR.
        spec: Cow<'a, VrSpec>,
    },
    /// `DELETE /v1/vrs/{vr}`.
    DeleteVr {
        /// VR name.
        vr: Cow<'a, str>,
    },
    /// `POST /v1/vrs/{vr}/interfaces`.
    AddInterface {
        /// VR name.
        vr: Cow<'a, str>,
        /// The interface.
        iface: Cow<'a, InterfaceSpec>,
    },
    /// `DELETE /v1/vrs/{vr}/interfaces/{iface}`.
    DeleteInterface {
        /// VR name.
        vr: Cow<'a, str>,
        /// Interface name.
        iface: Cow<'a, str>,
    },
    /// `POST …/addresses`.
    AddAddress {
        /// VR name.
        vr: Cow<'a, str>,
        /// Interface name.
        iface: Cow<'a, str>,
        /// The address.
        address: IfaceAddr,
    },
    /// `DELETE …/addresses/{addr}/{len}`.
    DeleteAddress {
        /// VR name.
        vr: Cow<'a, str>,
        /// Interface name.
        iface: Cow<'a, str>,
        /// The address.
        address: IfaceAddr,
    },
    /// `POST /v1/vrs/{vr}/routes`.
    AddRoute {
        /// VR name.
        vr: Cow<'a, str>,
        /// The route.
        route: Cow<'a, Route>,
        /// `?replace=true`.
        replace: bool,
    },
    /// `DELETE /v1/vrs/{vr}/routes/{addr}/{len}`.
    DeleteRoute {
        /// VR name.
        vr: Cow<'a, str>,
        /// The prefix.
        prefix: Prefix,
    },
    /// `POST /v1/vrs/{vr}/routes/bulk`.
    BulkRoutes {
        /// VR name.
        vr: Cow<'a, str>,
        /// The request.
        req: Cow<'a, BulkRoutes>,
    },
    /// `POST /v1/vrs/{vr}/neighbors`.
    AddNeighbor {
        /// VR name.
        vr: Cow<'a, str>,
        /// The neighbour.
        neighbor: Cow<'a, Neighbor>,
    },
    /// `DELETE /v1/vrs/{vr}/neighbors/{address}`.
    DeleteNeighbor {
        /// VR name.
        vr: Cow<'a, str>,
        /// Its address.
        address: IpAddr,
    },
    /// `PUT /v1/vrs/{vr}/filters`.
    SetFilters {
        /// VR name.
        vr: Cow<'a, str>,
        /// The lists and the interfaces that apply them.
        filters: Cow<'a, Filters>,
    },
}

impl Entry<'_> {
    /// Applies the change through `b`.
    pub fn apply<B: Backend + ?Sized>(&self, b: &B) -> Result<(), ApiError> {
        match self {
            Entry::CreateVr { spec } => b.create_vr(spec).map(drop),
            Entry::DeleteVr { vr } => b.delete_vr(vr),
            Entry::AddInterface { vr, iface } => b.add_interface(vr, iface).map(drop),
            Entry::DeleteInterface { vr, iface } => b.delete_interface(vr, iface).map(drop),
            Entry::AddAddress { vr, iface, address } => {
                b.add_address(vr, iface, *address).map(drop)
            }
            Entry::DeleteAddress { vr, iface, address } => {
                b.delete_address(vr, iface, *address).map(drop)
            }
            Entry::AddRoute { vr, route, replace } => b.add_route(vr, route, *replace).map(drop),
            Entry::DeleteRoute { vr, prefix } => b.delete_route(vr, *prefix).map(drop),
            Entry::BulkRoutes { vr, req } => b.bulk_routes(vr, req).map(drop),
            Entry::AddNeighbor { vr, neighbor } => b.add_neighbor(vr, neighbor).map(drop),
            Entry::DeleteNeighbor { vr, address } => b.delete_neighbor(vr, *address).map(drop),
            Entry::SetFilters { vr, filters } => b.set_filters(vr, filters).map(drop),
        }
    }
}

/// A journal that cannot be read.
#[derive(Debug, Error)]
pub enum JournalError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The journal.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A complete line that is not an entry.
    #[error("{path} line {line}: not a journal entry ({reason}); fix or remove that line")]
    Corrupt {
        /// The journal.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// The parser's words.
        reason: String,
    },
}

/// The entries of the journal at `path` (none when it does not exist). A
/// last line without its newline is a write cut short and is dropped.
pub fn read(path: &Path) -> Result<Vec<Entry<'static>>, JournalError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(JournalError::Io {
                path: path.into(),
                source,
            })
        }
    };
    parse(&bytes, path)
}

/// The entries in `bytes`, read from `path` (for messages).
pub fn parse(bytes: &[u8], path: &Path) -> Result<Vec<Entry<'static>>, JournalError> {
    let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    if complete < bytes.len() {
        tracing::warn!(
            journal = %path.display(),
            bytes = bytes.len() - complete,
            "the journal's last line was cut short (a write interrupted); it is dropped"
        );
    }
    let mut entries = Vec::new();
    for (i, line) in bytes[..complete].split(|&b| b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let e: Entry<'static> =
            serde_json::from_slice(line).map_err(|e| JournalError::Corrupt {
                path: path.into(),
                line: i + 1,
                reason: e.to_string(),
            })?;
        entries.push(e);
    }
    Ok(entries)
}

/// Applies `entries` in order through `b`; returns how many applied. One
/// that no longer applies is logged and skipped.
pub fn replay<B: Backend + ?Sized>(b: &B, entries: &[Entry<'_>], path: &Path) -> usize {
    let mut applied = 0;
    for (i, e) in entries.iter().enumerate() {
        match e.apply(b) {
            Ok(()) => applied += 1,
            Err(err) => tracing::warn!(
                journal = %path.display(),
                entry = i + 1,
                "a journaled API change no longer applies, skipped: {err}"
            ),
        }
    }
    tracing::info!(journal = %path.display(), applied, skipped = entries.len() - applied, "API changes replayed");
    applied
}

/// The journal file, opened for appending at the first change.
pub struct Journal {
    path: PathBuf,
    file: Mutex<Option<std::fs::File>>,
}

impl Journal {
    /// The journal at `path`.
    pub fn new(path: &Path) -> Journal {
        Journal {
            path: path.into(),
            file: Mutex::new(None),
        }
    }

    /// Appends `e` as one line and fsyncs it.
    pub fn append(&self, e: &Entry<'_>) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(e).map_err(std::io::Error::other)?;
        line.push(b'\n');
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if file.is_none() {
            if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)?;
            }
            self.cut_partial_line()?;
            *file = Some(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.path)?,
            );
        }
        let Some(f) = file.as_mut() else {
            return Err(std::io::Error::other("journal not open"));
        };
        f.write_all(&line)?;
        f.sync_data()
    }
}

impl Journal {
    /// Cuts off a last line without its newline, which a crash left and
    /// [`read`] dropped: appended to, it would glue the next entry to it
    /// into a line that does not parse, and the next start would refuse
    /// the journal.
    fn cut_partial_line(&self) -> std::io::Result<()> {
        use std::io::{Read as _, Seek as _, SeekFrom};
        let mut f = match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        let len = f.metadata()?.len();
        // Back from the end, a block at a time, to the last newline.
        let mut end = len;
        let mut block = [0u8; 4096];
        let keep = loop {
            if end == 0 {
                break 0;
            }
            let start = end.saturating_sub(block.len() as u64);
            let n = (end - start) as usize;
            f.seek(SeekFrom::Start(start))?;
            f.read_exact(&mut block[..n])?;
            if let Some(i) = block[..n].iter().rposition(|&b| b == b'\n') {
                break start + i as u64 + 1;
            }
            end = start;
        };
        if keep < len {
            tracing::warn!(
                journal = %self.path.display(),
                bytes = len - keep,
                "cutting off the journal's last line, cut short by a crash, before the next entry"
            );
            f.set_len(keep)?;
            f.sync_data()?;
        }
        Ok(())
    }
}

/// A backend whose every successful change is journaled before it answers.
pub struct Journaled<B> {
    inner: Arc<B>,
    journal: Journal,
    /// Held from a change to its line: the journal's order is the order
    /// the changes were made in.
    order: Mutex<()>,
}

impl<B: Backend> Journaled<B> {
    /// `inner`, journaling to `journal`.
    pub fn new(inner: Arc<B>, journal: Journal) -> Self {
        Journaled {
            inner,
            journal,
            order: Mutex::new(()),
        }
    }

    /// Makes the change with `change` and journals `e` if it was made, both
    /// under the order lock.
    fn keep<T>(
        &self,
        change: impl FnOnce(&B) -> Result<T, ApiError>,
        e: Entry<'_>,
    ) -> Result<T, ApiError> {
        let _order = self.order.lock().unwrap_or_else(|p| p.into_inner());
        let value = change(&self.inner)?;
        self.journal.append(&e).map_err(|err| {
            tracing::error!(journal = %self.journal.path.display(), "journal write failed: {err}");
            ApiError::Internal(format!(
                "the change was made but could not be journaled ({err}); it will not survive a restart"
            ))
        })?;
        Ok(value)
    }
}

impl<B: Backend> Backend for Journaled<B> {
    fn list_vrs(&self) -> Result<Vec<VrInfo>, ApiError> {
        self.inner.list_vrs()
    }

    fn get_vr(&self, vr: &str) -> Result<VrInfo, ApiError> {
        self.inner.get_vr(vr)
    }

    fn create_vr(&self, spec: &VrSpec) -> Result<VrInfo, ApiError> {
        let e = Entry::CreateVr {
            spec: Cow::Borrowed(spec),
        };
        self.keep(|b| b.create_vr(spec), e)
    }

    fn delete_vr(&self, vr: &str) -> Result<(), ApiError> {
        let e = Entry::DeleteVr {
            vr: Cow::Borrowed(vr),
        };
        self.keep(|b| b.delete_vr(vr), e)
    }

    fn add_interface(&self, vr: &str, iface: &InterfaceSpec) -> Result<Outcome, ApiError> {
        let r = |b: &B| b.add_interface(vr, iface);
        let (vr, iface) = (Cow::Borrowed(vr), Cow::Borrowed(iface));
        self.keep(r, Entry::AddInterface { vr, iface })
    }

    fn delete_interface(&self, vr: &str, iface: &str) -> Result<Outcome, ApiError> {
        let r = |b: &B| b.delete_interface(vr, iface);
        let (vr, iface) = (Cow::Borrowed(vr), Cow::Borrowed(iface));
        self.keep(r, Entry::DeleteInterface { vr, iface })
    }

    fn list_addresses(&self, vr: &str, iface: &str) -> Result<Vec<IfaceAddr>, ApiError> {
        self.inner.list_addresses(vr, iface)
    }

    fn add_address(&self, vr: &str, iface: &str, address: IfaceAddr) -> Result<Outcome, ApiError> {
        let r = |b: &B| b.add_address(vr, iface, address);
        let (vr, iface) = (Cow::Borrowed(vr), Cow::Borrowed(iface));
        self.keep(r, Entry::AddAddress { vr, iface, address })
    }

    fn delete_address(
        &self,
        vr: &str,
        iface: &str,
        address: IfaceAddr,
    ) -> Result<Outcome, ApiError> {
        let r = |b: &B| b.delete_address(vr, iface, address);
        let (vr, iface) = (Cow::Borrowed(vr), Cow::Borrowed(iface));
        self.keep(r, Entry::DeleteAddress { vr, iface, address })
    }

    fn list_routes(&self, vr: &str, offset: u64, limit: u64) -> Result<RoutePage, ApiError> {
        self.inner.list_routes(vr, offset, limit)
    }

    fn add_route(&self, vr: &str, route: &Route, replace: bool) -> Result<Outcome, ApiError> {
        let r = |b: &B| b.add_route(vr, route, replace);
        let (vr, route) = (Cow::Borrowed(vr), Cow::Borrowed(route));
        self.keep(r, Entry::AddRoute { vr, route, replace })
    }

    fn delete_route(&self, vr: &str, prefix: Prefix) -> Result<Outcome, ApiError> {
        let r = |b: &B| b.delete_route(vr, prefix);
        self.keep(
            r,
            Entry::DeleteRoute {
                vr: Cow::Borrowed(vr),
                prefix,
            },
        )
    }

    fn bulk_routes(&self, vr: &str, req: &BulkRoutes) -> Result<BulkResult, ApiError> {
        let r = |b: &B| b.bulk_routes(vr, req);
        let (vr, req) = (Cow::Borrowed(vr), Cow::Borrowed(req));
        self.keep(r, Entry::BulkRoutes { vr, req })
    }

    fn list_neighbors(&self, vr: &str) -> Result<Vec<Neighbor>, ApiError> {
        self.inner.list_neighbors(vr)
    }

    fn add_neighbor(&self, vr: &str, neighbor: &Neighbor) -> Result<Outcome, ApiError> {
        let r = |b: &B| b.add_neighbor(vr, neighbor);
        let (vr, neighbor) = (Cow::Borrowed(vr), Cow::Borrowed(neighbor));
        self.keep(r, Entry::AddNeighbor { vr, neighbor })
    }

    fn delete_neighbor(&self, vr: &str, address: IpAddr) -> Result<Outcome, ApiError> {
        let r = |b: &B| b.delete_neighbor(vr, address);
        let vr = Cow::Borrowed(vr);
        self.keep(r, Entry::DeleteNeighbor { vr, address })
    }

    fn get_filters(&self, vr: &str) -> Result<Filters, ApiError> {
        self.inner.get_filters(vr)
    }

    fn set_filters(&self, vr: &str, filters: &Filters) -> Result<Outcome, ApiError> {
        let r = |b: &B| b.set_filters(vr, filters);
        let (vr, filters) = (Cow::Borrowed(vr), Cow::Borrowed(filters));
        self.keep(r, Entry::SetFilters { vr, filters })
    }

    fn vr_counters(&self, vr: &str) -> Result<VrCounters, ApiError> {
        self.inner.vr_counters(vr)
    }

    fn ports(&self) -> Result<Vec<PortInfo>, ApiError> {
        self.inner.ports()
    }

    fn workers(&self) -> Result<Vec<WorkerInfo>, ApiError> {
        self.inner.workers()
    }

    /// Not journaled: the config file is read again at start, and a
    /// journaled config text would override a file edited since.
    fn capture(
        &self,
        vr: &str,
        iface: &str,
        query: &vrhost_api::types::CaptureQuery,
    ) -> Result<Box<dyn vrhost_api::CaptureStream>, ApiError> {
        // Changes nothing: not journaled.
        self.inner.capture(vr, iface, query)
    }

    fn trace(
        &self,
        vr: &str,
        query: &vrhost_api::types::TraceQuery,
    ) -> Result<vrhost_api::types::TraceReport, ApiError> {
        // Changes nothing: not journaled.
        self.inner.trace(vr, query)
    }

    fn reload(&self, config_toml: &str) -> Result<ReloadReport, ApiError> {
        self.inner.reload(config_toml)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries() -> Vec<Entry<'static>> {
        let route = Route::via(
            "10.9.0.0/16".parse().expect("prefix"),
            "10.0.0.9".parse().expect("gw"),
        );
        vec![
            Entry::AddRoute {
                vr: "red".into(),
                route: Cow::Owned(route),
                replace: false,
            },
            Entry::DeleteRoute {
                vr: "red".into(),
                prefix: "10.9.0.0/16".parse().expect("prefix"),
            },
            Entry::DeleteVr { vr: "blue".into() },
        ]
    }

    fn text(es: &[Entry<'_>]) -> Vec<u8> {
        es.iter()
            .flat_map(|e| {
                let mut l = serde_json::to_vec(e).expect("json");
                l.push(b'\n');
                l
            })
            .collect()
    }

    #[test]
    fn a_journal_cut_at_any_byte_loads_the_entries_before_the_cut() {
        let es = entries();
        let bytes = text(&es);
        let path = Path::new("state.jsonl");
        let ends: Vec<usize> = bytes
            .iter()
            .enumerate()
            .filter(|(_, &b)| b == b'\n')
            .map(|(i, _)| i + 1)
            .collect();
        for cut in 0..=bytes.len() {
            let got = parse(&bytes[..cut], path).expect("loads");
            let whole = ends.iter().filter(|&&e| e <= cut).count();
            assert_eq!(got, es[..whole], "cut at byte {cut}");
        }
    }

    #[test]
    fn a_corrupt_line_is_refused_by_number() {
        let mut bytes = text(&entries());
        bytes.extend_from_slice(b"{\"op\": \"nonsense\"}\n");
        bytes.extend_from_slice(&text(&entries()));
        let err = parse(&bytes, Path::new("s.jsonl")).expect_err("refused");
        assert!(err.to_string().contains("s.jsonl line 4"), "{err}");
    }

    /// A partial last line longer than the block the tail is searched
    /// by, after a line longer than it too: the next append starts a line
    /// of its own.
    #[test]
    fn an_append_after_a_cut_starts_on_a_line_of_its_own() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.jsonl");
        let add: Vec<Route> = (0..300u16)
            .map(|i| {
                let p = format!("10.{}.{}.0/24", i / 256, i % 256);
                Route::via(p.parse().expect("prefix"), "10.0.0.9".parse().expect("gw"))
            })
            .collect();
        let bulk = Entry::BulkRoutes {
            vr: "red".into(),
            req: Cow::Owned(BulkRoutes {
                add,
                delete: Vec::new(),
                replace: false,
            }),
        };
        let line = text(std::slice::from_ref(&bulk));
        let mut bytes = line.clone();
        assert!(bytes.len() > 8192);
        let whole = bytes.len();
        bytes.extend_from_slice(&line[..6000]);
        std::fs::write(&path, &bytes).expect("write");
        assert_eq!(read(&path).expect("loads"), std::slice::from_ref(&bulk));
        let later = entries().remove(0);
        Journal::new(&path).append(&later).expect("append");
        assert_eq!(read(&path).expect("loads"), [bulk, later]);
        assert!(std::fs::read(&path).expect("read")[..whole].ends_with(b"\n"));
    }

    #[test]
    fn appends_are_whole_lines_that_read_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("deep/state.jsonl");
        let j = Journal::new(&path);
        for e in &entries() {
            j.append(e).expect("append");
        }
        assert_eq!(read(&path).expect("read"), entries());
        assert!(read(&dir.path().join("none")).expect("missing").is_empty());
    }
}
