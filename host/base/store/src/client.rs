// (Over 700 lines, 910: one client type whose every call shares the
// connection, the login and the one per-call deadline that bounds it
// (reconnect, handshake, request, reply, the replies owed to earlier
// calls: NOTE [late replies]). Split, each half would need the other's
// private connection state.)

//! [`TcpStore`]: the client side of the TCP store.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use crate::StoreError;
use crate::server::{OUT_OF_DESCRIPTORS, TOO_MANY_CONNECTIONS, check_token, token_from_env};
use crate::store::{DEFAULT_TIMEOUT, Store, TimeoutCell, owned_keys};
use crate::wire::{self, FrameError, PROTOCOL_VERSION, Request, Response};

/// Extra time a call waits for its reply beyond its own timeout, so the
/// server's answer normally wins over the client's deadline. A parked
/// call that gets no reply within it ends with the same `Timeout` as the
/// server's `TimedOut` (NOTE [late replies]); any other call with an i/o
/// error.
pub(crate) const IO_GRACE: Duration = Duration::from_secs(5);

/// Most replies a connection may owe to parked calls that ended before
/// the server answered (NOTE [late replies]). Each was overdue by
/// [`IO_GRACE`] at least; a server that owes this many (20 s and more
/// overdue) is hung rather than slow, so the connection is dropped and the
/// next call reconnects.
const MAX_LATE_REPLIES: u32 = 4;

/// Largest reply [`TcpStore`] reads by default: the largest a server with
/// the default limits sends (`max_response_bytes`). NOTE [client trusts no
/// server]: a reply's length used to be checked against `u32::MAX`, so a
/// server (or anything listening on the port) that announced 4 GiB and
/// sent it made the client buffer it (1.5 GiB measured). Raise it with
/// [`TcpStore::with_max_reply_bytes`] for a server with larger limits.
/// [`crate::TorchStore`] caps a `multi_get`'s whole reply with it too
/// ([`crate::TorchStore::with_max_reply_bytes`]).
pub const DEFAULT_MAX_REPLY_BYTES: usize = 32 << 20;

/// First and largest pause between connect attempts (doubling in between).
const BACKOFF_START: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Default of [`ClientConfig::handshake_timeout`]: a store answers the
/// hello as soon as it reads it (its own login deadline is 10 s), so a
/// server silent this long is not one, or is hung.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Settings of a [`TcpStore`] client.
#[derive(Clone)]
pub struct ClientConfig {
    /// Default timeout of blocking operations ([`Store::timeout`]).
    pub timeout: Duration,
    /// How long [`TcpStore::connect`] keeps retrying before giving up.
    pub connect_timeout: Duration,
    /// How long a server that accepted the connection has to answer the
    /// hello ([`DEFAULT_HANDSHAKE_TIMEOUT`]). A silent server is not
    /// retried: the connect fails with [`StoreError::Silent`], naming the
    /// address, instead of holding the client for `connect_timeout`.
    pub handshake_timeout: Duration,
    /// Shared secret to present to the server, if it wants one.
    pub token: Option<String>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_TIMEOUT,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            token: None,
        }
    }
}

impl fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientConfig")
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("handshake_timeout", &self.handshake_timeout)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// Bound of every blocking store operation and of connecting, in
/// milliseconds (default [`DEFAULT_TIMEOUT`]): how long a rank waits for a
/// peer that never arrives before the collective names it as missing.
pub const STORE_TIMEOUT_ENV: &str = "INTRANODE_STORE_TIMEOUT_MS";

/// How long a server that accepted the connection has to answer the hello,
/// in milliseconds (default [`DEFAULT_HANDSHAKE_TIMEOUT`]).
pub const HANDSHAKE_TIMEOUT_ENV: &str = "INTRANODE_STORE_HANDSHAKE_TIMEOUT_MS";

