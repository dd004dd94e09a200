//! A small blocking client for the management API.
//!
//! It speaks plain HTTP/1.1 over `std::os::unix::net::UnixStream` or
//! `std::net::TcpStream`, one request per connection (`Connection: close`),
//! rather than through hyper: `vrhost ctl` makes one or a few calls and exits,
//! so an async runtime, a connection pool and their dependencies would buy
//! nothing. The response reader handles what the server (hyper) sends:
//! `Content-Length` bodies, `chunked` bodies, and bodies that end at close.

use std::io::{Read, Write};
use std::net::{IpAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use thiserror::Error;

use crate::error::{ApiError, ErrorBody};
use crate::types::{
    AddressBody, BulkResult, BulkRoutes, Filters, IfaceAddr, InterfaceInfo, InterfaceSpec,
    Neighbor, Outcome, OutcomeBody, PortInfo, Prefix, ReloadReport, Route, RoutePage, VrCounters,
    VrInfo, VrSpec, WorkerInfo,
};

/// Why a call failed.
#[derive(Debug, Error)]
pub enum ClientError {
    /// The server could not be reached or the connection broke.
    #[error("{target}: {source}")]
    Io {
        /// Socket path or host:port.
        target: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The server answered something that is not the API's HTTP.
    #[error("bad response from the server: {0}")]
    Protocol(String),
    /// The server answered with an API error.
    #[error("{0}")]
    Api(ApiError),
}

impl ClientError {
    /// The API error, if the server answered one.
    pub fn api(&self) -> Option<&ApiError> {
        match self {
            ClientError::Api(e) => Some(e),
            _ => None,
        }
    }
}

/// Where the server is.
#[derive(Clone, Debug)]
enum Target {
    Unix(PathBuf),
    Tcp(String),
    /// `HOST:PORT`, the name the certificate must carry, and the TLS setup.
    Tls(
        String,
        rustls::pki_types::ServerName<'static>,
        Arc<rustls::ClientConfig>,
    ),
}

/// A raw HTTP response.
#[derive(Clone, Debug)]
pub struct RawResponse {
    /// Status code.
    pub status: u16,
    /// `Content-Type`, if any.
    pub content_type: Option<String>,
    /// Body bytes.
    pub body: Vec<u8>,
}

/// A blocking API client.
#[derive(Clone, Debug)]
pub struct Client {
    target: Target,
    token: Option<String>,
    timeout: Duration,
}

/// Percent-encodes one path segment (a VR or interface name).
fn seg(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b':' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn protocol(msg: impl Into<String>) -> ClientError {
    ClientError::Protocol(msg.into())
}

/// Decodes a `Transfer-Encoding: chunked` body (RFC 9112 §7.1).
fn dechunk(mut data: &[u8]) -> Result<Vec<u8>, ClientError> {
    let mut out = Vec::new();
    loop {
        let line_end = find(data, b"\r\n").ok_or_else(|| protocol("truncated chunk size"))?;
        let line =
            std::str::from_utf8(&data[..line_end]).map_err(|_| protocol("bad chunk size"))?;
        let size_text = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| protocol(format!("bad chunk size '{size_text}'")))?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        if data.len() < size + 2 {
            return Err(protocol("truncated chunk"));
        }
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

/// Percent-encodes everything but unreserved characters (RFC 3986 §2.3),
/// for a path segment or a query value.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Sends `request` and copies the (chunked) body of a 2xx answer to `out`
/// piece by piece; an error answer becomes its [`ApiError`].
fn stream_to<S: Read + Write>(
    mut s: S,
    request: &[u8],
    out: &mut dyn Write,
) -> Result<u64, ClientError> {
    let io = |source| ClientError::Io {
        target: String::new(),
        source,
    };
    s.write_all(request).and_then(|()| s.flush()).map_err(io)?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    let mut fill = |s: &mut S, buf: &mut Vec<u8>| -> Result<bool, ClientError> {
        let n = s.read(&mut chunk).map_err(io)?;
        buf.extend_from_slice(&chunk[..n]);
        Ok(n > 0)
    };
    let head_end = loop {
        if let Some(i) = find(&buf, b"\r\n\r\n") {
            break i;
        }
        if !fill(&mut s, &mut buf)? {
            return Err(protocol("no end of headers"));
        }
    };
    let head = std::str::from_utf8(&buf[..head_end])
        .map_err(|_| protocol("headers not UTF-8"))?
        .to_string();
    let status: u16 = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| protocol("bad status line"))?;
    if !(200..300).contains(&status) {
        while fill(&mut s, &mut buf)? {}
        let resp = parse_response(&buf)?;
        let err = match serde_json::from_slice::<ErrorBody>(&resp.body) {
            Ok(b) => ApiError::from_body(resp.status, b),
            Err(_) => ApiError::Internal(format!(
                "HTTP {}: {}",
                resp.status,
                String::from_utf8_lossy(&resp.body)
            )),
        };
        return Err(ClientError::Api(err));
    }
    if !head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return Err(protocol("a capture answer must be chunked"));
    }
    buf.drain(..head_end + 4);
    let mut written = 0u64;
    loop {
        let line_end = loop {
            if let Some(i) = find(&buf, b"\r\n") {
                break i;
            }
            if !fill(&mut s, &mut buf)? {
                // The server went away mid-stream (vrhost stopped): what
                // arrived is whole records.
                return Ok(written);
            }
        };
        let line = std::str::from_utf8(&buf[..line_end]).map_err(|_| protocol("bad chunk size"))?;
        let size_text = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| protocol(format!("bad chunk size '{size_text}'")))?;
        if size == 0 {
            return Ok(written);
        }
        while buf.len() < line_end + 2 + size + 2 {
            if !fill(&mut s, &mut buf)? {
                return Err(protocol("truncated chunk"));
            }
        }
        out.write_all(&buf[line_end + 2..line_end + 2 + size])
            .and_then(|()| out.flush())
            .map_err(io)?;
        written += size as u64;
        buf.drain(..line_end + 2 + size + 2);
    }
}

/// Parses a whole HTTP/1.1 response read until the server closed.
fn parse_response(raw: &[u8]) -> Result<RawResponse, ClientError> {
    let head_end = find(raw, b"\r\n\r\n").ok_or_else(|| protocol("no end of headers"))?;
    let head = std::str::from_utf8(&raw[..head_end]).map_err(|_| protocol("headers not UTF-8"))?;
    let rest = &raw[head_end + 4..];
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| protocol(format!("bad status line '{status_line}'")))?;
    let mut content_type = None;
    let mut length = None;
    let mut chunked = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "content-type" => content_type = Some(value.to_string()),
            "content-length" => {
                length = Some(
                    value
                        .parse::<usize>()
                        .map_err(|_| protocol("bad Content-Length"))?,
                )
            }
            "transfer-encoding" => chunked = value.to_ascii_lowercase().contains("chunked"),
            _ => {}
        }
    }
    let body = if chunked {
        dechunk(rest)?
    } else if let Some(n) = length {
        rest.get(..n)
            .ok_or_else(|| protocol("body shorter than Content-Length"))?
            .to_vec()
    } else {
        rest.to_vec()
    };
    Ok(RawResponse {
        status,
        content_type,
        body,
    })
}

