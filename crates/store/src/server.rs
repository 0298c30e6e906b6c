//! [`TcpStoreServer`]: serves a [`MemTable`] over the [`crate::wire`]
//! protocol, one thread per client.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, Read};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::StoreError;
use crate::hash::{MemTable, WaitFailure};
use crate::wire::{self, DEFAULT_MAX_FRAME_BYTES, FrameError, PROTOCOL_VERSION, Request, Response};

/// Environment variable holding the shared secret of server and clients.
pub const TOKEN_ENV: &str = "INTRANODE_STORE_TOKEN";

/// How often the acceptor looks at the shutdown flag while no client
/// connects. The listener is non-blocking so that shutdown never depends on
/// waking a blocked `accept` (a self-connect can fail); 10 ms keeps idle
/// cost negligible and adds at most that much to a connect.
const ACCEPT_POLL: Duration = Duration::from_millis(10);

/// How long a fresh connection may take to send its `Hello`, so a silent
/// peer cannot hold a thread forever.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// After an error reply, how long the server keeps reading (and
/// discarding) what the client still sends before closing. Closing a
/// socket with unread input makes the kernel send RST, which can destroy
/// the error reply before the client reads it.
const DRAIN_TIMEOUT: Duration = Duration::from_millis(500);

/// Settings of a [`TcpStoreServer`].
#[derive(Clone)]
pub struct ServerConfig {
    /// Address to listen on; loopback by default, so nothing off the node
    /// can reach the store unless asked for.
    pub addr: IpAddr,
    /// Port to listen on; 0 picks a free one (read it back with
    /// [`TcpStoreServer::local_addr`]).
    pub port: u16,
    /// Largest request body accepted; bigger frames get an error reply and
    /// the connection is closed.
    pub max_frame_bytes: usize,
    /// Shared secret clients must present, if any.
    pub token: Option<String>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            addr: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: 0,
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            token: None,
        }
    }
}

impl fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerConfig")
            .field("addr", &self.addr)
            .field("port", &self.port)
            .field("max_frame_bytes", &self.max_frame_bytes)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl ServerConfig {
    /// The defaults, with the token read from [`TOKEN_ENV`] (an empty
    /// value counts as none).
    pub fn from_env() -> Self {
        Self {
            token: token_from_env(),
            ..Self::default()
        }
    }
}

pub(crate) fn token_from_env() -> Option<String> {
    std::env::var(TOKEN_ENV).ok().filter(|t| !t.is_empty())
}

/// Compares tokens in time independent of where they first differ (the
/// length still shows), so a client cannot guess a token byte by byte.
fn token_matches(expected: &[u8], got: &[u8]) -> bool {
    if expected.len() != got.len() {
        return false;
    }
    let diff = expected
        .iter()
        .zip(got)
        .fold(0u8, |acc, (a, b)| acc | (a ^ b));
    std::hint::black_box(diff) == 0
}

#[derive(Debug, Default)]
struct Clients {
    next_id: u64,
    /// Clones of live client sockets, so shutdown can unblock their reads.
    streams: HashMap<u64, TcpStream>,
    threads: Vec<JoinHandle<()>>,
}

#[derive(Debug)]
struct Shared {
    table: MemTable,
    max_frame_bytes: usize,
    token: Option<String>,
    shutting_down: AtomicBool,
    clients: Mutex<Clients>,
}

impl Shared {
    fn clients(&self) -> MutexGuard<'_, Clients> {
        // Registry updates cannot panic half-way; a poisoned lock is fine.
        self.clients.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn is_shutting_down(&self) -> bool {
        // Acquire pairs with the Release store in `shutdown`.
        self.shutting_down.load(Ordering::Acquire)
    }
}