/// A positive number of milliseconds from `name`, `default` when unset or
/// blank.
fn millis_var(
    var: &impl Fn(&str) -> Option<String>,
    name: &'static str,
    default: Duration,
) -> Result<Duration, StoreError> {
    match var(name) {
        Some(v) if !v.trim().is_empty() => match v.trim().parse::<u64>() {
            Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
            _ => Err(StoreError::Config {
                var: name,
                value: v,
                expected: "a positive number of milliseconds",
            }),
        },
        _ => Ok(default),
    }
}

impl ClientConfig {
    /// The defaults, with the token read from [`crate::TOKEN_ENV`] and the
    /// timeouts from [`STORE_TIMEOUT_ENV`]. A timeout that does not parse
    /// is logged and ignored; [`ClientConfig::try_from_env`] refuses it
    /// instead. A token that is set but empty or not UTF-8 is logged and
    /// kept as an empty token, which [`TcpStore::connect`] refuses, naming
    /// the variable: a client never silently goes without its token.
    pub fn from_env() -> Self {
        match token_from_env() {
            Ok(token) => Self::try_from_env().unwrap_or_else(|e| {
                tracing::warn!("{e}; using the default store timeout");
                Self {
                    token,
                    ..Self::default()
                }
            }),
            Err(e) => {
                tracing::error!("{e}");
                Self {
                    token: Some(String::new()),
                    ..Self::default()
                }
            }
        }
    }

    /// [`ClientConfig::from_env`], failing on a malformed
    /// [`STORE_TIMEOUT_ENV`] or a token that is set but empty or not UTF-8
    /// (the error names the variable, never the value).
    pub fn try_from_env() -> Result<Self, StoreError> {
        // Read apart from the rest: `from_vars` sees only UTF-8 values.
        let token = token_from_env()?;
        let config = Self::from_vars(|name| match name {
            crate::TOKEN_ENV => None,
            _ => std::env::var(name).ok(),
        })?;
        Ok(Self { token, ..config })
    }

    /// [`ClientConfig::try_from_env`] with variables looked up by `var`.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self, StoreError> {
        let token = var(crate::TOKEN_ENV);
        check_token(token.as_deref())?;
        let timeout = millis_var(&var, STORE_TIMEOUT_ENV, DEFAULT_TIMEOUT)?;
        let handshake_timeout = millis_var(&var, HANDSHAKE_TIMEOUT_ENV, DEFAULT_HANDSHAKE_TIMEOUT)?;
        Ok(Self {
            timeout,
            connect_timeout: timeout,
            handshake_timeout,
            token,
        })
    }
}

/// A [`Store`] backed by a [`crate::TcpStoreServer`].
///
/// One connection behind a mutex: calls from several threads are
/// serialized, and a blocking `get` holds the connection until it returns.
/// Give each thread its own `TcpStore` when they must wait concurrently.
///
/// After an I/O or protocol error the connection is dropped and the next
/// call reconnects, within its own deadline: for at most the smaller of
/// the connect timeout and the call's own timeout (its wait, or the store
/// timeout), so a `get_with_timeout(1 s)` to a store that is gone returns
/// in about a second (`tests/store_faults.rs`
/// `a_calls_own_timeout_bounds_its_reconnect_to_a_gone_server`). The
/// failed call is never retried by itself, so an `add` is never applied
/// twice. A parked call (`get`, `wait`, `multi_get`) whose deadline passes
/// before a slow server answers returns [`StoreError::Timeout`] and keeps
/// the connection (NOTE [late replies]).
pub struct TcpStore {
    addr: String,
    resolved: Vec<SocketAddr>,
    token: Option<String>,
    connect_timeout: Duration,
    handshake_timeout: Duration,
    timeout: TimeoutCell,
    max_reply_bytes: usize,
    conn: Mutex<Option<Conn>>,
}

/// A logged-in connection of a [`TcpStore`].
struct Conn {
    stream: TcpStream,
    /// Replies the server still owes to parked calls that ended before it
    /// answered (NOTE [late replies]).
    late_replies: u32,
}

