//! A [`TcpStore`](super::TcpStore)'s connection: opening it (dial, then the
//! handshake) and one exchange of request and reply on it, the replies owed
//! to earlier calls first (NOTE [late replies]).

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use super::deadline::DeadlineStream;
use super::dial::{Attempt, dial};
use crate::error::StoreError;
use crate::server::refusal_log::{OUT_OF_DESCRIPTORS, TOO_MANY_CONNECTIONS};
use crate::wire::{self, FrameError, PROTOCOL_VERSION, Request, Response};

/// A logged-in connection of a [`TcpStore`](super::TcpStore).
pub(super) struct Conn {
    pub(super) stream: TcpStream,
    /// Replies the server still owes to parked calls that ended before it
    /// answered (NOTE [late replies]).
    pub(super) late_replies: u32,
}

/// NOTE [late replies]: a parked call (`get`, `wait`, `multi_get`) waits
/// for the server's answer up to its own timeout plus
/// [`IO_GRACE`](super::IO_GRACE). A server that is merely slow (a debug
/// build serving a thousand clients on two busy cores) can answer later
/// than that. Failing the call with an i/o error and dropping the
/// connection would turn a 200 ms `get` that the server answers `TimedOut`
/// a little later into a hard error and a reconnect (145 of the load
/// test's 1000 clients in one run of eight, "did not answer within
/// 5200 ms"). So when the deadline passes before the first byte of the
/// reply, the call returns the same [`StoreError::Timeout`] as the
/// server's `TimedOut`, and the connection stays: it is between frames,
/// owing one reply, which the next call reads and drops before it sends
/// its own request, all within its own deadline. A late reply that is a
/// refusal (the server closed the connection) fails that next call as the
/// refusal would have failed the first. More than
/// [`MAX_LATE_REPLIES`](super::MAX_LATE_REPLIES) owed, and the connection
/// is dropped. A deadline that passes inside a reply still drops the
/// connection with an i/o error: the stream stopped mid-frame. Tested by
/// `tests/hostile_server.rs`
/// `tcp_store_parked_call_on_a_slow_server_is_a_timeout_and_keeps_the_connection`
/// and the load test of `tests/limits.rs`.
pub(super) enum Exchanged {
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
pub(super) fn exchange(
    conn: &mut Conn,
    body: &[u8],
    budget: Duration,
    max_reply_bytes: usize,
) -> Exchanged {
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
pub(super) fn open(
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
        // `server/accept.rs`), has room again once other clients leave.
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
