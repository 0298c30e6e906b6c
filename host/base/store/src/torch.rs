// (Over 700 lines, 834: PyTorch's protocol has no frames, so every query's
// encoding and reply parsing, the handshake and the per-call deadline
// live in one reader; a tenth is unit tests. NOTE [torch store protocol]
// below is the map.)

//! [`TorchStore`]: a client of PyTorch's `TCPStore`, speaking its wire
//! protocol, so a rank started by torchrun rendezvouses through the store
//! torchrun's agent hosts.
//!
//! NOTE [torch store protocol]: what PyTorch's client
//! (`torch/csrc/distributed/c10d/TCPStore.cpp`) sends and its servers
//! (`TCPStoreBackend.cpp`, `TCPStoreLibUvBackend.cpp`, the default since
//! 2.4) answer. There are no frames: each request is a one-byte query type
//! followed by its fields, each reply only its fields. Integers are in the
//! host's byte order (PyTorch copies them raw); every platform it runs on
//! is little-endian, so little-endian here. A string or byte vector is a
//! `u64` length and the bytes. Every key goes out with PyTorch's client
//! prefix `/` before it ([`TORCH_KEY_PREFIX`]), as Python's `TCPStore`
//! sends it, so both see the same keys.
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
//! Every call has one deadline (NOTE [client trusts no server] in
//! `client.rs`), the reconnect after an earlier error included: a
//! `get_with_timeout(1 s)` to a store that went away returns in about a
//! second, not after the store timeout (`tests/torch_fake.rs`
//! `a_calls_own_timeout_bounds_its_reconnect_to_a_gone_store`). A value is
//! at most PyTorch's 8 MiB, and a `multi_get`'s whole reply at most
//! [`crate::DEFAULT_MAX_REPLY_BYTES`] (32 MiB, as [`crate::TcpStore`]'s;
//! [`TorchStore::with_max_reply_bytes`] raises it), each refused from its
//! length before it is read (`tests/torch_fake.rs`
//! `multi_get_caps_the_whole_reply`).

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::client::{Attempt, DeadlineStream, IO_GRACE, dial};
use crate::store::{Store, TimeoutCell, owned_keys};
use crate::{ClientConfig, DEFAULT_MAX_REPLY_BYTES, StoreError, WireError};

/// The query types of NOTE [torch store protocol].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
#[allow(missing_docs)]
pub enum TorchQuery {
    Validate = 0,
    Set = 1,
    CompareSet = 2,
    Get = 3,
    Add = 4,
    Check = 5,
    Wait = 6,
    GetNumKeys = 7,
    DeleteKey = 8,
    Append = 9,
    MultiGet = 10,
    MultiSet = 11,
    CancelWait = 12,
    Ping = 13,
}

impl TorchQuery {
    /// The query for a byte, `None` for any other byte.
    pub fn from_byte(byte: u8) -> Option<Self> {
        use TorchQuery::*;
        [
            Validate, Set, CompareSet, Get, Add, Check, Wait, GetNumKeys, DeleteKey, Append,
            MultiGet, MultiSet, CancelWait, Ping,
        ]
        .get(usize::from(byte))
        .copied()
    }
}

/// VALIDATE's magic number (`validationMagicNumber` in PyTorch's
/// `TCPStoreBackend.hpp`).
pub const TORCH_VALIDATION_MAGIC: u32 = 0x3C85_F7CE;
/// CHECK's reply when every key exists (`CheckResponseType::READY`).
pub const TORCH_CHECK_READY: u8 = 0;
/// CHECK's reply when some key is missing (`CheckResponseType::NOT_READY`).
pub const TORCH_CHECK_NOT_READY: u8 = 1;
/// WAIT's reply once every key exists (`WaitResponseType::STOP_WAITING`).
pub const TORCH_STOP_WAITING: u8 = 0;
/// CANCEL_WAIT's reply (`WaitResponseType::WAIT_CANCELED`).
pub const TORCH_WAIT_CANCELED: u8 = 1;
/// Longest key the libuv server reads (`MAX_STRING_LEN`).
pub const TORCH_MAX_KEY_BYTES: usize = 8 * 1024;
/// Longest value the libuv server reads (`MAX_PAYLOAD_LEN`).
pub const TORCH_MAX_VALUE_BYTES: usize = 8 * 1024 * 1024;
/// Most keys in one query the libuv server reads (`MAX_KEY_COUNT`).
pub const TORCH_MAX_KEYS: usize = 128 * 1024;