impl fmt::Debug for TcpStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpStore")
            .field("addr", &self.addr)
            .field("timeout", &self.timeout.get())
            .finish_non_exhaustive()
    }
}

fn ms(d: Duration) -> u64 {
    // Round up so a 0.5 ms timeout does not become "do not wait".
    u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

impl TcpStore {
    /// Connects to the server at `addr` (anything like `"host:port"` or a
    /// `SocketAddr`), retrying with backoff until `config.connect_timeout`
    /// so clients may start before the server, then handshakes.
    ///
    /// A refused handshake (wrong token, other protocol version) fails at
    /// once; it would not get better by retrying. A server at its
    /// connection limit, or out of file descriptors (NOTE [out of
    /// descriptors] in `server.rs`), is retried like an absent one, until
    /// the connect timeout, whose error then gives the server's reason. A
    /// server that accepts but does not answer the hello within
    /// `config.handshake_timeout` fails at once ([`StoreError::Silent`]).
    /// An empty token fails before connecting.
    pub fn connect<A>(addr: A, config: ClientConfig) -> Result<Self, StoreError>
    where
        A: ToSocketAddrs + fmt::Display,
    {
        check_token(config.token.as_deref())?;
        let name = addr.to_string();
        let (stream, resolved) = open(
            &name,
            || addr.to_socket_addrs().map(Iterator::collect),
            config.token.as_deref(),
            config.connect_timeout,
            config.handshake_timeout,
        )?;
        tracing::debug!(addr = %name, "connected to store");
        Ok(Self {
            addr: name,
            resolved,
            token: config.token,
            connect_timeout: config.connect_timeout,
            handshake_timeout: config.handshake_timeout,
            timeout: TimeoutCell::new(config.timeout),
            max_reply_bytes: DEFAULT_MAX_REPLY_BYTES,
            conn: Mutex::new(Some(Conn {
                stream,
                late_replies: 0,
            })),
        })
    }

    /// The address as given to [`TcpStore::connect`].
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Reads replies of up to `bytes` (default [`DEFAULT_MAX_REPLY_BYTES`]);
    /// a longer one fails the call, and the connection is dropped, before
    /// its body is read.
    pub fn with_max_reply_bytes(mut self, bytes: usize) -> Self {
        self.max_reply_bytes = bytes;
        self
    }

    fn conn(&self) -> MutexGuard<'_, Option<Conn>> {
        // The guarded value is a socket and a count (or none), each
        // updated in one step; a panic elsewhere cannot leave it
        // half-updated.
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn encode(&self, op: &'static str, req: &Request) -> Result<Vec<u8>, StoreError> {
        wire::encode_request(req).map_err(|source| StoreError::Protocol {
            source: Box::new(source),
            addr: self.addr.clone(),
            op,
        })
    }

    /// Sends `req` and reads its response; `wait` is how long the server
    /// may park it (`Some` for the parked requests, `GET`, `WAIT` and
    /// `MULTI_GET`).
    fn call(
        &self,
        op: &'static str,
        req: &Request,
        wait: Option<Duration>,
    ) -> Result<Response, StoreError> {
        let mut body = self.encode(op, req)?;
        let mut guard = self.conn();
        // NOTE [client trusts no server]: one deadline for the whole call,
        // from the moment it has the connection: the reconnect, the
        // replies owed to earlier calls, the request and its reply. Not a
        // timeout per read, so a server trickling its reply a byte at a
        // time cannot hold the caller past it; and a parked request is
        // bounded by its own wait, not by the (often longer) store
        // timeout, also when it has to reconnect first: a rank that asks
        // for one second must get its answer, or its error, in about one.
        let started = Instant::now();
        let limit = wait.unwrap_or_else(|| self.timeout());
        let conn = match &mut *guard {
            Some(conn) => conn,
            slot @ None => {
                let window = self.connect_timeout.min(limit);
                let resolved = self.resolved.clone();
                let (stream, _) = open(
                    &self.addr,
                    || Ok(resolved.clone()),
                    self.token.as_deref(),
                    window,
                    self.handshake_timeout,
                )
                .map_err(|e| StoreError::Broken {
                    addr: self.addr.clone(),
                    source: Box::new(e),
                })?;
                if wait.is_some() {
                    // The server parks the request for what is left.
                    let left = limit.saturating_sub(started.elapsed());
                    body = self.encode(op, &parked_for(req, left))?;
                }
                slot.insert(Conn {
                    stream,
                    late_replies: 0,
                })
            }
        };
        let budget = limit
            .saturating_add(IO_GRACE)
            .saturating_sub(started.elapsed());
        let exchanged = exchange(conn, &body, budget, self.max_reply_bytes);
        let late_replies = conn.late_replies;
        let io_error = |source| StoreError::Io {
            addr: self.addr.clone(),
            op,
            source,
        };
        let result = match exchanged {
            Exchanged::Reply(body) => {
                wire::decode_response(&body).map_err(|source| StoreError::Protocol {
                    source: Box::new(source),
                    addr: self.addr.clone(),
                    op,
                })
            }
            Exchanged::NoReply(_) if wait.is_some() => {
                // NOTE [late replies]: the call's own deadline passed
                // before a slow server answered. The call's own error, as
                // if the server had answered `TimedOut`; the connection is
                // still between frames and stays, unless it owes so much
                // that the server is hung.
                if late_replies > MAX_LATE_REPLIES {
                    *guard = None;
                }
                return Ok(Response::TimedOut);
            }
            Exchanged::NoReply(e) | Exchanged::Failed(e) => Err(io_error(e)),
        };
        match result {
            Ok(Response::Error(message)) => Err(StoreError::Server {
                addr: self.addr.clone(),
                op,
                message,
            }),
            Ok(Response::Refused(message)) => {
                // The server closes the connection after this reply.
                *guard = None;
                Err(StoreError::Server {
                    addr: self.addr.clone(),
                    op,
                    message,
                })
            }
            Ok(resp) => Ok(resp),
            Err(e) => {
                // The stream may be mid-frame: never reuse it.
                *guard = None;
                Err(e)
            }
        }
    }

    fn unexpected(&self, op: &'static str, resp: &Response) -> StoreError {
        StoreError::Server {
            addr: self.addr.clone(),
            op,
            message: format!("unexpected reply {resp:?}"),
        }
    }

    fn parked(
        &self,
        op: &'static str,
        req: Request,
        keys: &[&str],
        timeout: Duration,
    ) -> Result<Response, StoreError> {
        match self.call(op, &req, Some(timeout))? {
            Response::TimedOut => Err(StoreError::Timeout {
                keys: owned_keys(keys),
                waited: timeout,
            }),
            resp => Ok(resp),
        }
    }
}

/// `req` with the server's wait cut to `wait`; other requests unchanged.
fn parked_for(req: &Request, wait: Duration) -> Request {
    let timeout_ms = ms(wait);
    match req {
        Request::Get { key, .. } => Request::Get {
            key: key.clone(),
            timeout_ms,
        },
        Request::Wait { keys, .. } => Request::Wait {
            keys: keys.clone(),
            timeout_ms,
        },
        Request::MultiGet { keys, .. } => Request::MultiGet {
            keys: keys.clone(),
            timeout_ms,
        },
        other => other.clone(),
    }
}

/// A stream whose every read and write is bounded by what is left until
/// one deadline (NOTE [client trusts no server]); past it they fail with
/// `TimedOut`, saying so. Both clients use it, for every call and for
/// the handshake.
pub(crate) struct DeadlineStream<'a> {
    stream: &'a TcpStream,
    deadline: Option<Instant>,
    budget: Duration,
    /// Bytes read so far: a deadline that passes before the first byte of
    /// a reply leaves the connection in step (NOTE [late replies]).
    read_bytes: u64,
}

