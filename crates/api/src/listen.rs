//! Where the API listens and how each connection is served: the private Unix
//! socket, the optional TCP listener with TLS (rustls), and the limits every
//! connection lives under.
//!
//! ```text
//!  accept ─▶ connection cap (MAX_CONNECTIONS, else closed at once)
//!         ─▶ TLS handshake (TCP with tls_cert/tls_key), within HEADER_TIMEOUT
//!         ─▶ hyper HTTP/1.1: request headers within HEADER_TIMEOUT
//!         ─▶ axum Router; each body chunk within BODY_IDLE_TIMEOUT
//! ```
//!
//! A client that opens connections and sends nothing, or sends its headers
//! or body a byte at a time, holds one connection slot for seconds, not
//! forever.

use std::collections::HashMap;
use std::fs::Permissions;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use axum::body::Body;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use futures_util::StreamExt as _;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

/// Connections open at once on each listener; more are closed at once.
pub const MAX_CONNECTIONS: usize = 512;
/// Connections open at once from one TCP peer address; more are closed at
/// once, so one client cannot take every slot.
pub const MAX_PER_PEER: usize = 32;
/// Time a client has for the TLS handshake, and then for each request's
/// headers.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for the next piece of a request body.
pub const BODY_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest time a request body may take to arrive in all.
pub const BODY_TOTAL_TIMEOUT: Duration = Duration::from_secs(120);

/// PEM files for TLS on the TCP listener.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// Certificate chain, leaf first.
    pub cert: PathBuf,
    /// Private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// Makes sure the socket's directory is private: created 0700 when missing;
/// refused when someone else owns it or others may write to it, since they
/// could then replace the socket with their own.
fn private_dir(socket: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let dir = match socket.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("creating the API socket directory {}", dir.display()))?;
    }
    let meta = std::fs::metadata(dir)
        .with_context(|| format!("API socket directory {}", dir.display()))?;
    // /proc/self belongs to this process's effective user.
    let me = std::fs::metadata("/proc/self").map(|m| m.uid()).ok();
    if !meta.is_dir() {
        bail!(
            "{}: the API socket's directory is not a directory",
            dir.display()
        );
    }
    if meta.uid() != 0 && Some(meta.uid()) != me {
        bail!(
            "{}: the API socket's directory belongs to uid {}; it must be this user's or root's",
            dir.display(),
            meta.uid()
        );
    }
    if meta.mode() & 0o022 != 0 {
        bail!(
            "{}: the API socket's directory is writable by others (mode {:o}); \
             they could replace the socket. Use a private directory (0700), such as /run/vrhost",
            dir.display(),
            meta.mode() & 0o7777
        );
    }
    Ok(())
}

/// Removes a socket file no server answers on; refuses to touch anything else.
fn remove_stale_socket(path: &Path) -> anyhow::Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("{}", path.display())),
    };
    if !meta.file_type().is_socket() {
        bail!(
            "{}: exists and is not a socket; refusing to replace it",
            path.display()
        );
    }
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        bail!("{}: another server is listening there", path.display());
    }
    std::fs::remove_file(path).with_context(|| format!("removing stale socket {}", path.display()))
}