/// How long the connect's PING may take to come back. A live `TCPStore`
/// answers in microseconds; ten seconds covers a host under heavy load
/// and still turns a silent peer into an error long before the 300 s
/// store timeout.
pub const PING_TIMEOUT: Duration = Duration::from_secs(10);

/// A [`Store`] backed by PyTorch's `TCPStore` (NOTE [torch store protocol]).
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

/// A request being written: the query byte, then its fields.
struct Request(Vec<u8>);

impl Request {
    fn new(query: TorchQuery) -> Self {
        Self(vec![query as u8])
    }

    fn u32(mut self, value: u32) -> Self {
        self.0.extend_from_slice(&value.to_le_bytes());
        self
    }

    fn u64(mut self, value: u64) -> Self {
        self.0.extend_from_slice(&value.to_le_bytes());
        self
    }

    fn i64(mut self, value: i64) -> Self {
        self.0.extend_from_slice(&value.to_le_bytes());
        self
    }

    fn bytes(self, bytes: &[u8]) -> Self {
        let mut req = self.u64(bytes.len() as u64);
        req.0.extend_from_slice(bytes);
        req
    }

    /// A key as PyTorch's client sends it: [`TORCH_KEY_PREFIX`] first
    /// (`TCPStore::keyPrefix_`), so a key this client sets is the key a
    /// Python rank's `store.get` asks for, and the other way round.
    fn key(self, key: &str) -> Self {
        let mut req = self.u64((TORCH_KEY_PREFIX.len() + key.len()) as u64);
        req.0.extend_from_slice(TORCH_KEY_PREFIX.as_bytes());
        req.0.extend_from_slice(key.as_bytes());
        req
    }
}

/// What PyTorch's `TCPStore` client puts before every key on the wire
/// (`keyPrefix_`). Without it a Rust rank and a Python rank that name the
/// same key never meet: seen on 2 H200 with PyTorch 2.11 (2026-11-26), a
/// wait on `py/hello` for the `/py/hello` that Python had set never ended.
pub const TORCH_KEY_PREFIX: &str = "/";

fn over_limit(what: &'static str, got: usize, max: usize, limit: &'static str) -> WireError {
    WireError::OverLimit {
        what,
        got: got as u64,
        max: max as u64,
        limit,
    }
}

/// Refuses what PyTorch's libuv server would close the connection over.
fn check_keys(keys: &[&str]) -> Result<(), WireError> {
    if keys.len() > TORCH_MAX_KEYS {
        return Err(over_limit(
            "list items",
            keys.len(),
            TORCH_MAX_KEYS,
            "PyTorch's MAX_KEY_COUNT",
        ));
    }
    for key in keys {
        if TORCH_KEY_PREFIX.len() + key.len() > TORCH_MAX_KEY_BYTES {
            return Err(over_limit(
                "key bytes",
                TORCH_KEY_PREFIX.len() + key.len(),
                TORCH_MAX_KEY_BYTES,
                "PyTorch's MAX_STRING_LEN",
            ));
        }
    }
    Ok(())
}

fn check_value(value: &[u8]) -> Result<(), WireError> {
    if value.len() > TORCH_MAX_VALUE_BYTES {
        return Err(over_limit(
            "value bytes",
            value.len(),
            TORCH_MAX_VALUE_BYTES,
            "PyTorch's MAX_PAYLOAD_LEN",
        ));
    }
    Ok(())
}

/// Reads one byte vector (`u64` length, bytes). NOTE [client trusts no
/// server]: a length over PyTorch's own [`TORCH_MAX_VALUE_BYTES`] is
/// refused before any of it is read (a server that declared 1 GiB, or
/// sent without end, was buffered up to 2 GiB before); below it the buffer
/// grows only as bytes arrive.
fn read_bytes(stream: &mut impl Read) -> io::Result<Vec<u8>> {
    let len = read_value_len(stream)?;
    read_value(stream, len)
}

/// The length of a byte vector, refused over [`TORCH_MAX_VALUE_BYTES`].
fn read_value_len(stream: &mut impl Read) -> io::Result<u64> {
    let len = read_u64(stream)?;
    if len > TORCH_MAX_VALUE_BYTES as u64 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "the store announced a value of {len} bytes, over PyTorch's MAX_PAYLOAD_LEN \
                 ({TORCH_MAX_VALUE_BYTES} bytes): not read"
            ),
        ));
    }
    Ok(len)
}

