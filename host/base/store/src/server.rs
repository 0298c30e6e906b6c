// (Over 700 lines, 1437: the accept loop, the per-client thread and the
// limits they enforce belong together; the last part is tests.)

//! [`TcpStoreServer`]: serves a [`MemTable`] over the [`crate::wire`]
//! protocol, one thread per client, within the bounds of
//! [`ServerLimits`] (NOTE [memory budget] in `limits.rs`).

use std::collections::HashMap;
use std::fmt;
use std::io::{self, BufWriter, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::StoreError;
use crate::hash::{MemTable, TableLimits, Value, WaitFailure};
use crate::limits::{CLIENT_STACK_BYTES, ServerLimits};
use crate::wire::{self, DecodeLimits, PROTOCOL_VERSION, Request, Response, WireError};

/// Environment variable holding the shared secret of server and clients.
pub const TOKEN_ENV: &str = "INTRANODE_STORE_TOKEN";

/// Pause after `accept` fails for a reason other than an empty queue, and
/// the spare descriptor could not turn it into a refusal (NOTE [out of
/// descriptors]), so the acceptor does not spin on a listener that stays
/// readable. Only that error path sleeps: the acceptor otherwise blocks in
/// `poll(2)` until a client connects or shutdown wakes it, so a login
/// never waits on a timer.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// How a refusal for want of file descriptors starts; the client retries
/// on it (within its connect timeout), as on [`TOO_MANY_CONNECTIONS`].
pub(crate) const OUT_OF_DESCRIPTORS: &str = "server busy: out of file descriptors";

/// Most reads, of up to 4 KiB each, of what a client sent before it is
/// refused for want of descriptors: its hello (at most `max_hello_bytes`,
/// 4 KiB by default, and a frame header) takes one or two.
const OUT_OF_DESCRIPTORS_READS: usize = 4;

/// NOTE [out of descriptors]: when the process runs out of file
/// descriptors (`ulimit -n`, EMFILE; or the system, ENFILE), `accept`
/// fails and the connection stays in the listen backlog. Its client's
/// connect has already succeeded there and its hello is sent; left there,
/// it waits for an answer that never comes and fails for good after its
/// handshake timeout, as if another kind of server were listening (under
/// `ulimit -n 64` with 100 idle clients: after 5.06 s, "is another kind of
/// server listening there?"). So the acceptor holds one spare descriptor. On
/// EMFILE or ENFILE it closes the spare, accepts the waiting connection
/// into the freed slot, reads what the client sent, answers
/// `Refused("server busy: out of file descriptors ...")`, closes it and
/// takes the spare again, all without blocking (the answer is a small
/// frame into an empty send buffer), so the backlog drains. The client
/// retries that refusal with backoff within its connect timeout, and gets
/// in once descriptors free up, or its connect fails with the server's
/// reason. When the spare cannot be had (another thread took the slot),
/// the acceptor counts the failure and tries again after
/// [`ACCEPT_ERROR_PAUSE`]. Tested by `tests/limits.rs`
/// `a_store_out_of_descriptors_refuses_clients_and_lets_them_in_once_freed`.
#[derive(Debug)]
struct SpareDescriptor(Option<std::os::fd::OwnedFd>);

impl SpareDescriptor {
    /// A descriptor held only to be given up: a duplicate of `listener`'s,
    /// which needs no file system and stays harmless while held.
    fn take(listener: &TcpListener) -> Self {
        use std::os::fd::AsFd;
        Self(listener.as_fd().try_clone_to_owned().ok())
    }

    /// Whether `e` is running out of descriptors, which the spare helps
    /// with.
    fn helps_with(e: &io::Error) -> bool {
        matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
    }

    /// Frees the spare's slot, accepts one waiting connection into it and
    /// refuses that connection, then takes the spare again. Whether a
    /// connection was refused.
    fn refuse_one(&mut self, shared: &Shared, listener: &TcpListener, cause: &io::Error) -> bool {
        let Some(spare) = self.0.take() else {
            *self = Self::take(listener);
            return false;
        };
        drop(spare);
        let refused = match listener.accept() {
            Ok((stream, peer)) => {
                refuse_out_of_descriptors(shared, &stream, peer, cause);
                true
            }
            Err(_) => false,
        };
        *self = Self::take(listener);
        refused
    }
}

/// Answers a connection accepted into the spare descriptor's slot (NOTE
/// [out of descriptors]), on the acceptor, never blocking: drops what the
/// client has sent (closing with unread input would reset the connection
/// and could destroy the answer), answers, closes.
fn refuse_out_of_descriptors(
    shared: &Shared,
    stream: &TcpStream,
    peer: SocketAddr,
    cause: &io::Error,
) {
    let message = format!(
        "{OUT_OF_DESCRIPTORS} (accept: {cause}); retry shortly, or raise the server's open-file \
         limit (ulimit -n)"
    );
    // On the acceptor: counted, never written (NOTE [refusal log]).
    shared
        .refusal_log
        .record(refusal_kind(&message), peer, &message);
    if stream.set_nonblocking(true).is_err() {
        return;
    }
    let mut sink = [0u8; 4096];
    for _ in 0..OUT_OF_DESCRIPTORS_READS {
        match (&*stream).read(&mut sink) {
            Ok(n) if n > 0 => {}
            _ => break,
        }
    }
    let Ok(body) = wire::encode_response(&Response::Refused(message)) else {
        return;
    };
    let mut frame = Vec::with_capacity(wire::FRAME_HEADER_BYTES + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(&body);
    // A short frame into a fresh socket's empty send buffer: one write.
    let _ = (&*stream).write(&frame);
    let _ = stream.shutdown(Shutdown::Write);
}

/// After an error reply, how long the server keeps reading (and
/// discarding) what the client still sends before closing. Closing a
/// socket with unread input makes the kernel send RST, which can destroy
/// the error reply before the client reads it.
const DRAIN_TIMEOUT: Duration = Duration::from_millis(500);

/// How often a parked request checks that its client is still connected.
/// A client that closes its socket is noticed within this, and its thread
/// and descriptor released; 100 ms costs a thousand parked requests about
/// ten thousand cheap system calls a second.
const LIVENESS_POLL: Duration = Duration::from_millis(100);

/// How often a connection waiting for buffer space looks at the shutdown
/// flag.
const BUDGET_POLL: Duration = Duration::from_millis(100);

/// Most threads at once that answer connections over `max_connections`
/// with a refusal; past that, such connections are closed without one, so
/// a connect flood cannot turn into a thread flood.
const MAX_REFUSERS: usize = 8;

/// Stack of a refusing thread: it only writes one small frame and drains.
const REFUSER_STACK_BYTES: usize = 64 * 1024;

/// Replies up to this size are built in one buffer and sent in one write;
/// larger ones are written piece by piece straight from the stored values.
const SMALL_REPLY_BYTES: usize = 64 * 1024;

/// How a refusal for being over `max_connections` starts; the client
/// retries on it (within its connect timeout) instead of giving up.
pub(crate) const TOO_MANY_CONNECTIONS: &str = "too many connections";

/// Least time between two lines of the refusal summary (NOTE [refusal
/// log]).
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(1);

/// NOTE [refusal log]: every refused client (wrong or missing token, a
/// login timeout, a malformed or oversize frame, one over the connection
/// cap) used to write a warning line at once, one of them from the
/// acceptor thread: a client without a token made about 7.5k lines a
/// second, and when the job's stderr was slow or not drained (a paused
/// terminal, a stalled log collector) the write blocked, first the
/// acceptor, then every client thread, and no rank could log in. Now a
/// refusal is only counted, under a lock held for a few instructions; the
/// acceptor never writes a line. A client thread that has just refused
/// its client writes the summary of what was counted, at most once per
/// [`REFUSAL_LOG_INTERVAL`] and one thread at a time (the others only
/// count), so a blocked stderr holds at most one thread; the rest is
/// written at shutdown.
#[derive(Debug, Default)]
struct RefusalLog {
    state: Mutex<RefusalLogState>,
}

#[derive(Debug, Default)]
struct RefusalLogState {
    /// Refusals since the last line, by kind.
    pending: Vec<(&'static str, u64)>,
    /// The latest refusal since the last line: peer and message.
    latest: Option<(SocketAddr, String)>,
    last_line: Option<Instant>,
    /// A thread is writing a line now.
    writing: bool,
    /// Lines written, for tests.
    lines: u64,
    /// Refusals counted, for tests.
    total: u64,
}

impl RefusalLog {
    fn state(&self) -> MutexGuard<'_, RefusalLogState> {
        // Counters only; a poisoned lock still holds usable ones.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts one refusal; never writes (the acceptor calls it).
    fn record(&self, kind: &'static str, peer: SocketAddr, message: &str) {
        let mut state = self.state();
        state.total += 1;
        match state.pending.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) => *n += 1,
            None => state.pending.push((kind, 1)),
        }
        // The server's own text (never a token), kept to 200 characters.
        state.latest = Some((peer, message.chars().take(200).collect()));
    }

    /// Writes the summary if one is due and no other thread is writing;
    /// `force` ignores the interval (shutdown). Never from the acceptor.
    fn write_due(&self, force: bool) {
        let (pending, latest) = {
            let mut state = self.state();
            let due = force
                || state
                    .last_line
                    .is_none_or(|t| t.elapsed() >= REFUSAL_LOG_INTERVAL);
            if state.writing || !due || state.pending.is_empty() {
                return;
            }
            state.writing = true;
            (std::mem::take(&mut state.pending), state.latest.take())
        };
        let total: u64 = pending.iter().map(|(_, n)| n).sum();
        let kinds = pending
            .iter()
            .map(|(kind, n)| format!("{n} {kind}"))
            .collect::<Vec<_>>()
            .join(", ");
        let (peer, message) = latest.map_or_else(
            || (String::new(), String::new()),
            |(p, m)| (p.to_string(), m),
        );
        tracing::warn!(
            refused = total,
            %peer,
            %message,
            "store server refused {total} client(s) since its last report ({kinds}); \
             at most one such line a second (the latest peer and message attached)"
        );
        let mut state = self.state();
        state.writing = false;
        state.lines += 1;
        state.last_line = Some(Instant::now());
    }
}

/// The kind of a refusal, for the summary of NOTE [refusal log].
fn refusal_kind(message: &str) -> &'static str {
    if message.starts_with("wrong token") {
        "wrong token"
    } else if message.starts_with("missing token") {
        "missing token"
    } else if message.contains("(login_timeout)") {
        "login timeout"
    } else if message.contains("(frame_timeout)") {
        "frame timeout"
    } else if message.starts_with("malformed") || message.starts_with("expected hello") {
        "malformed request"
    } else if message.starts_with(TOO_MANY_CONNECTIONS) {
        TOO_MANY_CONNECTIONS
    } else if message.starts_with(OUT_OF_DESCRIPTORS) {
        "out of descriptors"
    } else if message.starts_with("server busy") {
        "server busy"
    } else if message.contains("exceeds") {
        "oversize frame"
    } else {
        "other"
    }
}