/// The TLS server side from PEM files, each error naming its file.
fn tls_acceptor(files: &TlsFiles) -> anyhow::Result<tokio_rustls::TlsAcceptor> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("api.tls_cert {}", files.cert.display()))?;
    if certs.is_empty() {
        bail!(
            "api.tls_cert {}: no certificate in it",
            files.cert.display()
        );
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .with_context(|| format!("api.tls_key {}", files.key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .context("api.tls_cert and api.tls_key do not make a usable pair")?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// The bound listeners, ready to serve.
pub(crate) struct Listeners {
    unix: tokio::net::UnixListener,
    tcp: Option<(tokio::net::TcpListener, Option<tokio_rustls::TlsAcceptor>)>,
    socket: PathBuf,
}

impl Listeners {
    /// The TCP address bound, if any.
    pub(crate) fn tcp_addr(&self) -> anyhow::Result<Option<SocketAddr>> {
        match &self.tcp {
            Some((l, _)) => Ok(Some(l.local_addr().context("TCP listener address")?)),
            None => Ok(None),
        }
    }
}

/// Binds the Unix socket (0600, in a private directory) and, with `listen`,
/// the TCP listener, with TLS when `tls` names the files.
pub(crate) async fn bind(
    socket: &Path,
    listen: Option<SocketAddr>,
    tls: Option<&TlsFiles>,
) -> anyhow::Result<Listeners> {
    let acceptor = tls.map(tls_acceptor).transpose()?;
    private_dir(socket)?;
    remove_stale_socket(socket)?;
    let unix = tokio::net::UnixListener::bind(socket)
        .with_context(|| format!("binding API socket {}", socket.display()))?;
    // Owner only: the socket is as powerful as the admin token's holder.
    std::fs::set_permissions(socket, Permissions::from_mode(0o600))
        .with_context(|| format!("chmod 0600 {}", socket.display()))?;
    let tcp = match listen {
        Some(addr) => Some((
            tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding API listener {addr}"))?,
            acceptor,
        )),
        None => None,
    };
    info!(socket = %socket.display(), tcp = ?listen, tls = tls.is_some(), "management API listening");
    Ok(Listeners {
        unix,
        tcp,
        socket: socket.to_path_buf(),
    })
}

/// Gives every request body [`BODY_IDLE_TIMEOUT`] between its pieces and
/// [`BODY_TOTAL_TIMEOUT`] in all; a body that takes longer ends in an error
/// the handler reports as a 400.
pub(crate) async fn body_timeout(req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let stream = body.into_data_stream();
    let deadline = tokio::time::Instant::now() + BODY_TOTAL_TIMEOUT;
    let timed = futures_util::stream::unfold(Some(stream), move |stream| async move {
        let mut stream = stream?;
        let wait =
            BODY_IDLE_TIMEOUT.min(deadline.saturating_duration_since(tokio::time::Instant::now()));
        match tokio::time::timeout(wait, stream.next()).await {
            Ok(Some(Ok(chunk))) => Some((Ok(chunk), Some(stream))),
            Ok(Some(Err(e))) => Some((Err(std::io::Error::other(e)), None)),
            Ok(None) => None,
            Err(_) => Some((
                Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "the body stalled for {} s, or took over {} s in all",
                        BODY_IDLE_TIMEOUT.as_secs(),
                        BODY_TOTAL_TIMEOUT.as_secs()
                    ),
                )),
                None,
            )),
        }
    });
    next.run(Request::from_parts(parts, Body::from_stream(timed)))
        .await
}

/// Completes when `stop` turns true (or its sender is gone), holding no
/// borrow of it afterwards.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await.map(drop);
}

/// Serves one connection until it ends or `stop` turns true (then it
/// finishes its request in flight and closes).
async fn serve_connection<S>(io: S, app: Router, mut stop: watch::Receiver<bool>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = TowerToHyperService::new(app);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT);
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                debug!("API connection: {e}");
            }
        }
        _ = stopped(&mut stop) => {
            conn.as_mut().graceful_shutdown();
            if let Err(e) = conn.await {
                debug!("API connection at stop: {e}");
            }
        }
    }
}