/// The `len` bytes of a byte vector whose length was read.
fn read_value(stream: &mut impl Read, len: u64) -> io::Result<Vec<u8>> {
    let mut value = Vec::new();
    stream.take(len).read_to_end(&mut value)?;
    if (value.len() as u64) < len {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "the store closed the connection {} bytes into a {len}-byte value",
                value.len()
            ),
        ));
    }
    Ok(value)
}

/// `read_exact`, saying "closed" where std says "failed to fill whole
/// buffer".
fn read_array<const N: usize>(stream: &mut impl Read) -> io::Result<[u8; N]> {
    let mut buf = [0; N];
    stream.read_exact(&mut buf).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the store closed the connection before its reply was complete",
            )
        } else {
            e
        }
    })?;
    Ok(buf)
}

fn read_u8(stream: &mut impl Read) -> io::Result<u8> {
    Ok(read_array::<1>(stream)?[0])
}

fn read_u32(stream: &mut impl Read) -> io::Result<u32> {
    Ok(u32::from_le_bytes(read_array(stream)?))
}

fn read_u64(stream: &mut impl Read) -> io::Result<u64> {
    Ok(u64::from_le_bytes(read_array(stream)?))
}

fn read_i64(stream: &mut impl Read) -> io::Result<i64> {
    Ok(i64::from_le_bytes(read_array(stream)?))
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
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
    /// store, then validates and pings (NOTE [torch store protocol]).
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
        // NOTE [late replies] in `client.rs`: past its own deadline a wait
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
    // server]): an echo trickled a byte at a time used to pass.
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

fn keys_request(query: TorchQuery, keys: &[&str]) -> Request {
    let mut req = Request::new(query).u64(keys.len() as u64);
    for key in keys {
        req = req.key(key);
    }
    req
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
mod tests {
    use super::*;

    #[test]
    fn query_bytes_are_pytorchs() {
        // The order of `QueryType` in PyTorch's TCPStoreBackend.hpp.
        for (byte, query) in [
            (0, TorchQuery::Validate),
            (1, TorchQuery::Set),
            (6, TorchQuery::Wait),
            (11, TorchQuery::MultiSet),
            (12, TorchQuery::CancelWait),
            (13, TorchQuery::Ping),
        ] {
            assert_eq!(query as u8, byte);
            assert_eq!(TorchQuery::from_byte(byte), Some(query));
        }
        assert_eq!(TorchQuery::from_byte(14), None);
    }

    #[test]
    fn requests_encode_little_endian_with_u64_lengths() {
        let req = Request::new(TorchQuery::Add).key("k").i64(-2);
        let mut want = vec![4u8];
        want.extend_from_slice(&2u64.to_le_bytes());
        want.extend_from_slice(b"/k");
        want.extend_from_slice(&(-2i64).to_le_bytes());
        assert_eq!(req.0, want);
        let req = keys_request(TorchQuery::Check, &["a", "bc"]);
        assert_eq!(req.0[0], 5);
        assert_eq!(req.0[1..9], 2u64.to_le_bytes());
        // Each key with PyTorch's "/" before it.
        assert_eq!(req.0.len(), 1 + 8 + 8 + 2 + 8 + 3);
    }

    #[test]
    fn garbage_lengths_fail_without_allocating() {
        let mut reply = Vec::new();
        reply.extend_from_slice(&u64::MAX.to_le_bytes());
        reply.extend_from_slice(b"abc");
        let err = read_bytes(&mut reply.as_slice()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("MAX_PAYLOAD_LEN"), "{err}");
        let mut reply = Vec::new();
        reply.extend_from_slice(&(TORCH_MAX_VALUE_BYTES as u64).to_le_bytes());
        reply.extend_from_slice(b"abc");
        let err = read_bytes(&mut reply.as_slice()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        assert!(err.to_string().contains("3 bytes into"), "{err}");
    }

    #[test]
    fn limits_are_checked_before_sending() {
        // The limit counts the "/" PyTorch's client puts before a key.
        let long = "k".repeat(TORCH_MAX_KEY_BYTES);
        let err = check_keys(&[&long]).unwrap_err();
        assert!(err.to_string().contains("MAX_STRING_LEN"), "{err}");
        check_keys(&[&long[1..]]).unwrap();
        let big = vec![0u8; TORCH_MAX_VALUE_BYTES + 1];
        let err = check_value(&big).unwrap_err();
        assert!(err.to_string().contains("MAX_PAYLOAD_LEN"), "{err}");
        check_value(&big[1..]).unwrap();
    }
}