/// Settings of a [`TcpStoreServer`].
#[derive(Clone)]
pub struct ServerConfig {
    /// Address to listen on; loopback by default, so nothing off the node
    /// can reach the store unless asked for.
    pub addr: IpAddr,
    /// Port to listen on; 0 picks a free one (read it back with
    /// [`TcpStoreServer::local_addr`]).
    pub port: u16,
    /// Shared secret clients must present, if any; never empty.
    pub token: Option<String>,
    /// Every bound on connections, sizes, time and memory.
    pub limits: ServerLimits,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            addr: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: 0,
            token: None,
            limits: ServerLimits::default(),
        }
    }
}

impl fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerConfig")
            .field("addr", &self.addr)
            .field("port", &self.port)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("limits", &self.limits)
            .finish()
    }
}

impl ServerConfig {
    /// The defaults, with the token read from [`TOKEN_ENV`]; fails, naming
    /// the variable, when it is set but empty or not UTF-8.
    pub fn try_from_env() -> Result<Self, StoreError> {
        Ok(Self {
            token: token_from_env()?,
            ..Self::default()
        })
    }

    /// [`ServerConfig::try_from_env`] for callers that cannot handle an
    /// error here: an unusable [`TOKEN_ENV`] is logged and kept as an
    /// empty token, which [`TcpStoreServer::bind`] refuses (naming the
    /// variable), so the server never runs without the token it was meant
    /// to have.
    pub fn from_env() -> Self {
        Self::try_from_env().unwrap_or_else(|e| {
            tracing::error!("{e}");
            Self {
                token: Some(String::new()),
                ..Self::default()
            }
        })
    }
}