/// TLS client settings trusting only the certificates in the PEM file `ca`.
fn tls_config(ca: &std::path::Path) -> Result<rustls::ClientConfig, ClientError> {
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    let certs = rustls::pki_types::CertificateDer::pem_file_iter(ca)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| protocol(format!("{}: {e}", ca.display())))?;
    for c in certs {
        roots
            .add(c)
            .map_err(|e| protocol(format!("{}: {e}", ca.display())))?;
    }
    if roots.is_empty() {
        return Err(protocol(format!("{}: no certificate in it", ca.display())));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| protocol(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

impl Client {
    /// A client for the server on a Unix socket.
    pub fn unix(socket: impl Into<PathBuf>, token: Option<String>) -> Client {
        Client {
            target: Target::Unix(socket.into()),
            token,
            timeout: Duration::from_secs(300),
        }
    }

    /// A client for `http://HOST:PORT` (plain HTTP, which the server only
    /// offers on loopback) or `https://HOST:PORT`, whose certificate must
    /// chain to a certificate in the PEM file `ca` (required for https).
    pub fn url(url: &str, token: Option<String>) -> Result<Client, ClientError> {
        Self::url_with_ca(url, token, None)
    }

    /// [`Client::url`] with the CA file for `https://` URLs.
    pub fn url_with_ca(
        url: &str,
        token: Option<String>,
        ca: Option<&std::path::Path>,
    ) -> Result<Client, ClientError> {
        let (tls, rest) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
            (Some(rest), _) => (false, rest),
            (_, Some(rest)) => (true, rest),
            _ => {
                return Err(protocol(format!(
                    "'{url}': expected http://HOST:PORT or https://HOST:PORT"
                )))
            }
        };
        let hostport = rest.trim_end_matches('/');
        if hostport.is_empty() || hostport.contains('/') {
            return Err(protocol(format!("'{url}': expected http(s)://HOST:PORT")));
        }
        let target = if tls {
            let ca = ca.ok_or_else(|| {
                protocol(format!(
                    "'{url}': an https URL needs the CA certificate that signed the server's (--cacert)"
                ))
            })?;
            let host = hostport
                .rsplit_once(':')
                .map_or(hostport, |(h, _)| h)
                .trim_start_matches('[')
                .trim_end_matches(']');
            let name = rustls::pki_types::ServerName::try_from(host.to_string())
                .map_err(|e| protocol(format!("'{url}': {e}")))?;
            Target::Tls(hostport.to_string(), name, Arc::new(tls_config(ca)?))
        } else {
            Target::Tcp(hostport.to_string())
        };
        Ok(Client {
            target,
            token,
            timeout: Duration::from_secs(300),
        })
    }

    /// How long to wait for the server on each read and write (default 300 s:
    /// a million-route bulk load takes a while).
    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.timeout = timeout;
        self
    }

    fn target_name(&self) -> String {
        match &self.target {
            Target::Unix(p) => p.display().to_string(),
            Target::Tcp(h) | Target::Tls(h, ..) => h.clone(),
        }
    }

    fn exchange(&self, request: &[u8]) -> std::io::Result<Vec<u8>> {
        fn go<S: Read + Write>(mut s: S, request: &[u8]) -> std::io::Result<Vec<u8>> {
            s.write_all(request)?;
            s.flush()?;
            let mut raw = Vec::new();
            s.read_to_end(&mut raw)?;
            Ok(raw)
        }
        let timeout = Some(self.timeout);
        match &self.target {
            Target::Unix(path) => {
                let s = UnixStream::connect(path)?;
                s.set_read_timeout(timeout)?;
                s.set_write_timeout(timeout)?;
                go(s, request)
            }
            Target::Tcp(hostport) => {
                let s = TcpStream::connect(hostport.as_str())?;
                s.set_read_timeout(timeout)?;
                s.set_write_timeout(timeout)?;
                go(s, request)
            }
            Target::Tls(hostport, name, config) => {
                let s = TcpStream::connect(hostport.as_str())?;
                s.set_read_timeout(timeout)?;
                s.set_write_timeout(timeout)?;
                let conn = rustls::ClientConnection::new(config.clone(), name.clone())
                    .map_err(std::io::Error::other)?;
                go(rustls::StreamOwned::new(conn, s), request)
            }
        }
    }

    /// `GET /v1/vrs/{vr}/interfaces/{iface}/capture`: writes the pcap
    /// stream to `out` as it arrives (flushing after each piece) until the
    /// capture ends; returns the bytes written. No read timeout applies: a
    /// quiet interface sends nothing for as long as it is quiet.
    pub fn capture(
        &self,
        vr: &str,
        iface: &str,
        q: &crate::types::CaptureQuery,
        out: &mut dyn Write,
    ) -> Result<u64, ClientError> {
        let mut query = Vec::new();
        if let Some(n) = q.count {
            query.push(format!("count={n}"));
        }
        if let Some(f) = &q.filter {
            query.push(format!("filter={}", percent_encode(f)));
        }
        if let Some(n) = q.snaplen {
            query.push(format!("snaplen={n}"));
        }
        if let Some(n) = q.seconds {
            query.push(format!("seconds={n}"));
        }
        let path = format!(
            "/v1/vrs/{}/interfaces/{}/capture{}{}",
            percent_encode(vr),
            percent_encode(iface),
            if query.is_empty() { "" } else { "?" },
            query.join("&")
        );
        let host = match &self.target {
            Target::Unix(_) => "localhost",
            Target::Tcp(h) | Target::Tls(h, ..) => h.as_str(),
        };
        let mut head =
            format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nAccept: */*\r\n");
        if let Some(token) = &self.token {
            head.push_str(&format!("Authorization: Bearer {token}\r\n"));
        }
        head.push_str("\r\n");
        let io = |source| ClientError::Io {
            target: self.target_name(),
            source,
        };
        match &self.target {
            Target::Unix(p) => stream_to(UnixStream::connect(p).map_err(io)?, head.as_bytes(), out),
            Target::Tcp(h) => stream_to(
                TcpStream::connect(h.as_str()).map_err(io)?,
                head.as_bytes(),
                out,
            ),
            Target::Tls(h, name, config) => {
                let s = TcpStream::connect(h.as_str()).map_err(io)?;
                let conn = rustls::ClientConnection::new(config.clone(), name.clone())
                    .map_err(|e| io(std::io::Error::other(e)))?;
                stream_to(rustls::StreamOwned::new(conn, s), head.as_bytes(), out)
            }
        }
        .map_err(|e| match e {
            ClientError::Io { source, .. } => io(source),
            other => other,
        })
    }

    /// Sends one request and returns the response, whatever its status.
    pub fn raw(
        &self,
        method: &str,
        path: &str,
        body: Option<(&str, &[u8])>,
    ) -> Result<RawResponse, ClientError> {
        let host = match &self.target {
            Target::Unix(_) => "localhost",
            Target::Tcp(h) | Target::Tls(h, ..) => h.as_str(),
        };
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nAccept: */*\r\n"
        );
        if let Some(token) = &self.token {
            head.push_str(&format!("Authorization: Bearer {token}\r\n"));
        }
        let (content_type, bytes) = body.unwrap_or(("", &[]));
        if body.is_some() {
            head.push_str(&format!("Content-Type: {content_type}\r\n"));
        }
        head.push_str(&format!("Content-Length: {}\r\n\r\n", bytes.len()));
        let mut request = head.into_bytes();
        request.extend_from_slice(bytes);
        let raw = self.exchange(&request).map_err(|source| ClientError::Io {
            target: self.target_name(),
            source,
        })?;
        parse_response(&raw)
    }

    fn call<T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: Option<(&str, &[u8])>,
    ) -> Result<T, ClientError> {
        let resp = self.raw(method, path, body)?;
        if !(200..300).contains(&resp.status) {
            let err = match serde_json::from_slice::<ErrorBody>(&resp.body) {
                Ok(b) => ApiError::from_body(resp.status, b),
                Err(_) => ApiError::Internal(format!(
                    "HTTP {}: {}",
                    resp.status,
                    String::from_utf8_lossy(&resp.body)
                )),
            };
            return Err(ClientError::Api(err));
        }
        serde_json::from_slice(&resp.body)
            .map_err(|e| protocol(format!("{method} {path}: unexpected body: {e}")))
    }

    fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        self.call("GET", path, None)
    }

    fn send<B: Serialize, T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: &B,
    ) -> Result<T, ClientError> {
        let bytes = serde_json::to_vec(body).map_err(|e| protocol(e.to_string()))?;
        self.call(method, path, Some(("application/json", &bytes)))
    }

    fn delete(&self, path: &str, missing_ok: bool) -> Result<Outcome, ClientError> {
        let q = if missing_ok { "?missing_ok=true" } else { "" };
        let body: OutcomeBody = self.call("DELETE", &format!("{path}{q}"), None)?;
        Ok(body.result)
    }

    /// `POST /v1/vrs/{vr}/interfaces`.
    pub fn add_interface(&self, vr: &str, iface: &InterfaceSpec) -> Result<Outcome, ClientError> {
        let body: OutcomeBody =
            self.send("POST", &format!("/v1/vrs/{}/interfaces", seg(vr)), iface)?;
        Ok(body.result)
    }

    /// `DELETE /v1/vrs/{vr}/interfaces/{iface}`.
    pub fn delete_interface(
        &self,
        vr: &str,
        iface: &str,
        missing_ok: bool,
    ) -> Result<Outcome, ClientError> {
        self.delete(
            &format!("/v1/vrs/{}/interfaces/{}", seg(vr), seg(iface)),
            missing_ok,
        )
    }

    /// `GET /v1/vrs`.
    pub fn vrs(&self) -> Result<Vec<VrInfo>, ClientError> {
        self.get("/v1/vrs")
    }

    /// `GET /v1/vrs/{vr}`.
    pub fn vr(&self, vr: &str) -> Result<VrInfo, ClientError> {
        self.get(&format!("/v1/vrs/{}", seg(vr)))
    }

    /// `POST /v1/vrs`.
    pub fn create_vr(&self, spec: &VrSpec) -> Result<VrInfo, ClientError> {
        self.send("POST", "/v1/vrs", spec)
    }

    /// `DELETE /v1/vrs/{vr}`.
    pub fn delete_vr(&self, vr: &str) -> Result<(), ClientError> {
        self.delete(&format!("/v1/vrs/{}", seg(vr)), false)
            .map(|_| ())
    }

    /// `GET /v1/vrs/{vr}/interfaces`.
    pub fn interfaces(&self, vr: &str) -> Result<Vec<InterfaceInfo>, ClientError> {
        self.get(&format!("/v1/vrs/{}/interfaces", seg(vr)))
    }

    fn addresses_path(vr: &str, iface: &str) -> String {
        format!("/v1/vrs/{}/interfaces/{}/addresses", seg(vr), seg(iface))
    }

    /// `GET /v1/vrs/{vr}/interfaces/{iface}/addresses`.
    pub fn addresses(&self, vr: &str, iface: &str) -> Result<Vec<IfaceAddr>, ClientError> {
        self.get(&Self::addresses_path(vr, iface))
    }

    /// `POST /v1/vrs/{vr}/interfaces/{iface}/addresses`.
    pub fn add_address(
        &self,
        vr: &str,
        iface: &str,
        address: IfaceAddr,
    ) -> Result<Outcome, ClientError> {
        let body: OutcomeBody = self.send(
            "POST",
            &Self::addresses_path(vr, iface),
            &AddressBody { address },
        )?;
        Ok(body.result)
    }

    /// `DELETE /v1/vrs/{vr}/interfaces/{iface}/addresses/{addr}/{len}`.
    pub fn delete_address(
        &self,
        vr: &str,
        iface: &str,
        address: IfaceAddr,
        missing_ok: bool,
    ) -> Result<Outcome, ClientError> {
        let path = format!(
            "{}/{}/{}",
            Self::addresses_path(vr, iface),
            seg(&address.addr().to_string()),
            address.prefix_len()
        );
        self.delete(&path, missing_ok)
    }

    /// `GET /v1/vrs/{vr}/routes?offset=&limit=`: one page.
    pub fn routes(&self, vr: &str, offset: u64, limit: u64) -> Result<RoutePage, ClientError> {
        self.get(&format!(
            "/v1/vrs/{}/routes?offset={offset}&limit={limit}",
            seg(vr)
        ))
    }

    /// Every route of a VR, page after page.
    pub fn all_routes(&self, vr: &str) -> Result<Vec<Route>, ClientError> {
        let mut out = Vec::new();
        loop {
            let page = self.routes(vr, out.len() as u64, crate::server::MAX_PAGE)?;
            let done =
                page.routes.is_empty() || out.len() as u64 + page.routes.len() as u64 >= page.total;
            out.extend(page.routes);
            if done {
                return Ok(out);
            }
        }
    }

    /// `POST /v1/vrs/{vr}/routes[?replace=true]`.
    pub fn add_route(
        &self,
        vr: &str,
        route: &Route,
        replace: bool,
    ) -> Result<Outcome, ClientError> {
        let q = if replace { "?replace=true" } else { "" };
        let body: OutcomeBody =
            self.send("POST", &format!("/v1/vrs/{}/routes{q}", seg(vr)), route)?;
        Ok(body.result)
    }

    /// `DELETE /v1/vrs/{vr}/routes/{addr}/{len}`.
    pub fn delete_route(
        &self,
        vr: &str,
        prefix: Prefix,
        missing_ok: bool,
    ) -> Result<Outcome, ClientError> {
        let path = format!(
            "/v1/vrs/{}/routes/{}/{}",
            seg(vr),
            seg(&prefix.addr().to_string()),
            prefix.prefix_len()
        );
        self.delete(&path, missing_ok)
    }

    /// `POST /v1/vrs/{vr}/routes/bulk`.
    pub fn bulk_routes(&self, vr: &str, req: &BulkRoutes) -> Result<BulkResult, ClientError> {
        self.send("POST", &format!("/v1/vrs/{}/routes/bulk", seg(vr)), req)
    }

    /// `GET /v1/vrs/{vr}/filters`.
    pub fn filters(&self, vr: &str) -> Result<Filters, ClientError> {
        self.get(&format!("/v1/vrs/{}/filters", seg(vr)))
    }

    /// `PUT /v1/vrs/{vr}/filters`.
    pub fn set_filters(&self, vr: &str, f: &Filters) -> Result<Outcome, ClientError> {
        let body: OutcomeBody = self.send("PUT", &format!("/v1/vrs/{}/filters", seg(vr)), f)?;
        Ok(body.result)
    }

    /// `GET /v1/vrs/{vr}/neighbors`.
    pub fn neighbors(&self, vr: &str) -> Result<Vec<Neighbor>, ClientError> {
        self.get(&format!("/v1/vrs/{}/neighbors", seg(vr)))
    }

    /// `POST /v1/vrs/{vr}/neighbors`.
    pub fn add_neighbor(&self, vr: &str, n: &Neighbor) -> Result<Outcome, ClientError> {
        let body: OutcomeBody = self.send("POST", &format!("/v1/vrs/{}/neighbors", seg(vr)), n)?;
        Ok(body.result)
    }

    /// `DELETE /v1/vrs/{vr}/neighbors/{address}`.
    pub fn delete_neighbor(
        &self,
        vr: &str,
        addr: IpAddr,
        missing_ok: bool,
    ) -> Result<Outcome, ClientError> {
        let path = format!("/v1/vrs/{}/neighbors/{}", seg(vr), seg(&addr.to_string()));
        self.delete(&path, missing_ok)
    }

    /// `GET /v1/vrs/{vr}/counters`.
    pub fn vr_counters(&self, vr: &str) -> Result<VrCounters, ClientError> {
        self.get(&format!("/v1/vrs/{}/counters", seg(vr)))
    }

    /// `GET /v1/vrs/{vr}/trace`: waits until the trace's count of packets
    /// or its time is reached.
    pub fn trace(
        &self,
        vr: &str,
        q: &crate::types::TraceQuery,
    ) -> Result<crate::types::TraceReport, ClientError> {
        let mut query = Vec::new();
        if let Some(n) = q.count {
            query.push(format!("count={n}"));
        }
        if let Some(i) = &q.interface {
            query.push(format!("interface={}", percent_encode(i)));
        }
        if let Some(n) = q.seconds {
            query.push(format!("seconds={n}"));
        }
        let sep = if query.is_empty() { "" } else { "?" };
        self.get(&format!(
            "/v1/vrs/{}/trace{sep}{}",
            seg(vr),
            query.join("&")
        ))
    }

    /// `GET /v1/counters`.
    pub fn counters(&self) -> Result<Vec<VrCounters>, ClientError> {
        self.get("/v1/counters")
    }

    /// `GET /v1/ports`.
    pub fn ports(&self) -> Result<Vec<PortInfo>, ClientError> {
        self.get("/v1/ports")
    }

    /// `GET /v1/workers`.
    pub fn workers(&self) -> Result<Vec<WorkerInfo>, ClientError> {
        self.get("/v1/workers")
    }

    /// `POST /v1/config/reload` with the whole config file.
    pub fn reload(&self, config_toml: &str) -> Result<ReloadReport, ClientError> {
        self.call(
            "POST",
            "/v1/config/reload",
            Some(("application/toml", config_toml.as_bytes())),
        )
    }

    /// `GET /metrics`, as text.
    pub fn metrics(&self) -> Result<String, ClientError> {
        let resp = self.raw("GET", "/metrics", None)?;
        if resp.status != 200 {
            let body: ErrorBody = serde_json::from_slice(&resp.body)
                .map_err(|_| protocol(format!("HTTP {}", resp.status)))?;
            return Err(ClientError::Api(ApiError::from_body(resp.status, body)));
        }
        String::from_utf8(resp.body).map_err(|_| protocol("metrics are not UTF-8"))
    }

    /// `GET /openapi.json`.
    pub fn openapi(&self) -> Result<serde_json::Value, ClientError> {
        self.get("/openapi.json")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_length_chunked_and_close_delimited_bodies() {
        let r = parse_response(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}").unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"{}"[..]));
        let r = parse_response(
            b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!((r.status, r.body.as_slice()), (404, &b"abcde"[..]));
        let r = parse_response(b"HTTP/1.1 200 OK\r\n\r\nrest").unwrap();
        assert_eq!(r.body, b"rest");
        assert!(parse_response(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nab").is_err());
        assert!(parse_response(b"garbage").is_err());
    }

    #[test]
    fn path_segments_are_escaped() {
        assert_eq!(seg("red"), "red");
        assert_eq!(seg("a b/c"), "a%20b%2Fc");
        assert_eq!(seg("2001:db8::"), "2001:db8::");
    }

    #[test]
    fn urls() {
        assert!(Client::url("http://127.0.0.1:8080", None).is_ok());
        assert!(Client::url("http://127.0.0.1:8080/", None).is_ok());
        assert!(Client::url("https://x:1", None).is_err());
        assert!(Client::url("http://x:1/v1", None).is_err());
    }
}