/// A c10d-style TCP store server.
///
/// [`TcpStoreServer::bind`] starts an acceptor thread and one thread per
/// client; they run until [`TcpStoreServer::shutdown`] or drop, which wake
/// every parked request, close every connection and join every thread.
#[derive(Debug)]
pub struct TcpStoreServer {
    local_addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl TcpStoreServer {
    /// Binds `config.addr:config.port` and starts serving in the
    /// background.
    pub fn bind(config: ServerConfig) -> Result<Self, StoreError> {
        let want = SocketAddr::new(config.addr, config.port);
        let bind_err = |source| StoreError::Bind { addr: want, source };
        let listener = TcpListener::bind(want).map_err(bind_err)?;
        let local_addr = listener.local_addr().map_err(bind_err)?;
        listener.set_nonblocking(true).map_err(bind_err)?;
        let shared = Arc::new(Shared {
            table: MemTable::default(),
            max_frame_bytes: config.max_frame_bytes,
            token: config.token,
            shutting_down: AtomicBool::new(false),
            clients: Mutex::new(Clients::default()),
        });
        let acceptor = {
            let shared = Arc::clone(&shared);
            thread::Builder::new()
                .name(format!("store-accept-{}", local_addr.port()))
                .spawn(move || accept_loop(&shared, &listener))
                .map_err(bind_err)?
        };
        tracing::debug!(%local_addr, "store server listening");
        Ok(Self {
            local_addr,
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// The address the server listens on (with the real port when bound to
    /// port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting, fails parked requests, closes every connection and
    /// joins every thread. Idempotent; also run by drop.
    pub fn shutdown(&mut self) {
        self.shared.shutting_down.store(true, Ordering::Release);
        self.shared.table.close();
        if let Some(acceptor) = self.acceptor.take()
            && acceptor.join().is_err()
        {
            tracing::error!(addr = %self.local_addr, "store acceptor thread panicked");
        }
        // The acceptor is gone, so no client registers after this.
        let threads = {
            let mut clients = self.shared.clients();
            for stream in clients.streams.values() {
                // Unblocks reads and writes; an error means already closed.
                let _ = stream.shutdown(Shutdown::Both);
            }
            std::mem::take(&mut clients.threads)
        };
        for t in threads {
            if t.join().is_err() {
                tracing::error!(addr = %self.local_addr, "store client thread panicked");
            }
        }
    }
}

impl Drop for TcpStoreServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn accept_loop(shared: &Arc<Shared>, listener: &TcpListener) {
    while !shared.is_shutting_down() {
        match listener.accept() {
            Ok((stream, peer)) => spawn_client(shared, stream, peer),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => thread::sleep(ACCEPT_POLL),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                // E.g. out of file descriptors: keep serving the clients we
                // have and try again shortly.
                tracing::warn!(error = %e, "store server accept failed");
                thread::sleep(ACCEPT_POLL);
            }
        }
    }
}

fn spawn_client(shared: &Arc<Shared>, stream: TcpStream, peer: SocketAddr) {
    // Accepted sockets are blocking on Linux, but do not rely on it.
    if let Err(e) = stream
        .set_nonblocking(false)
        .and_then(|()| stream.set_nodelay(true))
    {
        tracing::warn!(%peer, error = %e, "store server could not configure client socket");
        return;
    }
    let registered = match stream.try_clone() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(%peer, error = %e, "store server could not clone client socket");
            return;
        }
    };
    let mut clients = shared.clients();
    // Reap finished threads so a long job's registry stays small.
    let (done, live): (Vec<_>, Vec<_>) = std::mem::take(&mut clients.threads)
        .into_iter()
        .partition(JoinHandle::is_finished);
    clients.threads = live;
    for t in done {
        if t.join().is_err() {
            tracing::error!(%peer, "store client thread panicked");
        }
    }
    let id = clients.next_id;
    clients.next_id += 1;
    let thread_shared = Arc::clone(shared);
    let spawned = thread::Builder::new()
        .name(format!("store-client-{id}"))
        .spawn(move || {
            serve_client(&thread_shared, stream, peer);
            thread_shared.clients().streams.remove(&id);
        });
    match spawned {
        Ok(handle) => {
            clients.streams.insert(id, registered);
            clients.threads.push(handle);
        }
        Err(e) => tracing::warn!(%peer, error = %e, "store server could not spawn client thread"),
    }
}

/// Why a connection ends.
enum Disconnect {
    /// Peer closed or the socket failed: nothing to answer.
    Gone(io::Error),
    /// Peer sent something we refuse: answer with this and close.
    Refuse(String),
}

fn serve_client(shared: &Shared, mut stream: TcpStream, peer: SocketAddr) {
    tracing::debug!(%peer, "store client connected");
    match client_loop(shared, &mut stream) {
        Ok(()) => tracing::debug!(%peer, "store client disconnected"),
        Err(Disconnect::Gone(e)) => {
            if !shared.is_shutting_down() {
                tracing::debug!(%peer, error = %e, "store client connection lost");
            }
        }
        Err(Disconnect::Refuse(message)) => {
            tracing::warn!(%peer, %message, "store server dropping client");
            refuse(&mut stream, message);
        }
    }
}

/// Sends an error reply, then closes gracefully: stop writing, discard
/// what the client still sends for a short while, close.
fn refuse(stream: &mut TcpStream, message: String) {
    let Ok(body) = wire::encode_response(&Response::Refused(message)) else {
        return;
    };
    if stream
        .set_write_timeout(Some(DRAIN_TIMEOUT))
        .and_then(|()| wire::write_frame(stream, &body))
        .is_err()
    {
        return;
    }
    let _ = stream.shutdown(Shutdown::Write);
    let deadline = Instant::now() + DRAIN_TIMEOUT;
    let mut sink = [0u8; 16 * 1024];
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            break;
        }
        match stream.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
}