impl<'a> DeadlineStream<'a> {
    /// `budget` from now; a budget too large for `Instant` has no deadline.
    pub(crate) fn new(stream: &'a TcpStream, budget: Duration) -> Self {
        Self {
            stream,
            deadline: Instant::now().checked_add(budget),
            budget,
            read_bytes: 0,
        }
    }

    /// Bytes read through this stream so far.
    pub(crate) fn read_bytes(&self) -> u64 {
        self.read_bytes
    }

    fn left(&self) -> io::Result<Option<Duration>> {
        let Some(deadline) = self.deadline else {
            return Ok(None);
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(self.late());
        }
        Ok(Some(left))
    }

    fn late(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "timed out: the store did not answer within {} ms",
                self.budget.as_millis()
            ),
        )
    }

    fn check(&self, result: io::Result<usize>) -> io::Result<usize> {
        match result {
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Err(self.late())
            }
            other => other,
        }
    }
}

impl Read for DeadlineStream<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.set_read_timeout(self.left()?)?;
        let result = (&*self.stream).read(buf);
        if let Ok(n) = result {
            self.read_bytes += n as u64;
        }
        self.check(result)
    }
}

impl Write for DeadlineStream<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.stream.set_write_timeout(self.left()?)?;
        let result = (&*self.stream).write(buf);
        self.check(result)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// NOTE [late replies]: a parked call (`get`, `wait`, `multi_get`) waits