/// Accepts on `accept` until `stop`, each connection on its own task under
/// the connection cap.
async fn accept_loop<S, F, Fut>(
    what: &'static str,
    mut accept: F,
    app: Router,
    mut stop: watch::Receiver<bool>,
) where
    S: Send + 'static,
    F: FnMut() -> Fut,
    Fut: Future<Output = std::io::Result<(S, Option<IpAddr>)>>,
    S: ConnectionStart,
{
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let per_peer: Arc<std::sync::Mutex<HashMap<IpAddr, usize>>> = Arc::default();
    let mut tasks = JoinSet::new();
    loop {
        let (stream, peer) = tokio::select! {
            r = accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    warn!(listener = what, "API accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = stopped(&mut stop) => break,
        };
        // Reap finished tasks so the set stays as large as what is open.
        while tasks.try_join_next().is_some() {}
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            debug!(
                listener = what,
                ?peer,
                "API connection refused: {MAX_CONNECTIONS} open"
            );
            continue;
        };
        if let Some(ip) = peer {
            let mut open = per_peer.lock().unwrap_or_else(|e| e.into_inner());
            let n = open.entry(ip).or_insert(0);
            if *n >= MAX_PER_PEER {
                debug!(listener = what, %ip, "API connection refused: {MAX_PER_PEER} open from it");
                continue;
            }
            *n += 1;
        }
        let (app, stop, per_peer) = (app.clone(), stop.clone(), per_peer.clone());
        tasks.spawn(async move {
            stream.start(app, stop).await;
            drop(permit);
            if let Some(ip) = peer {
                let mut open = per_peer.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(n) = open.get_mut(&ip) {
                    *n -= 1;
                    if *n == 0 {
                        open.remove(&ip);
                    }
                }
            }
        });
    }
    while tasks.join_next().await.is_some() {}
}

/// What a freshly accepted connection needs before HTTP: nothing on the Unix
/// socket and plain TCP, a TLS handshake otherwise.
trait ConnectionStart {
    /// Serves the connection to its end.
    fn start(self, app: Router, stop: watch::Receiver<bool>) -> impl Future<Output = ()> + Send;
}

impl ConnectionStart for tokio::net::UnixStream {
    async fn start(self, app: Router, stop: watch::Receiver<bool>) {
        serve_connection(self, app, stop).await;
    }
}

/// A TCP connection and, with TLS, the acceptor to shake hands with.
struct TcpConn(tokio::net::TcpStream, Option<tokio_rustls::TlsAcceptor>);

impl ConnectionStart for TcpConn {
    async fn start(self, app: Router, stop: watch::Receiver<bool>) {
        let TcpConn(tcp, tls) = self;
        match tls {
            None => serve_connection(tcp, app, stop).await,
            Some(acceptor) => {
                match tokio::time::timeout(HEADER_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => serve_connection(stream, app, stop).await,
                    Ok(Err(e)) => debug!("API TLS handshake failed: {e}"),
                    Err(_) => debug!("API TLS handshake timed out"),
                }
            }
        }
    }
}

/// Serves `app` on the listeners until `shutdown` completes, then removes
/// the socket.
pub(crate) async fn run(
    listeners: Listeners,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let Listeners { unix, tcp, socket } = listeners;
    let unix = Arc::new(unix);
    let unix_task = tokio::spawn(accept_loop(
        "unix",
        move || {
            let unix = unix.clone();
            async move {
                let (s, _) = unix.accept().await?;
                Ok((s, None))
            }
        },
        app.clone(),
        stop_rx.clone(),
    ));
    let tcp_task = tcp.map(|(l, tls)| {
        let l = Arc::new(l);
        tokio::spawn(accept_loop(
            "tcp",
            move || {
                let (l, tls) = (l.clone(), tls.clone());
                async move {
                    let (s, peer) = l.accept().await?;
                    Ok((TcpConn(s, tls), Some(peer.ip())))
                }
            },
            app,
            stop_rx,
        ))
    });
    shutdown.await;
    let _ = stop_tx.send(true);
    let mut result = unix_task.await.context("API task (Unix socket)");
    if let Some(t) = tcp_task {
        result = result.and(t.await.context("API task (TCP)"));
    }
    if let Err(e) = std::fs::remove_file(&socket) {
        warn!(socket = %socket.display(), "removing API socket: {e}");
    }
    info!("management API stopped");
    result
}
