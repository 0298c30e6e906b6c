//! [`ServerLimits`]: every bound the store server enforces, in one place.
//!
//! NOTE [memory budget]: whatever its clients do, the server's memory stays
//! within
//!
//! ```text
//! fixed (code, acceptor, allocator; a few MiB)
//!   + max_connections x per-connection cost (a thread whose stack is at
//!     most CLIENT_STACK_BYTES, of which a few KiB are touched, and a hello
//!     buffer of at most max_hello_bytes)
//!   + max_buffered_bytes (every request body being read or decoded, every
//!     reply being written, every parked request, all connections together)
//!   + the stored data (max_stored_bytes as counted: the allocations of
//!     keys and values and ENTRY_OVERHEAD_BYTES per key, NOTE [entry cost])
//! ```
//!
//! which with the defaults is about 64 MiB plus the stored data
//! (`tests/limits.rs` measures it: the largest RSS seen under each attack
//! and under the load test, `VmHWM` of the server's process).
//!
//! How each term is held:
//!
//! - before login only a `Hello` of at most `max_hello_bytes` is read, into
//!   a buffer of that size, and the whole `Hello` must arrive within
//!   `login_timeout` of the accept (a deadline, not a per-read timeout, so
//!   a client trickling bytes is dropped all the same);
//! - at most `max_connections` connections are served; the next one gets a
//!   `Refused` naming the limit and is closed;
//! - after login a frame's length is checked against `max_frame_bytes`
//!   before anything is allocated, then twice that (the body and its
//!   decoded form) is reserved from the shared `max_buffered_bytes`
//!   budget, waiting for it if need be, before the body is read; the rest
//!   of the frame must arrive within `frame_timeout` of its first byte;
//! - a list request (`CHECK`, `WAIT`, `MULTI_GET`, `MULTI_SET`) also
//!   reserves what its items decode to beyond their bytes, from its count
//!   and before decoding (NOTE [decoded items]);
//! - the decoder refuses keys over `max_key_bytes`, values over
//!   `max_value_bytes` and lists over `max_keys_per_request` items before
//!   allocating them, so a small frame cannot decode into a large request;
//! - a reply is sized before it is built: over `max_response_bytes` it is
//!   an error instead; otherwise its size is reserved from the same budget
//!   until it is written, and the client has `frame_timeout` to take it;
//! - values are shared (`Arc`) between the table and the replies that
//!   carry them, so a `MULTI_GET` naming one key many times costs one copy;
//! - `SET`, `APPEND`, `MULTI_SET`, `COMPARE_SET` and `ADD` fail with an
//!   error, storing nothing, when the result would pass `max_value_bytes`
//!   or the table would pass `max_stored_bytes`.

use std::time::Duration;

use crate::error::StoreError;

/// Bytes each key costs in [`ServerLimits::max_stored_bytes`] beyond the
/// allocations of its key and value (as glibc's malloc sizes them): its share of the
/// hash table and the `Arc` that holds the value.
///
// NOTE [entry cost] is the paragraph below.
/// A table slot is a `(String, Arc<Vec<u8>>)` and one control byte, 33
/// bytes. The table holds at most 7 keys per 8 slots and doubles when full;
/// while it grows, the old table and the new one (three times the old slots)
/// exist together, so at the peak each key stands for 3 x 8/7 slots, 114
/// bytes. The `Arc`'s block (two counts and the `Vec`, 40 bytes) takes a
/// 48-byte chunk of glibc's malloc. Counting 128 bytes per key on top of the
/// bare key and value lengths instead would let 7.9 M tiny keys reach
/// 1,356 MiB of RSS under a 1 GiB limit; `tests/limits.rs`
/// (`tiny_keys_stay_within_max_stored_bytes`) fills the store with tiny
/// keys and checks the peak RSS against the limit.
pub const ENTRY_OVERHEAD_BYTES: usize = TABLE_BYTES_PER_KEY + alloc_bytes(ARC_VEC_BYTES);