/// The token in [`TOKEN_ENV`]: `None` when unset, an error naming the
/// variable when set but empty or not UTF-8.
pub(crate) fn token_from_env() -> Result<Option<String>, StoreError> {
    match std::env::var_os(TOKEN_ENV) {
        None => Ok(None),
        Some(raw) => match raw.into_string() {
            Ok(token) if token.is_empty() => Err(StoreError::BadToken {
                var: TOKEN_ENV,
                reason: "is set but empty; unset it to run without a token, or set a non-empty one",
            }),
            Ok(token) => Ok(Some(token)),
            Err(_) => Err(StoreError::BadToken {
                var: TOKEN_ENV,
                reason: "is not valid UTF-8",
            }),
        },
    }
}

/// An empty token is refused rather than taken as "no token": a job meant
/// to have one must not silently run open. `from_env` turns an unusable
/// variable into an empty token, hence the wording.
pub(crate) fn check_token(token: Option<&str>) -> Result<(), StoreError> {
    match token {
        Some("") => Err(StoreError::BadToken {
            var: TOKEN_ENV,
            reason: "is empty or not valid UTF-8; unset it to run without a token, or set a non-empty UTF-8 one",
        }),
        _ => Ok(()),
    }
}

/// Compares tokens in time independent of where they first differ (the
/// length still shows), so a client cannot guess a token byte by byte.
fn token_matches(expected: &[u8], got: &[u8]) -> bool {
    subtle::ConstantTimeEq::ct_eq(expected, got).into()
}

/// `now + timeout`, or `now` if that overflows `Instant` (limits are
/// validated to at most a day, so it does not).
fn deadline_in(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout).unwrap_or(now)
}

/// The shared byte budget of NOTE [memory budget]: requests and replies
/// in flight on all connections together.
#[derive(Debug)]
struct Budget {
    used_bytes: Mutex<usize>,
    freed: Condvar,
    max_bytes: usize,
}

/// Bytes taken from a [`Budget`], given back on drop.
#[derive(Debug)]
struct Reservation<'a> {
    budget: &'a Budget,
    bytes: usize,
}

