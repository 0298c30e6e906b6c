//! One client's thread: the login, then each request read, run against the
//! table (parked while its keys are missing) and answered, until the client
//! leaves or is refused.

use std::io::{self, BufWriter, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use super::read::{Disconnect, Incoming, deadline_in, read_hello, read_request};
use super::refusal_log::refusal_kind;
use super::shared::Shared;
use crate::error::StoreError;
use crate::hash::{Value, WaitFailure};
use crate::limits::ServerLimits;
use crate::wire::{self, PROTOCOL_VERSION, Request, Response};

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

/// Replies up to this size are built in one buffer and sent in one write;
/// larger ones are written piece by piece straight from the stored values.
const SMALL_REPLY_BYTES: usize = 64 * 1024;

/// `poll(2)` over `fds`, waiting at most `timeout_ms` (-1: no limit).
pub(super) fn poll_fds(fds: &mut [libc::pollfd], timeout_ms: libc::c_int) -> io::Result<()> {
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

/// Compares tokens in time independent of where they first differ (the
/// length still shows), so a client cannot guess a token byte by byte.
pub(super) fn token_matches(expected: &[u8], got: &[u8]) -> bool {
    subtle::ConstantTimeEq::ct_eq(expected, got).into()
}

pub(super) fn serve_client(
    shared: &Shared,
    stream: &TcpStream,
    peer: SocketAddr,
    accepted_at: Instant,
) {
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
pub(super) fn refuse(stream: &TcpStream, message: String) {
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
