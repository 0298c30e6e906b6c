//! [`TorchStore`]: a client of PyTorch's `TCPStore`, speaking its wire
//! protocol, so a rank started by torchrun rendezvouses through the store
//! torchrun's agent hosts.
//!
// NOTE [torch store protocol] is the rest of these module docs.
//! What PyTorch's client (`torch/csrc/distributed/c10d/TCPStore.cpp`) sends
//! and its servers (`TCPStoreBackend.cpp`, `TCPStoreLibUvBackend.cpp`, the
//! default since 2.4) answer. There are no frames: each request is a
//! one-byte query type followed by its fields, each reply only its fields.
//! Integers are in the host's byte order (PyTorch copies them raw); every
//! platform it runs on is little-endian, so little-endian here. A string or
//! byte vector is a `u64` length and the bytes. Every key goes out with
//! PyTorch's client prefix `/` before it ([`TORCH_KEY_PREFIX`]), as Python's
//! `TCPStore` sends it, so both see the same keys.
//!
//! | query | byte | request fields | reply |
//! | --- | --- | --- | --- |
//! | VALIDATE | 0 | `u32` magic `0x3C85F7CE` | none (a wrong magic: the server stops reading) |
//! | SET | 1 | key, value | none |
//! | COMPARE_SET | 2 | key, expected, desired | bytes |
//! | GET | 3 | key | bytes (empty when missing: always WAIT first) |
//! | ADD | 4 | key, `i64` delta | `i64` new value |
//! | CHECK | 5 | `u64` count, keys | `u8` 0 ready, 1 not ready |
//! | WAIT | 6 | `u64` count, keys | `u8` 0 (STOP_WAITING) once all exist |
//! | GETNUMKEYS | 7 | - | `i64` |
//! | DELETE_KEY | 8 | key | `i64` number deleted |
//! | APPEND | 9 | key, value | none |
//! | MULTI_GET | 10 | `u64` count, keys | that many byte vectors |
//! | MULTI_SET | 11 | `u64` count, (key, value) pairs | none |
//! | CANCEL_WAIT | 12 | - | `u8` 1 (WAIT_CANCELED), after a pending 0 if it raced |
//! | PING | 13 | `u32` nonce | the same `u32` |
//!
//! The first query on a connection must be VALIDATE. The libuv server
//! closes the connection on an unknown query, a key over 8 KiB
//! (`MAX_STRING_LEN`), a value over 8 MiB (`MAX_PAYLOAD_LEN`) or more than
//! 128 Ki keys in one query (`MAX_KEY_COUNT`): this client refuses those
//! before sending, with an error that says which limit, instead of losing
//! the connection.
//!
//! Like PyTorch's client, [`TorchStore::connect`] sends VALIDATE and then a
//! PING, whose answer proves the peer is a live `TCPStore`: a peer that
//! accepts the connection and never answers fails the connect within
//! [`PING_TIMEOUT`] (or the connect timeout, if shorter), naming the
//! address, instead of holding the rank for the whole store timeout.
//! A blocking `wait` that times out sends CANCEL_WAIT, as PyTorch's client
//! does, so the connection stays usable; if the server does not answer the
//! cancel within the grace either, the call still ends with its own
//! [`StoreError::Timeout`] and the connection, out of step, is dropped
//! (`tests/hostile_server.rs`
//! `torch_store_wait_on_a_server_slow_to_cancel_is_a_timeout`).
//!
// NOTE [client trusts no server] in `client.rs`.
//! Every call has one deadline, the reconnect after an earlier error
//! included: a `get_with_timeout(1 s)` to a store that went away returns in
//! about a second, not after the store timeout (`tests/torch_fake.rs`
//! `a_calls_own_timeout_bounds_its_reconnect_to_a_gone_store`). A value is
//! at most PyTorch's 8 MiB, and a `multi_get`'s whole reply at most
//! [`crate::DEFAULT_MAX_REPLY_BYTES`] (32 MiB, as [`crate::TcpStore`]'s;
//! [`TorchStore::with_max_reply_bytes`] raises it), each refused from its
//! length before it is read (`tests/torch_fake.rs`
//! `multi_get_caps_the_whole_reply`).

// The bytes of the protocol (queries, PyTorch's constants and limits,
// request encoding, reply fields) in `protocol.rs`.
mod protocol;