/// for the server's answer up to its own timeout plus [`IO_GRACE`]. A
/// server that is merely slow (a debug build serving a thousand clients on
/// two busy cores) can answer later than that. Failing the call with an
/// i/o error and dropping the connection would turn a 200 ms `get` that
/// the server answers `TimedOut` a little later into a hard error and a
/// reconnect (145 of the load test's 1000 clients in one run of eight,
/// "did not answer within 5200 ms"). So when the deadline passes before
/// the first byte of the reply, the call returns the same
/// [`StoreError::Timeout`] as the server's `TimedOut`, and the connection
/// stays: it is between frames, owing one reply, which the next call reads
/// and drops before it sends its own request, all within its own deadline. A late reply that is a
/// refusal (the server closed the connection) fails that next call as the
/// refusal would have failed the first. More than [`MAX_LATE_REPLIES`]
/// owed, and the connection is dropped. A deadline that passes inside a
/// reply still drops the connection with an i/o error: the stream stopped
/// mid-frame. Tested by `tests/hostile_server.rs`
/// `tcp_store_parked_call_on_a_slow_server_is_a_timeout_and_keeps_the_connection`
/// and the load test of `tests/limits.rs`.
enum Exchanged {
    /// The reply's body.
    Reply(Vec<u8>),
    /// The deadline passed (the error says so) before the first byte of
    /// a reply: the connection is still in step.
    NoReply(io::Error),
    /// The connection failed, or stopped inside a frame: never reuse it.
    Failed(io::Error),
}

/// Reads one reply frame of at most `max_reply_bytes`. The length is
/// checked before anything else is read; the buffer grows only as bytes
/// arrive.
fn read_reply(io: &mut DeadlineStream<'_>, max_reply_bytes: usize) -> Exchanged {
    let before = io.read_bytes();
    match wire::read_frame(io, max_reply_bytes) {
        Ok(Some(body)) => Exchanged::Reply(body),
        Ok(None) => Exchanged::Failed(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "server closed the connection",
        )),
        Err(FrameError::Io(e))
            if e.kind() == io::ErrorKind::TimedOut && io.read_bytes() == before =>
        {
            Exchanged::NoReply(e)
        }
        Err(FrameError::Io(e)) => Exchanged::Failed(e),
        Err(FrameError::TooLarge(e)) => Exchanged::Failed(io::Error::other(e)),
    }
}