impl Budget {
    fn used(&self) -> MutexGuard<'_, usize> {
        // A counter cannot be left half-updated.
        self.used_bytes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes `bytes` (at most the whole budget), waiting for other
    /// connections to give some back; `None` once `deadline` passes or the
    /// server shuts down.
    fn reserve(
        &self,
        bytes: usize,
        deadline: Instant,
        stop: &AtomicBool,
    ) -> Option<Reservation<'_>> {
        let bytes = bytes.min(self.max_bytes);
        let mut used = self.used();
        loop {
            if self.max_bytes - *used >= bytes {
                *used += bytes;
                return Some(Reservation {
                    budget: self,
                    bytes,
                });
            }
            // Acquire pairs with the Release store in `shutdown`.
            if stop.load(Ordering::Acquire) {
                return None;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            used = self
                .freed
                .wait_timeout(used, left.min(BUDGET_POLL))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

impl Reservation<'_> {
    /// One reservation holding both.
    fn merge(mut self, other: Option<Self>) -> Self {
        if let Some(mut other) = other {
            self.bytes += other.bytes;
            other.bytes = 0;
        }
        self
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut used = self.budget.used();
        *used = used.saturating_sub(self.bytes);
        drop(used);
        self.budget.freed.notify_all();
    }
}

#[derive(Debug, Default)]
struct Clients {
    next_id: u64,
    /// The live client sockets, shared with their threads (one descriptor
    /// each), so shutdown can unblock their reads. Its length is the
    /// number of connections served.
    streams: HashMap<u64, Arc<TcpStream>>,
    threads: Vec<JoinHandle<()>>,
}

#[derive(Debug)]
struct Shared {
    table: MemTable,
    limits: ServerLimits,
    token: Option<String>,
    budget: Budget,
    shutting_down: AtomicBool,
    clients: Mutex<Clients>,
    /// Threads now refusing connections over the cap.
    refusers: AtomicUsize,
    /// NOTE [refusal log].
    refusal_log: RefusalLog,
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

    fn decode_limits(&self) -> DecodeLimits {
        DecodeLimits {
            max_items: self.limits.max_keys_per_request,
            max_key_bytes: self.limits.max_key_bytes,
            max_value_bytes: self.limits.max_value_bytes,
        }
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
    /// Dropped by shutdown: the acceptor polls the other end, which then
    /// reads as closed and wakes it.
    wake_acceptor: Option<UnixStream>,
}

impl TcpStoreServer {
    /// Binds `config.addr:config.port` and starts serving in the
    /// background. Fails on an empty token or limits that
    /// [`ServerLimits::validate`] refuses.
    pub fn bind(config: ServerConfig) -> Result<Self, StoreError> {
        check_token(config.token.as_deref())?;
        config.limits.validate()?;
        crate::malloc::return_large_frees_to_the_system();
        let want = SocketAddr::new(config.addr, config.port);
        let bind_err = |source| StoreError::Bind { addr: want, source };
        let listener = TcpListener::bind(want).map_err(bind_err)?;
        let local_addr = listener.local_addr().map_err(bind_err)?;
        listener.set_nonblocking(true).map_err(bind_err)?;
        let (wake_acceptor, woken) = UnixStream::pair().map_err(bind_err)?;
        let limits = config.limits;
        let shared = Arc::new(Shared {
            table: MemTable::new(TableLimits {
                max_value_bytes: limits.max_value_bytes,
                max_stored_bytes: limits.max_stored_bytes,
            }),
            budget: Budget {
                used_bytes: Mutex::new(0),
                freed: Condvar::new(),
                max_bytes: limits.max_buffered_bytes,
            },
            limits,
            token: config.token,
            shutting_down: AtomicBool::new(false),
            clients: Mutex::new(Clients::default()),
            refusers: AtomicUsize::new(0),
            refusal_log: RefusalLog::default(),
        });
        // Taken here, not on the acceptor: a server counts it among its
        // descriptors from the moment it is bound.
        let spare = SpareDescriptor::take(&listener);
        let acceptor = {
            let shared = Arc::clone(&shared);
            thread::Builder::new()
                .name(format!("store-accept-{}", local_addr.port()))
                .spawn(move || accept_loop(&shared, &listener, &woken, spare))
                .map_err(bind_err)?
        };
        tracing::debug!(%local_addr, "store server listening");
        Ok(Self {
            local_addr,
            shared,
            acceptor: Some(acceptor),
            wake_acceptor: Some(wake_acceptor),
        })
    }

    /// The address the server listens on (with the real port when bound to
    /// port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The limits the server enforces.
    pub fn limits(&self) -> &ServerLimits {
        &self.shared.limits
    }

    /// Clients refused so far, and the lines written about them (NOTE
    /// [refusal log]): the second stays near one a second however many
    /// clients are refused.
    pub fn refusals(&self) -> (u64, u64) {
        let state = self.shared.refusal_log.state();
        (state.total, state.lines)
    }

    /// Stops accepting, fails parked requests, closes every connection and
    /// joins every thread. Idempotent; also run by drop.
    pub fn shutdown(&mut self) {
        self.shared.shutting_down.store(true, Ordering::Release);
        self.shared.table.close();
        self.shared.budget.freed.notify_all();
        drop(self.wake_acceptor.take());
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
        self.shared.refusal_log.write_due(true);
    }
}

impl Drop for TcpStoreServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// `poll(2)` over `fds`, waiting at most `timeout_ms` (-1: no limit).
fn poll_fds(fds: &mut [libc::pollfd], timeout_ms: libc::c_int) -> io::Result<()> {
    let count = libc::nfds_t::try_from(fds.len()).map_err(io::Error::other)?;
    // SAFETY: `fds` is a live, exclusive slice of `count` pollfd structs,
    // which poll only reads (fd, events) and writes (revents) within; the
    // descriptors in it are borrowed from live sockets by the callers.
    let rc = unsafe { libc::poll(fds.as_mut_ptr(), count, timeout_ms) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Accepts clients until shutdown; `spare` is NOTE [out of descriptors].
fn accept_loop(
    shared: &Arc<Shared>,
    listener: &TcpListener,
    woken: &UnixStream,
    mut spare: SpareDescriptor,
) {
    use std::os::fd::AsRawFd;
    while !shared.is_shutting_down() {
        match listener.accept() {
            Ok((stream, peer)) => {
                spawn_client(shared, stream, peer, Instant::now());
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if SpareDescriptor::helps_with(&e) && spare.refuse_one(shared, listener, &e) => {
                continue;
            }
            Err(e) => {
                // Out of descriptors with no spare to refuse with, or
                // another failure: keep serving the clients we have and try
                // again shortly. Counted, not written: NOTE [refusal log].
                let unknown = SocketAddr::from(([0, 0, 0, 0], 0));
                let message = format!("accept failed: {e}");
                shared
                    .refusal_log
                    .record("accept failed", unknown, &message);
                thread::sleep(ACCEPT_ERROR_PAUSE);
                continue;
            }
        }
        // The queue is empty: sleep in the kernel until a client connects
        // or shutdown closes the other end of `woken`.
        let mut fds = [listener.as_raw_fd(), woken.as_raw_fd()].map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
        match poll_fds(&mut fds, -1) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                let unknown = SocketAddr::from(([0, 0, 0, 0], 0));
                let message = format!("poll failed: {e}");
                shared
                    .refusal_log
                    .record("accept failed", unknown, &message);
                thread::sleep(ACCEPT_ERROR_PAUSE);
            }
        }
    }
}

fn spawn_client(shared: &Arc<Shared>, stream: TcpStream, peer: SocketAddr, accepted_at: Instant) {
    // Accepted sockets are blocking on Linux, but do not rely on it.
    if let Err(e) = stream
        .set_nonblocking(false)
        .and_then(|()| stream.set_nodelay(true))
    {
        let message = format!("could not configure the client socket: {e}");
        shared
            .refusal_log
            .record("socket set-up failed", peer, &message);
        return;
    }
    let stream = Arc::new(stream);
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
    if clients.streams.len() >= shared.limits.max_connections {
        if let Some(handle) = refuse_over_cap(shared, stream, peer) {
            clients.threads.push(handle);
        }
        return;
    }
    let id = clients.next_id;
    clients.next_id += 1;
    let thread_shared = Arc::clone(shared);
    let thread_stream = Arc::clone(&stream);
    let spawned = thread::Builder::new()
        .name(format!("store-client-{id}"))
        .stack_size(CLIENT_STACK_BYTES)
        .spawn(move || {
            serve_client(&thread_shared, &thread_stream, peer, accepted_at);
            thread_shared.clients().streams.remove(&id);
        });
    match spawned {
        Ok(handle) => {
            clients.streams.insert(id, stream);
            clients.threads.push(handle);
        }
        Err(e) => {
            let message = format!("could not spawn a client thread: {e}");
            shared
                .refusal_log
                .record("thread spawn failed", peer, &message);
        }
    }
}

/// Answers a connection over `max_connections` with a refusal on a short
/// thread of its own (the drain must not hold up the acceptor); when
/// [`MAX_REFUSERS`] are already busy, just closes it.
fn refuse_over_cap(
    shared: &Arc<Shared>,
    stream: Arc<TcpStream>,
    peer: SocketAddr,
) -> Option<JoinHandle<()>> {
    let max = shared.limits.max_connections;
    let message = format!(
        "{TOO_MANY_CONNECTIONS}: this store serves at most {max} at once (max_connections); close idle clients or raise the limit"
    );
    // On the acceptor: counted, never written (NOTE [refusal log]).
    shared
        .refusal_log
        .record(TOO_MANY_CONNECTIONS, peer, &message);
    if shared.refusers.fetch_add(1, Ordering::Relaxed) >= MAX_REFUSERS {
        shared.refusers.fetch_sub(1, Ordering::Relaxed);
        return None;
    }
    let thread_shared = Arc::clone(shared);
    let spawned = thread::Builder::new()
        .name("store-refuse".into())
        .stack_size(REFUSER_STACK_BYTES)
        .spawn(move || {
            refuse(&stream, message);
            thread_shared.refusers.fetch_sub(1, Ordering::Relaxed);
            thread_shared.refusal_log.write_due(false);
        });
    match spawned {
        Ok(handle) => Some(handle),
        Err(_) => {
            shared.refusers.fetch_sub(1, Ordering::Relaxed);
            None
        }
    }
}

/// Why a connection ends.
enum Disconnect {
    /// Peer closed or the socket failed: nothing to answer.
    Gone(io::Error),
    /// Peer sent something we refuse: answer with this and close.
    Refuse(String),
    /// Peer hung up while its request was parked (NOTE [hung-up
    /// waiters]): answered like a refusal, but the usual end of a rank
    /// killed while it waited, so not worth a warning.
    HungUp(String),
}

fn serve_client(shared: &Shared, stream: &TcpStream, peer: SocketAddr, accepted_at: Instant) {
    tracing::debug!(%peer, "store client connected");
    match client_loop(shared, stream, accepted_at) {
        Ok(()) => tracing::debug!(%peer, "store client disconnected"),
        Err(Disconnect::Gone(e)) => {
            if !shared.is_shutting_down() {
                tracing::debug!(%peer, error = %e, "store client connection lost");
            }
        }
        Err(Disconnect::Refuse(message)) => {
            shared
                .refusal_log
                .record(refusal_kind(&message), peer, &message);
            refuse(stream, message);
            shared.refusal_log.write_due(false);
        }
        Err(Disconnect::HungUp(message)) => {
            tracing::debug!(%peer, "store client hung up while its request was parked");
            refuse(stream, message);
        }
    }
}

/// Sends an error reply, then closes gracefully: stop writing, discard
/// what the client still sends for a short while, close.
fn refuse(stream: &TcpStream, message: String) {
    let Ok(body) = wire::encode_response(&Response::Refused(message)) else {
        return;
    };
    let mut out = DeadlineWriter {
        stream,
        deadline: deadline_in(DRAIN_TIMEOUT),
    };
    if wire::write_frame(&mut out, &body).is_err() {
        return;
    }
    let _ = stream.shutdown(Shutdown::Write);
    let deadline = deadline_in(DRAIN_TIMEOUT);
    let mut sink = [0u8; 16 * 1024];
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            break;
        }
        match (&*stream).read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
}

/// Writes with every `write` bounded by what is left until `deadline`, so
/// a client that reads a byte now and then cannot hold a reply (and its
/// share of the buffer budget) past the deadline.
struct DeadlineWriter<'a> {
    stream: &'a TcpStream,
    deadline: Instant,
}

impl Write for DeadlineWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "client did not take its reply in time (frame_timeout)",
            ));
        }
        self.stream.set_write_timeout(Some(left))?;
        (&*self.stream).write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Reads with every `read` bounded by what is left until `deadline`;