use std::fmt;
use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::client::IO_GRACE;
use crate::client::deadline::DeadlineStream;
use crate::client::dial::{Attempt, dial};
use crate::client::{ClientConfig, DEFAULT_MAX_REPLY_BYTES};
use crate::error::StoreError;
use crate::store::{Store, TimeoutCell, owned_keys};
use crate::wire::WireError;
use protocol::{
    Request, check_keys, check_value, is_timeout, keys_request, read_bytes, read_i64, read_u8,
    read_u32, read_value, read_value_len,
};
pub use protocol::{
    TORCH_CHECK_NOT_READY, TORCH_CHECK_READY, TORCH_KEY_PREFIX, TORCH_MAX_KEY_BYTES,
    TORCH_MAX_KEYS, TORCH_MAX_VALUE_BYTES, TORCH_STOP_WAITING, TORCH_VALIDATION_MAGIC,
    TORCH_WAIT_CANCELED, TorchQuery,
};

/// How long the connect's PING may take to come back. A live `TCPStore`
/// answers in microseconds; ten seconds covers a host under heavy load
/// and still turns a silent peer into an error long before the 300 s
/// store timeout.
pub const PING_TIMEOUT: Duration = Duration::from_secs(10);

// NOTE [torch store protocol].
/// A [`Store`] backed by PyTorch's `TCPStore` (its protocol: the [module
/// docs](self)).
///
/// One connection behind a mutex, as [`crate::TcpStore`]: calls from
/// several threads are serialized. After an I/O or protocol error the
/// connection is dropped and the next call reconnects (validate and ping
/// again), within that call's own deadline: for at most the smaller of
/// the connect timeout and the call's own timeout. The failed call is
/// never retried by itself.
pub struct TorchStore {
    addr: String,
    resolved: Vec<SocketAddr>,
    connect_timeout: Duration,
    timeout: TimeoutCell,
    max_reply_bytes: usize,
    conn: Mutex<Option<TcpStream>>,
}

impl fmt::Debug for TorchStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TorchStore")
            .field("addr", &self.addr)
            .field("timeout", &self.timeout.get())
            .finish_non_exhaustive()
    }
}

/// What went wrong in one call; turned into a [`StoreError`] with the
/// address and operation. Each drops the connection.
enum Failure {
    Io(io::Error),
    /// The reply did not follow the protocol.
    Reply(String),
    /// The call's own deadline passed with the connection out of step:
    /// this error (a [`StoreError::Timeout`]) for the caller.
    Late(StoreError),
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

/// What the connect's validate-and-ping can end in.
enum Handshake {
    /// The peer answered wrongly, or not at all: do not retry.
    Refused(String),
    /// The connection failed: retry within the window.
    Io(io::Error),
}

impl TorchStore {
    /// Connects to PyTorch's `TCPStore` at `addr`, retrying with backoff
    /// until `config.connect_timeout` so a rank may start before the
    /// store, then validates and pings (as the [module docs](self) say).
    /// `config.token` is not used: PyTorch's store has no token.
    pub fn connect<A>(addr: A, config: ClientConfig) -> Result<Self, StoreError>
    where
        A: ToSocketAddrs + fmt::Display,
    {
        let name = addr.to_string();
        let (stream, resolved) = open(
            &name,
            || addr.to_socket_addrs().map(Iterator::collect),
            config.connect_timeout,
        )?;
        tracing::debug!(addr = %name, "connected to PyTorch's TCPStore");
        Ok(Self {
            addr: name,
            resolved,
            connect_timeout: config.connect_timeout,
            timeout: TimeoutCell::new(config.timeout),
            max_reply_bytes: DEFAULT_MAX_REPLY_BYTES,
            conn: Mutex::new(Some(stream)),
        })
    }

    /// The address as given to [`TorchStore::connect`].
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Reads `multi_get` replies of up to `bytes` in all, values and their
    /// 8-byte lengths (default [`DEFAULT_MAX_REPLY_BYTES`], as
    /// [`crate::TcpStore`]); a longer one fails the call, and the
    /// connection is dropped, before the value that would pass the limit
    /// is read. Each value is within PyTorch's 8 MiB, but without a cap on
    /// the whole, 128 keys of 8 MiB would be 1 GiB buffered.
    pub fn with_max_reply_bytes(mut self, bytes: usize) -> Self {
        self.max_reply_bytes = bytes;
        self
    }

    fn conn(&self) -> MutexGuard<'_, Option<TcpStream>> {
        // The guarded value is just a socket (or none); a panic elsewhere
        // cannot leave it half-updated.
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn limit_error(&self, op: &'static str, source: WireError) -> StoreError {
        StoreError::Protocol {
            addr: self.addr.clone(),
            op,
            source: Box::new(source),
        }
    }