/// One slot of the table: the key, the value's `Arc`, a control byte.
const TABLE_SLOT_BYTES: usize = std::mem::size_of::<(String, std::sync::Arc<Vec<u8>>)>() + 1;

/// Peak table bytes per key (NOTE [entry cost]): 3 x 8/7 slots.
const TABLE_BYTES_PER_KEY: usize = (3 * 8 * TABLE_SLOT_BYTES).div_ceil(7);

/// The block an `Arc<Vec<u8>>` allocates: two counts and the `Vec`.
const ARC_VEC_BYTES: usize = 2 * std::mem::size_of::<usize>() + std::mem::size_of::<Vec<u8>>();

/// What a heap block of `bytes` costs, as glibc's malloc lays it out: an
/// 8-byte header, 16-byte granules, 32 bytes at least; blocks from 256 KiB
/// up (`malloc.rs` fixes that threshold) are mapped on their own, in
/// pages. Nothing for an empty `Vec` or `String`, which allocates nothing.
pub(crate) const fn alloc_bytes(bytes: usize) -> usize {
    const HEADER: usize = 8;
    const GRANULE: usize = 16;
    const MIN_CHUNK: usize = 32;
    const PAGE: usize = 4096;
    if bytes == 0 {
        0
    } else if bytes >= crate::malloc::MMAP_THRESHOLD_BYTES {
        (bytes.saturating_add(2 * HEADER))
            .div_ceil(PAGE)
            .saturating_mul(PAGE)
    } else {
        let chunk = (bytes + HEADER).div_ceil(GRANULE) * GRANULE;
        if chunk < MIN_CHUNK { MIN_CHUNK } else { chunk }
    }
}

/// Stack of each client thread. The server never recurses; 256 KiB is
/// ample, and only the pages a thread touches cost memory.
pub(crate) const CLIENT_STACK_BYTES: usize = 256 * 1024;

/// The longest timeout a limit may be set to; longer ones are refused by
/// [`ServerLimits::validate`] so that deadlines never overflow `Instant`.
const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

// NOTE [memory budget].
/// Every bound a [`crate::TcpStoreServer`] enforces: together they bound
/// the server's memory, whatever its clients send.
///
/// Set them through [`crate::ServerConfig::limits`]; the defaults fit a
/// rendezvous store for the ranks of one node with room to spare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerLimits {
    /// Most connections served at once (256). One more gets a `Refused`
    /// reply ("too many connections") and is closed. Each connection costs
    /// one file descriptor and one thread; the default stays well under the
    /// usual limit of 1024 descriptors.
    pub max_connections: usize,
    /// Time from accepting a connection until its whole `Hello` must have
    /// arrived (10 s); a deadline, not a per-read timeout.
    pub login_timeout: Duration,
    /// Largest frame body accepted before login (4 KiB): only `Hello` is
    /// legal there, and a `Hello` is a few bytes plus the token.
    pub max_hello_bytes: usize,
    /// Largest request body accepted after login (16 MiB + 64 KiB: one
    /// value of `max_value_bytes` with its key and framing). Bigger frames
    /// get a `Refused` and the connection is closed.
    pub max_frame_bytes: usize,
    /// Time the rest of a frame may take once its first byte has arrived,
    /// and time a client has to take a reply (30 s); deadlines, not
    /// per-read timeouts.
    pub frame_timeout: Duration,
    /// Largest key (4 KiB).
    pub max_key_bytes: usize,
    /// Largest value (16 MiB), including one grown by `APPEND`.
    pub max_value_bytes: usize,
    /// Most keys in one `CHECK`, `WAIT` or `MULTI_GET`, and most pairs in
    /// one `MULTI_SET` (4096).
    pub max_keys_per_request: usize,
    /// Largest reply (32 MiB); a `GET`/`MULTI_GET` whose values would not
    /// fit gets an error instead.
    pub max_response_bytes: usize,
    /// Bytes of requests and replies in flight on all connections together
    /// (64 MiB); a connection waits for its share (up to `frame_timeout`).
    pub max_buffered_bytes: usize,
    /// Bytes the table may hold, counting the allocations of keys and
    /// values (as malloc sizes them) and [`ENTRY_OVERHEAD_BYTES`] per key
    /// (1 GiB). Writes past it fail with an error ("store is full").
    pub max_stored_bytes: usize,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            max_connections: 256,
            login_timeout: Duration::from_secs(10),
            max_hello_bytes: 4 << 10,
            max_frame_bytes: (16 << 20) + (64 << 10),
            frame_timeout: Duration::from_secs(30),
            max_key_bytes: 4 << 10,
            max_value_bytes: 16 << 20,
            max_keys_per_request: 4096,
            max_response_bytes: 32 << 20,
            max_buffered_bytes: 64 << 20,
            max_stored_bytes: 1 << 30,
        }
    }
}