fn read_request(shared: &Shared, stream: &mut TcpStream) -> Result<Option<Request>, Disconnect> {
    let body = match wire::read_frame(stream, shared.max_frame_bytes) {
        Ok(Some(body)) => body,
        Ok(None) => return Ok(None),
        Err(FrameError::Io(e)) => return Err(Disconnect::Gone(e)),
        Err(FrameError::TooLarge(e)) => return Err(Disconnect::Refuse(e.to_string())),
    };
    wire::decode_request(&body)
        .map(Some)
        .map_err(|e| Disconnect::Refuse(format!("malformed request: {e}")))
}

fn send(stream: &mut TcpStream, resp: &Response) -> Result<(), Disconnect> {
    let body = match wire::encode_response(resp) {
        Ok(body) => body,
        // Only a reply over 4 GiB fails to encode; tell the client why.
        Err(e) => wire::encode_response(&Response::Error(format!("reply too large: {e}")))
            .map_err(|e| Disconnect::Gone(io::Error::other(e)))?,
    };
    wire::write_frame(stream, &body).map_err(Disconnect::Gone)
}

fn client_loop(shared: &Shared, stream: &mut TcpStream) -> Result<(), Disconnect> {
    stream
        .set_read_timeout(Some(HANDSHAKE_TIMEOUT))
        .map_err(Disconnect::Gone)?;
    let Some(hello) = read_request(shared, stream)? else {
        return Ok(());
    };
    handshake(shared, &hello)?;
    send(
        stream,
        &Response::Hello {
            version: PROTOCOL_VERSION,
        },
    )?;
    // Clients idle for long stretches between rendezvous steps.
    stream.set_read_timeout(None).map_err(Disconnect::Gone)?;
    while let Some(req) = read_request(shared, stream)? {
        if matches!(req, Request::Hello { .. }) {
            return Err(Disconnect::Refuse(
                "unexpected hello after handshake".into(),
            ));
        }
        let resp = execute(&shared.table, req);
        send(stream, &resp)?;
    }
    Ok(())
}