    /// Runs `body` on the connection (reconnecting first if an earlier
    /// error dropped it), giving it what is left of `limit`, the call's
    /// own timeout; any failure drops the connection, since it may stop
    /// mid-reply. NOTE [client trusts no server]: the reconnect is part of
    /// the call's one deadline, so it lasts at most `limit`, not the store
    /// timeout, whatever the call's own.
    fn with_conn<T>(
        &self,
        op: &'static str,
        limit: Duration,
        body: impl FnOnce(&TcpStream, Duration) -> Result<T, Failure>,
    ) -> Result<T, StoreError> {
        let mut guard = self.conn();
        let started = Instant::now();
        let stream = match &mut *guard {
            Some(stream) => stream,
            slot @ None => {
                let window = self.connect_timeout.min(limit);
                let resolved = self.resolved.clone();
                let (stream, _) =
                    open(&self.addr, || Ok(resolved.clone()), window).map_err(|e| {
                        StoreError::Broken {
                            addr: self.addr.clone(),
                            source: Box::new(e),
                        }
                    })?;
                slot.insert(stream)
            }
        };
        let left = limit.saturating_sub(started.elapsed());
        match body(stream, left) {
            Ok(value) => Ok(value),
            Err(failure) => {
                *guard = None;
                Err(match failure {
                    Failure::Io(source) => StoreError::Io {
                        addr: self.addr.clone(),
                        op,
                        source,
                    },
                    Failure::Reply(message) => StoreError::Server {
                        addr: self.addr.clone(),
                        op,
                        message,
                    },
                    Failure::Late(e) => e,
                })
            }
        }
    }