/// `late` tells a deadline from other errors.
struct DeadlineReader<'a> {
    stream: &'a TcpStream,
    deadline: Instant,
    late: bool,
}

impl Read for DeadlineReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            self.late = true;
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.stream.set_read_timeout(Some(left))?;
        match (&*self.stream).read(buf) {
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                self.late = true;
                Err(e)
            }
            other => other,
        }
    }
}

/// Why [`fill_by`] stopped short.
enum Short {
    /// The deadline passed.
    Late,
    /// The stream ended or failed.
    Io(io::Error),
}

/// Fills `buf[filled..]` from the stream with every read bounded by what is
/// left until `deadline`. Returns how many bytes `buf` holds: all of it,
/// or fewer when the stream ended.
fn fill_by(
    stream: &TcpStream,
    buf: &mut [u8],
    mut filled: usize,
    deadline: Instant,
) -> Result<usize, Short> {
    while filled < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Short::Late);
        }
        stream.set_read_timeout(Some(left)).map_err(Short::Io)?;
        match (&*stream).read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(Short::Late);
            }
            Err(e) => return Err(Short::Io(e)),
        }
    }
    Ok(filled)
}

fn closed_inside(what: &str, got: usize, want: usize) -> Disconnect {
    Disconnect::Gone(io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("connection closed after {got} of {want} bytes of a {what}"),
    ))
}

