//! [`TcpStore`]: the client side of the TCP store.

// Each call's connection, handshake and exchange in `connection.rs`;
// connecting with retries in `dial.rs` and the one deadline per call in
// `deadline.rs`, both also used by `TorchStore`.
mod connection;
pub(crate) mod deadline;
pub(crate) mod dial;

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::error::StoreError;
use crate::server::{check_token, token_from_env};
use crate::store::{DEFAULT_TIMEOUT, Store, TimeoutCell, owned_keys};
use crate::vars::{HANDSHAKE_TIMEOUT_ENV, STORE_TIMEOUT_ENV, TOKEN_ENV};
use crate::wire::{self, Request, Response};
use connection::{Conn, Exchanged, exchange, open};

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

// NOTE [client trusts no server] is the doc comment below.
/// Largest reply [`TcpStore`] reads by default: the largest a server with
/// the default limits sends (`max_response_bytes`). A client that checked
/// a reply's length only against `u32::MAX` would buffer whatever a server
/// (or anything listening on the port) announced and sent: 1.5 GiB
/// measured for a 4 GiB reply. Raise it with
/// [`TcpStore::with_max_reply_bytes`] for a server with larger limits.
/// [`crate::TorchStore`] caps a `multi_get`'s whole reply with it too
/// ([`crate::TorchStore::with_max_reply_bytes`]).
pub const DEFAULT_MAX_REPLY_BYTES: usize = 32 << 20;

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
    /// The defaults, with the token read from [`TOKEN_ENV`] and the
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
            TOKEN_ENV => None,
            _ => std::env::var(name).ok(),
        })?;
        Ok(Self { token, ..config })
    }

    /// [`ClientConfig::try_from_env`] with variables looked up by `var`.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self, StoreError> {
        let token = var(TOKEN_ENV);
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
/// the connection.
// NOTE [late replies].
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
    /// once; it would not get better by retrying. A server at its connection
    /// limit, or out of file descriptors, is retried like an absent one, until
    /// the connect timeout, whose error then gives the server's reason. A
    /// server that accepts but does not answer the hello within
    /// `config.handshake_timeout` fails at once ([`StoreError::Silent`]). An
    /// empty token fails before connecting.
    // NOTE [out of descriptors] in `server/accept.rs`.
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