    /// Sends `req` and reads its reply with `read`, all within the store
    /// timeout plus a grace.
    fn call<T>(
        &self,
        op: &'static str,
        req: Request,
        read: impl FnOnce(&mut DeadlineStream<'_>) -> Result<T, Failure>,
    ) -> Result<T, StoreError> {
        self.call_within(op, req, self.timeout(), read)
    }

    /// [`TorchStore::call`] within `limit` plus the grace: one deadline
    /// for the whole call (NOTE [client trusts no server]), so a server
    /// trickling its reply cannot hold the caller past it.
    fn call_within<T>(
        &self,
        op: &'static str,
        req: Request,
        limit: Duration,
        read: impl FnOnce(&mut DeadlineStream<'_>) -> Result<T, Failure>,
    ) -> Result<T, StoreError> {
        self.with_conn(op, limit, |stream, left| {
            let mut io = DeadlineStream::new(stream, left.saturating_add(IO_GRACE));
            io.write_all(&req.0)?;
            read(&mut io)
        })
    }

    /// WAIT for `keys` up to `timeout`; on expiry CANCEL_WAIT, as PyTorch's
    /// client does, so the connection stays in step.
    fn wait_keys(
        &self,
        op: &'static str,
        keys: &[&str],
        timeout: Duration,
    ) -> Result<(), StoreError> {
        check_keys(keys).map_err(|e| self.limit_error(op, e))?;
        let req = keys_request(TorchQuery::Wait, keys);
        // NOTE [late replies] in `client/connection.rs`: past its own deadline a wait
        // ends with its own error, whatever the server still owes.
        let late = || {
            Failure::Late(StoreError::Timeout {
                keys: owned_keys(keys),
                waited: timeout,
            })
        };
        let arrived = self.with_conn(op, timeout, |stream, left| {
            // The request within the grace, the answer within what is left
            // of `timeout`, and a cancel within the grace again: `timeout`
            // plus two graces at most, whatever the server does.
            DeadlineStream::new(stream, IO_GRACE).write_all(&req.0)?;
            let mut io = DeadlineStream::new(stream, left);
            match read_u8(&mut io) {
                Ok(TORCH_STOP_WAITING) => return Ok(true),
                Ok(other) => {
                    return Err(Failure::Reply(format!(
                        "reply {other:#04x} to WAIT, expected STOP_WAITING (0)"
                    )));
                }
                Err(e) if is_timeout(&e) => {}
                Err(e) => return Err(e.into()),
            }
            let mut io = DeadlineStream::new(stream, IO_GRACE);
            io.write_all(&[TorchQuery::CancelWait as u8])?;
            // A server too slow to answer the cancel in the grace leaves
            // the connection out of step (it owes one or two bytes), so it
            // is dropped; the caller gets its timeout, not an i/o error.
            let mut answer = || match read_u8(&mut io) {
                Err(e) if is_timeout(&e) => Err(late()),
                other => Ok(other?),
            };
            match answer()? {
                TORCH_WAIT_CANCELED => Ok(false),
                // The keys arrived just before the cancel: the server
                // answers the wait, then the cancel.
                TORCH_STOP_WAITING => match answer()? {
                    TORCH_WAIT_CANCELED => Ok(true),
                    other => Err(Failure::Reply(format!(
                        "reply {other:#04x} to CANCEL_WAIT, expected WAIT_CANCELED (1)"
                    ))),
                },
                other => Err(Failure::Reply(format!(
                    "reply {other:#04x} to CANCEL_WAIT, expected WAIT_CANCELED (1)"
                ))),
            }
        })?;
        if arrived {
            Ok(())
        } else {
            Err(StoreError::Timeout {
                keys: owned_keys(keys),
                waited: timeout,
            })
        }
    }
}

/// Connects (retrying until `window` has passed), validates and pings.
fn open(
    name: &str,
    resolve: impl Fn() -> io::Result<Vec<SocketAddr>>,
    window: Duration,
) -> Result<(TcpStream, Vec<SocketAddr>), StoreError> {
    dial(
        name,
        resolve,
        window,
        "torch store",
        |stream, remaining| match validate_and_ping(stream, remaining) {
            Ok(stream) => Attempt::Done(stream),
            Err(Handshake::Refused(reason)) => Attempt::Fatal(StoreError::Handshake {
                addr: name.to_owned(),
                reason,
            }),
            Err(Handshake::Io(e)) => Attempt::Retry(e),
        },
    )
}

fn validate_and_ping(stream: TcpStream, window: Duration) -> Result<TcpStream, Handshake> {
    // At least a second, so a nearly spent window still gets an answer.
    let ping_wait = PING_TIMEOUT.min(window).max(Duration::from_secs(1));
    stream.set_nodelay(true).map_err(Handshake::Io)?;
    // One deadline for sending and the whole echo (NOTE [client trusts no
    // server]): a per-read timeout would let an echo trickled a byte at a
    // time pass.
    let mut io = DeadlineStream::new(&stream, ping_wait);
    let nonce = std::process::id();
    let mut hello = Request::new(TorchQuery::Validate)
        .u32(TORCH_VALIDATION_MAGIC)
        .0;
    hello.extend_from_slice(&Request::new(TorchQuery::Ping).u32(nonce).0);
    io.write_all(&hello).map_err(Handshake::Io)?;
    match read_u32(&mut io) {
        Ok(echo) if echo == nonce => Ok(stream),
        Ok(echo) => Err(Handshake::Refused(format!(
            "PING {nonce:#010x} came back as {echo:#010x}: not a PyTorch TCPStore"
        ))),
        Err(e) if is_timeout(&e) => Err(Handshake::Refused(format!(
            "no answer to PING within {} ms: the peer accepts connections but is not a live \
             PyTorch TCPStore (an intranode-run store? then set INTRANODE_STORE_PROTOCOL=intranode)",
            ping_wait.as_millis()
        ))),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Err(Handshake::Refused(
            "the peer closed the connection after VALIDATE and PING: not a PyTorch TCPStore \
             of version 2.3 or later"
                .to_owned(),
        )),
        Err(e) => Err(Handshake::Io(e)),
    }
}

impl Store for TorchStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        check_keys(&[key])
            .and_then(|()| check_value(value))
            .map_err(|e| self.limit_error("set", e))?;
        let req = Request::new(TorchQuery::Set).key(key).bytes(value);
        self.call("set", req, |_| Ok(()))
    }

    fn get_with_timeout(&self, key: &str, timeout: Duration) -> Result<Vec<u8>, StoreError> {
        let started = Instant::now();
        self.wait_keys("get", &[key], timeout)?;
        // The key exists: its value is due at once, within what is left of
        // the call's deadline.
        let req = Request::new(TorchQuery::Get).key(key);
        let left = timeout.saturating_sub(started.elapsed());
        self.call_within("get", req, left, |s| Ok(read_bytes(s)?))
    }

    fn add(&self, key: &str, delta: i64) -> Result<i64, StoreError> {
        check_keys(&[key]).map_err(|e| self.limit_error("add", e))?;
        let req = Request::new(TorchQuery::Add).key(key).i64(delta);
        self.call("add", req, |s| Ok(read_i64(s)?))
    }