fn too_large(len: usize, max: usize, when: &str) -> Disconnect {
    let e = WireError::FrameTooLarge {
        bytes: len as u64,
        max_bytes: max as u64,
    };
    Disconnect::Refuse(format!("{e}{when}"))
}

/// Reads the `Hello`: at most `max_hello_bytes`, all of it by `deadline`
/// (NOTE [memory budget]). `None`: the client left without a word.
fn read_hello(
    shared: &Shared,
    stream: &TcpStream,
    deadline: Instant,
) -> Result<Option<Request>, Disconnect> {
    let max = shared
        .limits
        .max_hello_bytes
        .min(shared.limits.max_frame_bytes);
    let late = || {
        Disconnect::Refuse(format!(
            "no complete hello within {} ms of connecting (login_timeout)",
            shared.limits.login_timeout.as_millis()
        ))
    };
    let mut header = [0u8; wire::FRAME_HEADER_BYTES];
    match fill_by(stream, &mut header, 0, deadline) {
        Ok(0) => return Ok(None),
        Ok(n) if n < header.len() => return Err(closed_inside("frame header", n, header.len())),
        Ok(_) => {}
        Err(Short::Late) => return Err(late()),
        Err(Short::Io(e)) => return Err(Disconnect::Gone(e)),
    }
    let len = u32::from_le_bytes(header) as usize;
    if len > max {
        return Err(too_large(
            len,
            max,
            " before login (only a hello is accepted there)",
        ));
    }
    let mut body = vec![0u8; len];
    match fill_by(stream, &mut body, 0, deadline) {
        Ok(n) if n < len => return Err(closed_inside("hello", n, len)),
        Ok(_) => {}
        Err(Short::Late) => return Err(late()),
        Err(Short::Io(e)) => return Err(Disconnect::Gone(e)),
    }
    wire::decode_request(&body)
        .map(Some)
        .map_err(|e| Disconnect::Refuse(format!("malformed request: {e}")))
}

/// What came in on a logged-in connection.
enum Incoming<'a> {
    /// A request, with the budget its body and decoded form reserved.
    Request(Request, Reservation<'a>),
    /// A well-formed request over a limit: answer with an error, go on.
    OverLimit(String),
}

/// Reads one request after login: waits for its first byte as long as it
/// takes (clients idle between rendezvous steps), then gives the rest of
/// the frame `frame_timeout`, after reserving its share of the budget.
fn read_request<'a>(
    shared: &'a Shared,
    stream: &TcpStream,
) -> Result<Option<Incoming<'a>>, Disconnect> {
    let limits = &shared.limits;
    let mut header = [0u8; wire::FRAME_HEADER_BYTES];
    stream.set_read_timeout(None).map_err(Disconnect::Gone)?;
    let first = loop {
        match (&*stream).read(&mut header) {
            Ok(0) => return Ok(None),
            Ok(n) => break n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Disconnect::Gone(e)),
        }
    };
    let deadline = deadline_in(limits.frame_timeout);
    let late = |what: &str| {
        Disconnect::Refuse(format!(
            "{what} did not arrive within {} ms of its first byte (frame_timeout)",
            limits.frame_timeout.as_millis()
        ))
    };
    match fill_by(stream, &mut header, first, deadline) {
        Ok(n) if n < header.len() => return Err(closed_inside("frame header", n, header.len())),
        Ok(_) => {}
        Err(Short::Late) => return Err(late("the frame header")),
        Err(Short::Io(e)) => return Err(Disconnect::Gone(e)),
    }
    let len = u32::from_le_bytes(header) as usize;
    if len > limits.max_frame_bytes {
        return Err(too_large(len, limits.max_frame_bytes, ""));
    }
    let Some(reservation) = shared.budget.reserve(
        limits.request_reservation_bytes(len),
        deadline,
        &shared.shutting_down,
    ) else {
        if shared.is_shutting_down() {
            return Err(Disconnect::Gone(io::Error::other("store is shutting down")));
        }
        return Err(Disconnect::Refuse(format!(
            "server busy: no room for a {len}-byte request in {} ms (max_buffered_bytes)",
            limits.frame_timeout.as_millis()
        )));
    };
    // Allocated once at its full (reserved) size but never zeroed: pages
    // of a large block are mapped only as bytes arrive, so a frame that
    // announces much and sends little costs little.
    let mut body = Vec::with_capacity(len);
    let mut reader = DeadlineReader {
        stream,
        deadline,
        late: false,
    };
    match (&mut reader).take(len as u64).read_to_end(&mut body) {
        Ok(n) if n < len => return Err(closed_inside("frame body", n, len)),
        Ok(_) => {}
        Err(_) if reader.late => return Err(late("the frame body")),
        Err(e) => return Err(Disconnect::Gone(e)),
    }
    // NOTE [decoded items]: many tiny keys decode to several times their
    // frame; reserve that too, from the count, before decoding.
    let (items, pairs) = wire::list_items(&body);
    // At most what the budget has beside the body's share, so that a
    // request the limits admit can always be served.
    let items_bytes = limits
        .decoded_items_bytes(items, pairs)
        .min(limits.max_buffered_bytes.saturating_sub(reservation.bytes));
    let items_reservation = if items_bytes == 0 {
        None
    } else {
        let Some(r) = shared
            .budget
            .reserve(items_bytes, deadline, &shared.shutting_down)
        else {
            if shared.is_shutting_down() {
                return Err(Disconnect::Gone(io::Error::other("store is shutting down")));
            }
            return Err(Disconnect::Refuse(format!(
                "server busy: no room for a {len}-byte request of {items} keys in {} ms (max_buffered_bytes)",
                limits.frame_timeout.as_millis()
            )));
        };
        Some(r)
    };
    match wire::decode_request_limited(&body, &shared.decode_limits()) {
        Ok(req) => Ok(Some(Incoming::Request(
            req,
            reservation.merge(items_reservation),
        ))),
        Err(e @ WireError::OverLimit { .. }) => Ok(Some(Incoming::OverLimit(e.to_string()))),
        Err(e) => Err(Disconnect::Refuse(format!("malformed request: {e}"))),
    }
}