/// On `conn`, within `budget`: reads and drops the replies owed to
/// earlier calls (NOTE [late replies]), then writes one request frame and
/// reads one reply frame of at most `max_reply_bytes`.
fn exchange(conn: &mut Conn, body: &[u8], budget: Duration, max_reply_bytes: usize) -> Exchanged {
    let mut io = DeadlineStream::new(&conn.stream, budget);
    while conn.late_replies > 0 {
        match read_reply(&mut io, max_reply_bytes) {
            Exchanged::Reply(late) => {
                conn.late_replies -= 1;
                if let Ok(Response::Refused(message)) = wire::decode_response(&late) {
                    return Exchanged::Failed(io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        format!("the store closed the connection: {message}"),
                    ));
                }
            }
            // This call's request is not sent: it owes nothing more.
            other => return other,
        }
    }
    if let Err(e) = wire::write_frame(&mut io, body) {
        return Exchanged::Failed(e);
    }
    let reply = read_reply(&mut io, max_reply_bytes);
    if matches!(reply, Exchanged::NoReply(_)) {
        conn.late_replies += 1;
    }
    reply
}

/// Connects (retrying until `window` has passed) and handshakes.
fn open(
    name: &str,
    resolve: impl Fn() -> io::Result<Vec<SocketAddr>>,
    token: Option<&str>,
    window: Duration,
    handshake_timeout: Duration,
) -> Result<(TcpStream, Vec<SocketAddr>), StoreError> {
    dial(name, resolve, window, "store", |stream, remaining| {
        // At least a second, so a nearly spent window still gets an
        // answer.
        let answer_within = handshake_timeout.min(remaining.max(Duration::from_secs(1)));
        match handshake(name, stream, token, answer_within) {
            Ok(stream) => Attempt::Done(stream),
            Err(Handshake::Refused(e)) => Attempt::Fatal(e),
            Err(Handshake::Busy(reason)) => Attempt::Retry(io::Error::other(reason)),
            Err(Handshake::Io(e)) => Attempt::Retry(e),
        }
    })
}

/// What greeting the server on one connection came to ([`dial`]).
pub(crate) enum Attempt {
    /// Connected and greeted.
    Done(TcpStream),
    /// Not to be retried: the server said no, or nothing in time.
    Fatal(StoreError),
    /// Retried within the window: a busy server, a broken connection.
    Retry(io::Error),
}

