//! Reading a client's frames: the hello within the login deadline, then
//! each request within `frame_timeout` of its first byte, its share of the
//! buffer budget reserved before its body is read (NOTE [memory budget] in
//! `limits.rs`).

use std::io::{self, Read};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::budget::Reservation;
use super::shared::Shared;
use crate::wire::{self, Request, WireError};

/// `now + timeout`, or `now` if that overflows `Instant` (limits are
/// validated to at most a day, so it does not).
pub(super) fn deadline_in(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout).unwrap_or(now)
}

/// Why a connection ends.
pub(super) enum Disconnect {
    /// Peer closed or the socket failed: nothing to answer.
    Gone(io::Error),
    /// Peer sent something we refuse: answer with this and close.
    Refuse(String),
    /// Peer hung up while its request was parked (NOTE [hung-up
    /// waiters]): answered like a refusal, but the usual end of a rank
    /// killed while it waited, so not worth a warning.
    HungUp(String),
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
pub(super) fn read_hello(
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
pub(super) enum Incoming<'a> {
    /// A request, with the budget its body and decoded form reserved.
    Request(Request, Reservation<'a>),
    /// A well-formed request over a limit: answer with an error, go on.
    OverLimit(String),
}

/// Reads one request after login: waits for its first byte as long as it
/// takes (clients idle between rendezvous steps), then gives the rest of
/// the frame `frame_timeout`, after reserving its share of the budget.
pub(super) fn read_request<'a>(
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