/// A reply: a small [`Response`], or values written straight from the
/// table's shared copies.
enum Reply {
    Plain(Response),
    /// A `Bytes` (`list == false`, one value) or `List` reply.
    Values {
        list: bool,
        values: Vec<Value>,
    },
}

fn send(shared: &Shared, stream: &TcpStream, reply: Reply) -> Result<(), Disconnect> {
    let mut out = DeadlineWriter {
        stream,
        deadline: deadline_in(shared.limits.frame_timeout),
    };
    let (list, values) = match reply {
        Reply::Plain(resp) => {
            // Plain replies are a few bytes, or an error message naming at
            // most a few keys: not worth a reservation.
            let body =
                wire::encode_response(&resp).map_err(|e| Disconnect::Gone(io::Error::other(e)))?;
            return wire::write_frame(&mut out, &body).map_err(Disconnect::Gone);
        }
        Reply::Values { list, values } => (list, values),
    };
    // `execute` checked the size against max_response_bytes.
    let body_bytes = wire::values_body_bytes(list, values.iter().map(|v| v.len()))
        .ok_or_else(|| Disconnect::Gone(io::Error::other("reply does not fit a frame")))?;
    // The values may be overwritten in the table while this reply holds
    // them, so they count against the budget until written.
    let _reservation = shared
        .budget
        .reserve(body_bytes, out.deadline, &shared.shutting_down)
        .ok_or_else(|| {
            if shared.is_shutting_down() {
                return Disconnect::Gone(io::Error::other("store is shutting down"));
            }
            // The refusal itself is a few bytes and needs no reservation.
            Disconnect::Refuse(format!(
                "server busy: no room for a {body_bytes}-byte reply in {} ms (max_buffered_bytes)",
                shared.limits.frame_timeout.as_millis()
            ))
        })?;
    let header = u32::try_from(body_bytes)
        .map_err(|e| Disconnect::Gone(io::Error::other(e)))?
        .to_le_bytes();
    let capacity = (wire::FRAME_HEADER_BYTES + body_bytes).min(SMALL_REPLY_BYTES);
    let mut w = BufWriter::with_capacity(capacity, out);
    w.write_all(&header)
        .and_then(|()| {
            let slices: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
            wire::write_values_body(&mut w, list, &slices)
        })
        .and_then(|()| w.flush())
        .map_err(Disconnect::Gone)
}

fn client_loop(
    shared: &Shared,
    stream: &TcpStream,
    accepted_at: Instant,
) -> Result<(), Disconnect> {
    let login_deadline = accepted_at
        .checked_add(shared.limits.login_timeout)
        .unwrap_or(accepted_at);
    let Some(hello) = read_hello(shared, stream, login_deadline)? else {
        return Ok(());
    };
    handshake(shared, &hello)?;
    send(
        shared,
        stream,
        Reply::Plain(Response::Hello {
            version: PROTOCOL_VERSION,
        }),
    )?;
    while let Some(incoming) = read_request(shared, stream)? {
        let reply = match incoming {
            Incoming::OverLimit(message) => Reply::Plain(Response::Error(message)),
            Incoming::Request(Request::Hello { .. }, _) => {
                return Err(Disconnect::Refuse(
                    "unexpected hello after handshake".into(),
                ));
            }
            Incoming::Request(req, reservation) => {
                let reply = execute(shared, stream, req)?;
                drop(reservation);
                reply
            }
        };
        send(shared, stream, reply)?;
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

/// Whether the client may still read a reply and send more: `false` once
/// it has shut down its sending side (`close` or `shutdown(SHUT_WR)`: a
/// FIN arrived) or the connection failed.
///
/// NOTE [hung-up waiters]: this must not look at unread input. A client
/// that pipelines a request (or one stray byte) behind a `WAIT` and then
/// closes leaves bytes in our receive queue; a check that peeks saw them
/// and counted the client as present forever, so two such waits holding
/// the whole buffer budget wedged the store. `POLLRDHUP` reports the FIN
/// whatever is still queued. A half-closed client (SHUT_WR, still
/// reading) cannot be told apart from a closed one without writing to it,
/// so both get the same answer: a refusal saying why, then close.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn peer_is_there(stream: &TcpStream) -> bool {
    use std::os::fd::AsRawFd;
    let mut fds = [libc::pollfd {
        fd: stream.as_raw_fd(),
        events: libc::POLLIN | libc::POLLRDHUP,
        revents: 0,
    }];
    match poll_fds(&mut fds, 0) {
        Ok(()) => fds[0].revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) == 0,
        // Interrupted: ask again at the next check.
        Err(e) if e.kind() == io::ErrorKind::Interrupted => true,
        Err(_) => false,
    }
}