/// Connects to `name` (its addresses from `resolve`, asked again on every
/// round) and greets the server with `greet(stream, time left)`, retrying
/// with backoff until `window` has passed, so a rank may start before the
/// store. Both clients dial this way: intranode's (`TcpStore`) and
/// PyTorch's (`TorchStore`); `what` names the store in trace events.
pub(crate) fn dial(
    name: &str,
    resolve: impl Fn() -> io::Result<Vec<SocketAddr>>,
    window: Duration,
    what: &str,
    mut greet: impl FnMut(TcpStream, Duration) -> Attempt,
) -> Result<(TcpStream, Vec<SocketAddr>), StoreError> {
    let start = Instant::now();
    let deadline = start.checked_add(window);
    let left = || match deadline {
        Some(d) => d.saturating_duration_since(Instant::now()),
        None => Duration::MAX,
    };
    let mut backoff = BACKOFF_START;
    let mut last_err = io::Error::new(
        io::ErrorKind::TimedOut,
        "no connect attempt fit the timeout",
    );
    loop {
        match resolve() {
            Ok(addrs) if addrs.is_empty() => {
                last_err = io::Error::new(io::ErrorKind::NotFound, "address resolved to nothing");
            }
            Ok(addrs) => {
                for sa in &addrs {
                    let remaining = left();
                    if remaining.is_zero() {
                        break;
                    }
                    // Cap one attempt so a black-holed address does not eat
                    // the whole window before the next one is tried.
                    match TcpStream::connect_timeout(sa, remaining.min(Duration::from_secs(5))) {
                        Ok(stream) => match greet(stream, remaining) {
                            Attempt::Done(stream) => return Ok((stream, addrs)),
                            Attempt::Fatal(e) => return Err(e),
                            Attempt::Retry(e) => last_err = e,
                        },
                        Err(e) => last_err = e,
                    }
                }
            }
            Err(e) => last_err = e,
        }
        let remaining = left();
        if remaining.is_zero() {
            return Err(StoreError::Connect {
                addr: name.to_owned(),
                waited: start.elapsed(),
                source: last_err,
            });
        }
        tracing::trace!(addr = %name, error = %last_err, "{what} connect failed, retrying");
        thread::sleep(backoff.min(remaining));
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

enum Handshake {
    /// The server said no, or said nothing in time: do not retry.
    Refused(StoreError),
    /// The server is at its connection limit, or out of descriptors:
    /// retry.
    Busy(String),
    /// The connection failed: retry.
    Io(io::Error),
}

fn handshake(
    name: &str,
    stream: TcpStream,
    token: Option<&str>,
    answer_within: Duration,
) -> Result<TcpStream, Handshake> {
    let refused = |reason: String| {
        Handshake::Refused(StoreError::Handshake {
            addr: name.to_owned(),
            reason,
        })
    };
    let hello = Request::Hello {
        version: PROTOCOL_VERSION,
        token: token.map(|t| t.as_bytes().to_vec()),
    };
    let body = wire::encode_request(&hello).map_err(|e| refused(e.to_string()))?;
    stream.set_nodelay(true).map_err(Handshake::Io)?;
    let silent = || {
        Handshake::Refused(StoreError::Silent {
            addr: name.to_owned(),
            waited: answer_within,
        })
    };
    let mut io = DeadlineStream::new(&stream, answer_within);
    match wire::write_frame(&mut io, &body) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::TimedOut => return Err(silent()),
        Err(e) => return Err(Handshake::Io(e)),
    }
    // A hello reply is a few bytes, or a refusal naming a reason.
    let reply = match read_reply(&mut io, 64 << 10) {
        Exchanged::Reply(reply) => reply,
        Exchanged::NoReply(_) => return Err(silent()),
        Exchanged::Failed(e) if e.kind() == io::ErrorKind::TimedOut => return Err(silent()),
        Exchanged::Failed(e) => return Err(Handshake::Io(e)),
    };
    match wire::decode_response(&reply) {
        Ok(Response::Hello { version }) if version == PROTOCOL_VERSION => Ok(stream),
        Ok(Response::Hello { version }) => Err(refused(format!(
            "server speaks protocol version {version}, client speaks {PROTOCOL_VERSION}"
        ))),
        // Retried within the connect timeout: a server at its connection
        // cap, or out of descriptors (NOTE [out of descriptors] in
        // `server.rs`), has room again once other clients leave.
        Ok(Response::Refused(reason))
            if reason.starts_with(TOO_MANY_CONNECTIONS)
                || reason.starts_with(OUT_OF_DESCRIPTORS) =>
        {
            Err(Handshake::Busy(reason))
        }
        Ok(Response::Error(reason) | Response::Refused(reason)) => Err(refused(reason)),
        Ok(other) => Err(refused(format!("unexpected reply {other:?}"))),
        Err(e) => Err(refused(format!("malformed reply: {e}"))),
    }
}

impl Store for TcpStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        let req = Request::Set {
            key: key.to_owned(),
            value: value.to_vec(),
        };
        match self.call("set", &req, None)? {
            Response::Ok => Ok(()),
            other => Err(self.unexpected("set", &other)),
        }
    }

    fn get_with_timeout(&self, key: &str, timeout: Duration) -> Result<Vec<u8>, StoreError> {
        let req = Request::Get {
            key: key.to_owned(),
            timeout_ms: ms(timeout),
        };
        match self.parked("get", req, &[key], timeout)? {
            Response::Bytes(v) => Ok(v),
            other => Err(self.unexpected("get", &other)),
        }
    }

    fn add(&self, key: &str, delta: i64) -> Result<i64, StoreError> {
        let req = Request::Add {
            key: key.to_owned(),
            delta,
        };
        match self.call("add", &req, None)? {
            Response::Int(v) => Ok(v),
            other => Err(self.unexpected("add", &other)),
        }
    }

    fn compare_set(
        &self,
        key: &str,
        expected: &[u8],
        desired: &[u8],
    ) -> Result<Vec<u8>, StoreError> {
        let req = Request::CompareSet {
            key: key.to_owned(),
            expected: expected.to_vec(),
            desired: desired.to_vec(),
        };
        match self.call("compare_set", &req, None)? {
            Response::Bytes(v) => Ok(v),
            other => Err(self.unexpected("compare_set", &other)),
        }
    }

    fn check(&self, keys: &[&str]) -> Result<bool, StoreError> {
        let req = Request::Check {
            keys: owned_keys(keys),
        };
        match self.call("check", &req, None)? {
            Response::Bool(v) => Ok(v),
            other => Err(self.unexpected("check", &other)),
        }
    }

    fn wait(&self, keys: &[&str], timeout: Option<Duration>) -> Result<(), StoreError> {
        let timeout = timeout.unwrap_or_else(|| self.timeout());
        let req = Request::Wait {
            keys: owned_keys(keys),
            timeout_ms: ms(timeout),
        };
        match self.parked("wait", req, keys, timeout)? {
            Response::Ok => Ok(()),
            other => Err(self.unexpected("wait", &other)),
        }
    }

    fn delete_key(&self, key: &str) -> Result<bool, StoreError> {
        let req = Request::DeleteKey {
            key: key.to_owned(),
        };
        match self.call("delete_key", &req, None)? {
            Response::Bool(v) => Ok(v),
            other => Err(self.unexpected("delete_key", &other)),
        }
    }

    fn num_keys(&self) -> Result<i64, StoreError> {
        match self.call("num_keys", &Request::NumKeys, None)? {
            Response::Int(v) => Ok(v),
            other => Err(self.unexpected("num_keys", &other)),
        }
    }

    fn multi_get(&self, keys: &[&str]) -> Result<Vec<Vec<u8>>, StoreError> {
        let timeout = self.timeout();
        let req = Request::MultiGet {
            keys: owned_keys(keys),
            timeout_ms: ms(timeout),
        };
        match self.parked("multi_get", req, keys, timeout)? {
            Response::List(v) if v.len() == keys.len() => Ok(v),
            other => Err(self.unexpected("multi_get", &other)),
        }
    }

    fn multi_set(&self, keys: &[&str], values: &[&[u8]]) -> Result<(), StoreError> {
        if keys.len() != values.len() {
            return Err(StoreError::LengthMismatch {
                keys: keys.len(),
                values: values.len(),
            });
        }
        let req = Request::MultiSet {
            pairs: keys
                .iter()
                .zip(values)
                .map(|(k, v)| ((*k).to_owned(), v.to_vec()))
                .collect(),
        };
        match self.call("multi_set", &req, None)? {
            Response::Ok => Ok(()),
            other => Err(self.unexpected("multi_set", &other)),
        }
    }

    fn append(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        let req = Request::Append {
            key: key.to_owned(),
            value: value.to_vec(),
        };
        match self.call("append", &req, None)? {
            Response::Ok => Ok(()),
            other => Err(self.unexpected("append", &other)),
        }
    }

    fn timeout(&self) -> Duration {
        self.timeout.get()
    }

    fn set_timeout(&self, timeout: Duration) {
        self.timeout.set(timeout);
    }
}