impl ServerLimits {
    // NOTE [memory budget].
    /// Checks that the limits can all be honoured together: none is zero, a
    /// largest request (twice its frame: the body and its decoded form) and
    /// a largest reply each fit the buffer budget, replies fit a frame's
    /// `u32` length, and timeouts are at most a day.
    pub fn validate(&self) -> Result<(), StoreError> {
        let bad = |reason: String| Err(StoreError::InvalidLimits { reason });
        let sizes = [
            ("max_connections", self.max_connections),
            ("max_hello_bytes", self.max_hello_bytes),
            ("max_frame_bytes", self.max_frame_bytes),
            ("max_key_bytes", self.max_key_bytes),
            ("max_value_bytes", self.max_value_bytes),
            ("max_keys_per_request", self.max_keys_per_request),
            ("max_response_bytes", self.max_response_bytes),
            ("max_buffered_bytes", self.max_buffered_bytes),
            ("max_stored_bytes", self.max_stored_bytes),
        ];
        if let Some((name, _)) = sizes.iter().find(|(_, v)| *v == 0) {
            return bad(format!("{name} must be at least 1"));
        }
        for (name, timeout) in [
            ("login_timeout", self.login_timeout),
            ("frame_timeout", self.frame_timeout),
        ] {
            if timeout.is_zero() || timeout > MAX_TIMEOUT {
                return bad(format!(
                    "{name} must be between 1 ms and {} s, got {} ms",
                    MAX_TIMEOUT.as_secs(),
                    timeout.as_millis()
                ));
            }
        }
        let request_bytes = self.request_reservation_bytes(self.max_frame_bytes);
        if request_bytes > self.max_buffered_bytes {
            return bad(format!(
                "max_buffered_bytes ({}) must hold twice max_frame_bytes ({})",
                self.max_buffered_bytes, self.max_frame_bytes
            ));
        }
        if self.max_response_bytes > self.max_buffered_bytes {
            return bad(format!(
                "max_buffered_bytes ({}) must hold max_response_bytes ({})",
                self.max_buffered_bytes, self.max_response_bytes
            ));
        }
        // A GET of the largest value: opcode, length, value.
        if self.max_response_bytes < self.max_value_bytes.saturating_add(5) {
            return bad(format!(
                "max_response_bytes ({}) must hold one value of max_value_bytes ({}) and its 5 bytes of framing",
                self.max_response_bytes, self.max_value_bytes
            ));
        }
        let frame_max = u32::MAX as usize;
        for (name, v) in [
            ("max_response_bytes", self.max_response_bytes),
            ("max_frame_bytes", self.max_frame_bytes),
            ("max_hello_bytes", self.max_hello_bytes),
        ] {
            if v > frame_max {
                return bad(format!("{name} ({v}) must fit a frame ({frame_max} bytes)"));
            }
        }
        Ok(())
    }

    /// What reading and decoding a request body of `frame_bytes` reserves
    /// from the buffer budget: the body, and its decoded form, which the
    /// decoder keeps no larger than the body plus the item overhead that
    /// `max_keys_per_request` bounds.
    pub(crate) fn request_reservation_bytes(&self, frame_bytes: usize) -> usize {
        frame_bytes.saturating_mul(2)
    }