fn handshake(shared: &Shared, hello: &Request) -> Result<(), Disconnect> {
    let Request::Hello { version, token } = hello else {
        return Err(Disconnect::Refuse(
            "expected hello as the first message".into(),
        ));
    };
    if *version != PROTOCOL_VERSION {
        return Err(Disconnect::Refuse(format!(
            "unsupported protocol version {version}, server speaks {PROTOCOL_VERSION}"
        )));
    }
    if let Some(expected) = &shared.token {
        let ok = token
            .as_deref()
            .is_some_and(|got| token_matches(expected.as_bytes(), got));
        if !ok {
            let why = if token.is_some() { "wrong" } else { "missing" };
            return Err(Disconnect::Refuse(format!("{why} token")));
        }
    }
    Ok(())
}

fn strs(keys: &[String]) -> Vec<&str> {
    keys.iter().map(String::as_str).collect()
}

fn parked(
    table: &MemTable,
    keys: &[&str],
    timeout_ms: u64,
    ok: impl FnOnce(Vec<Vec<u8>>) -> Response,
) -> Response {
    match table.wait_get(keys, Duration::from_millis(timeout_ms)) {
        Ok(values) => ok(values),
        Err(WaitFailure::TimedOut) => Response::TimedOut,
        Err(WaitFailure::Closed) => Response::Refused(StoreError::Closed.to_string()),
    }
}

/// Runs one request against the table. Blocking requests park this client
/// thread on the table's condvar until the keys appear, the client's
/// deadline passes or the server shuts down.
fn execute(table: &MemTable, req: Request) -> Response {
    match req {
        Request::Set { key, value } => {
            table.set(&key, &value);
            Response::Ok
        }
        Request::Get { key, timeout_ms } => parked(table, &[&key], timeout_ms, |mut v| {
            Response::Bytes(v.pop().unwrap_or_default())
        }),
        Request::Add { key, delta } => match table.add(&key, delta) {
            Ok(v) => Response::Int(v),
            Err(e) => Response::Error(e.to_string()),
        },
        Request::CompareSet {
            key,
            expected,
            desired,
        } => Response::Bytes(table.compare_set(&key, &expected, &desired)),
        Request::Check { keys } => Response::Bool(table.check(&strs(&keys))),
        Request::Wait { keys, timeout_ms } => {
            parked(table, &strs(&keys), timeout_ms, |_| Response::Ok)
        }
        Request::DeleteKey { key } => Response::Bool(table.delete(&key)),
        Request::NumKeys => Response::Int(table.num_keys()),
        Request::MultiGet { keys, timeout_ms } => {
            parked(table, &strs(&keys), timeout_ms, Response::List)
        }
        Request::MultiSet { pairs } => {
            let (keys, values): (Vec<&str>, Vec<&[u8]>) = pairs
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_slice()))
                .unzip();
            match table.multi_set(&keys, &values) {
                Ok(()) => Response::Ok,
                Err(e) => Response::Error(e.to_string()),
            }
        }
        Request::Append { key, value } => {
            table.append(&key, &value);
            Response::Ok
        }
        // Handled by the caller; kept total so a new variant is a compile
        // error here rather than a panic.
        Request::Hello { .. } => Response::Error("unexpected hello after handshake".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_compare() {
        assert!(token_matches(b"abc", b"abc"));
        assert!(!token_matches(b"abc", b"abd"));
        assert!(!token_matches(b"abc", b"ab"));
        assert!(token_matches(b"", b""));
    }

    #[test]
    fn debug_redacts_token() {
        let cfg = ServerConfig {
            token: Some("hunter2".into()),
            ..ServerConfig::default()
        };
        let s = format!("{cfg:?}");
        assert!(!s.contains("hunter2"), "{s}");
        assert!(s.contains("redacted"));
    }

    #[test]
    fn drop_without_clients_returns() {
        let server = TcpStoreServer::bind(ServerConfig::default()).unwrap();
        assert!(server.local_addr().ip().is_loopback());
        assert_ne!(server.local_addr().port(), 0);
        drop(server);
    }
}