    fn compare_set(
        &self,
        key: &str,
        expected: &[u8],
        desired: &[u8],
    ) -> Result<Vec<u8>, StoreError> {
        check_keys(&[key])
            .and_then(|()| check_value(expected))
            .and_then(|()| check_value(desired))
            .map_err(|e| self.limit_error("compare_set", e))?;
        let req = Request::new(TorchQuery::CompareSet)
            .key(key)
            .bytes(expected)
            .bytes(desired);
        self.call("compare_set", req, |s| Ok(read_bytes(s)?))
    }

    fn check(&self, keys: &[&str]) -> Result<bool, StoreError> {
        check_keys(keys).map_err(|e| self.limit_error("check", e))?;
        self.call(
            "check",
            keys_request(TorchQuery::Check, keys),
            |s| match read_u8(s)? {
                TORCH_CHECK_READY => Ok(true),
                TORCH_CHECK_NOT_READY => Ok(false),
                other => Err(Failure::Reply(format!(
                    "reply {other:#04x} to CHECK, expected READY (0) or NOT_READY (1)"
                ))),
            },
        )
    }

    fn wait(&self, keys: &[&str], timeout: Option<Duration>) -> Result<(), StoreError> {
        self.wait_keys("wait", keys, timeout.unwrap_or_else(|| self.timeout()))
    }

    fn delete_key(&self, key: &str) -> Result<bool, StoreError> {
        check_keys(&[key]).map_err(|e| self.limit_error("delete_key", e))?;
        let req = Request::new(TorchQuery::DeleteKey).key(key);
        self.call("delete_key", req, |s| match read_i64(s)? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(Failure::Reply(format!(
                "DELETE_KEY deleted {other} keys, expected 0 or 1"
            ))),
        })
    }

    fn num_keys(&self) -> Result<i64, StoreError> {
        self.call("num_keys", Request::new(TorchQuery::GetNumKeys), |s| {
            Ok(read_i64(s)?)
        })
    }

    fn multi_get(&self, keys: &[&str]) -> Result<Vec<Vec<u8>>, StoreError> {
        let started = Instant::now();
        let timeout = self.timeout();
        self.wait_keys("multi_get", keys, timeout)?;
        let left = timeout.saturating_sub(started.elapsed());
        let req = keys_request(TorchQuery::MultiGet, keys);
        let max = self.max_reply_bytes as u64;
        self.call_within("multi_get", req, left, |s| {
            let mut values = Vec::with_capacity(keys.len());
            // NOTE [client trusts no server]: the whole reply is capped as
            // TcpStore's is, each value refused from its length.
            let mut reply_bytes = 0u64;
            for _ in keys {
                let len = read_value_len(s)?;
                reply_bytes = reply_bytes.saturating_add(8 + len);
                if reply_bytes > max {
                    return Err(Failure::Io(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "the store's MULTI_GET reply for {} keys exceeds the client's limit \
                             of {max} bytes ({} values read, the next announces {len} bytes): \
                             not read; raise the limit with TorchStore::with_max_reply_bytes",
                            keys.len(),
                            values.len()
                        ),
                    )));
                }
                values.push(read_value(s, len)?);
            }
            Ok(values)
        })
    }

    fn multi_set(&self, keys: &[&str], values: &[&[u8]]) -> Result<(), StoreError> {
        if keys.len() != values.len() {
            return Err(StoreError::LengthMismatch {
                keys: keys.len(),
                values: values.len(),
            });
        }
        check_keys(keys)
            .and_then(|()| values.iter().try_for_each(|v| check_value(v)))
            .map_err(|e| self.limit_error("multi_set", e))?;
        let mut req = Request::new(TorchQuery::MultiSet).u64(keys.len() as u64);
        for (key, value) in keys.iter().zip(values) {
            req = req.key(key).bytes(value);
        }
        self.call("multi_set", req, |_| Ok(()))
    }

    fn append(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        check_keys(&[key])
            .and_then(|()| check_value(value))
            .map_err(|e| self.limit_error("append", e))?;
        let req = Request::new(TorchQuery::Append).key(key).bytes(value);
        self.call("append", req, |_| Ok(()))
    }

    fn timeout(&self) -> Duration {
        self.timeout.get()
    }

    fn set_timeout(&self, timeout: Duration) {
        self.timeout.set(timeout);
    }
}

#[cfg(test)]
mod tests;