    /// What decoding `items` list items (pairs when `pairs`) costs beyond
    /// [`ServerLimits::request_reservation_bytes`] (NOTE [decoded items]).
    pub(crate) fn decoded_items_bytes(&self, items: usize, pairs: bool) -> usize {
        let per_item = if pairs {
            DECODED_PAIR_BYTES
        } else {
            DECODED_KEY_BYTES
        };
        items
            .min(self.max_keys_per_request)
            .saturating_mul(per_item)
    }
}

/// NOTE [decoded items]: twice a frame's length covers a request whose
/// bytes are mostly one key or value, not one of many tiny keys. A key of
/// one byte is 5 bytes on the wire but a `String` (24 bytes) and a 32-byte
/// chunk decoded, and the table's wait is handed a `&str` (16 bytes) of
/// each: a WAIT of 4096 one-byte keys, a 20 KiB frame with 40 KiB
/// reserved, held about 229 KiB while parked, and 2000 such waits took a
/// store to 524 MiB against 329 MiB by the formula. Each item now reserves
/// this much more, read from the list's count before decoding: the
/// `String`, its chunk's header and rounding (32 bytes at most beyond the
/// key's own bytes, which the frame's share already covers) and the
/// `&str`.
const DECODED_KEY_BYTES: usize = std::mem::size_of::<String>() + 32 + std::mem::size_of::<&str>();

/// A `MULTI_SET` pair: a `String` and a `Vec<u8>`, each with its chunk's
/// overhead, and the table's own copy of the pair's sizes while it checks
/// the room (a `&str` and a `usize` in a map slot).
const DECODED_PAIR_BYTES: usize =
    std::mem::size_of::<(String, Vec<u8>)>() + 2 * 32 + std::mem::size_of::<(&str, usize)>() + 8;

#[cfg(test)]
mod tests {
    use super::*;

    /// NOTE [decoded items]: the reservation of a WAIT of 4096 one-byte
    /// keys covers what decoding it allocates, counted as malloc lays it
    /// out.
    #[test]
    fn many_tiny_keys_reserve_what_they_decode_to() {
        let limits = ServerLimits::default();
        let keys: Vec<String> = (0..4096)
            .map(|i| ((b'a' + (i % 26) as u8) as char).to_string())
            .collect();
        let body = crate::wire::encode_request(&crate::wire::Request::Wait {
            keys: keys.clone(),
            timeout_ms: 1,
        })
        .unwrap();
        let (items, pairs) = crate::wire::list_items(&body);
        assert_eq!((items, pairs), (4096, false));
        let reserved =
            limits.request_reservation_bytes(body.len()) + limits.decoded_items_bytes(items, pairs);
        let decoded: usize = body.len()
            + alloc_bytes(keys.len() * std::mem::size_of::<String>())
            + keys.iter().map(|k| alloc_bytes(k.len())).sum::<usize>()
            + alloc_bytes(keys.len() * std::mem::size_of::<&str>());
        assert!(
            decoded > 5 * body.len(),
            "the attack: {decoded} from {}",
            body.len()
        );
        assert!(
            decoded <= reserved,
            "decoded {decoded} > reserved {reserved}"
        );
    }

    #[test]
    fn defaults_are_valid() {
        ServerLimits::default().validate().unwrap();
    }

    #[test]
    fn inconsistent_limits_are_refused() {
        let cases = [
            ServerLimits {
                max_connections: 0,
                ..ServerLimits::default()
            },
            ServerLimits {
                max_buffered_bytes: 1 << 20,
                ..ServerLimits::default()
            },
            ServerLimits {
                login_timeout: Duration::from_secs(u64::MAX),
                ..ServerLimits::default()
            },
            ServerLimits {
                frame_timeout: Duration::ZERO,
                ..ServerLimits::default()
            },
        ];
        for limits in cases {
            let err = limits.validate().unwrap_err();
            assert!(matches!(err, StoreError::InvalidLimits { .. }), "{err}");
        }
    }
}