/// Elsewhere there is no `POLLRDHUP`: a closed socket reads as end of
/// stream, but bytes waiting count as there (see NOTE [hung-up waiters]).
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn peer_is_there(stream: &TcpStream) -> bool {
    if stream.set_nonblocking(true).is_err() {
        return false;
    }
    let mut probe = [0u8; 1];
    let there = match stream.peek(&mut probe) {
        Ok(n) => n > 0,
        Err(e) => matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
        ),
    };
    stream.set_nonblocking(false).is_ok() && there
}

/// Parks until `keys` exist (or the timeout, shutdown, or the client
/// leaving), then builds the reply from their values.
fn parked(
    shared: &Shared,
    stream: &TcpStream,
    keys: &[&str],
    timeout_ms: u64,
    ok: impl FnOnce(Vec<Value>) -> Reply,
) -> Result<Reply, Disconnect> {
    let mut alive = || peer_is_there(stream);
    let waited = shared.table.wait_get(
        keys,
        Duration::from_millis(timeout_ms),
        Some((&mut alive, LIVENESS_POLL)),
    );
    match waited {
        Ok(values) => Ok(checked_size(&shared.limits, ok(values))),
        Err(WaitFailure::TimedOut) => Ok(Reply::Plain(Response::TimedOut)),
        Err(WaitFailure::Closed) => Ok(Reply::Plain(Response::Refused(
            StoreError::Closed.to_string(),
        ))),
        // NOTE [hung-up waiters]: a closed client gets the refusal into the
        // void; a half-closed one learns why.
        Err(WaitFailure::ClientGone) => Err(Disconnect::HungUp(
            "the connection was closed for sending while a request was parked; \
             keep it open both ways until the reply arrives"
                .into(),
        )),
    }
}

/// A values reply over `max_response_bytes` becomes an error.
fn checked_size(limits: &ServerLimits, reply: Reply) -> Reply {
    let Reply::Values { list, values } = &reply else {
        return reply;
    };
    let max = limits.max_response_bytes;
    match wire::values_body_bytes(*list, values.iter().map(|v| v.len())) {
        Some(bytes) if bytes <= max => reply,
        size => {
            let size = size.map_or_else(|| "more than 4 GiB".to_owned(), |b| format!("{b} bytes"));
            Reply::Plain(Response::Error(format!(
                "reply of {size} exceeds the limit of {max} bytes (max_response_bytes)"
            )))
        }
    }
}

fn done(result: Result<(), StoreError>) -> Reply {
    Reply::Plain(match result {
        Ok(()) => Response::Ok,
        Err(e) => Response::Error(e.to_string()),
    })
}

/// Runs one request against the table. Blocking requests park this client
/// thread until the keys appear, the client's deadline passes, the client
/// goes away or the server shuts down.
fn execute(shared: &Shared, stream: &TcpStream, req: Request) -> Result<Reply, Disconnect> {
    let table = &shared.table;
    Ok(match req {
        Request::Set { key, value } => done(table.set(key, value)),
        Request::Get { key, timeout_ms } => {
            return parked(shared, stream, &[&key], timeout_ms, |values| {
                Reply::Values {
                    list: false,
                    values,
                }
            });
        }
        Request::Add { key, delta } => match table.add(&key, delta) {
            Ok(v) => Reply::Plain(Response::Int(v)),
            Err(e) => Reply::Plain(Response::Error(e.to_string())),
        },
        Request::CompareSet {
            key,
            expected,
            desired,
        } => match table.compare_set(&key, &expected, desired) {
            Ok(value) => Reply::Values {
                list: false,
                values: vec![value],
            },
            Err(e) => Reply::Plain(Response::Error(e.to_string())),
        },
        Request::Check { keys } => Reply::Plain(Response::Bool(table.check(&strs(&keys)))),
        Request::Wait { keys, timeout_ms } => {
            return parked(shared, stream, &strs(&keys), timeout_ms, |_| {
                Reply::Plain(Response::Ok)
            });
        }
        Request::DeleteKey { key } => Reply::Plain(Response::Bool(table.delete(&key))),
        Request::NumKeys => Reply::Plain(Response::Int(table.num_keys())),
        Request::MultiGet { keys, timeout_ms } => {
            return parked(shared, stream, &strs(&keys), timeout_ms, |values| {
                Reply::Values { list: true, values }
            });
        }
        Request::MultiSet { pairs } => done(table.multi_set(pairs)),
        Request::Append { key, value } => done(table.append(&key, &value)),
        // Handled by the caller; kept total so a new variant is a compile
        // error here rather than a panic.
        Request::Hello { .. } => {
            Reply::Plain(Response::Error("unexpected hello after handshake".into()))
        }
    })
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
