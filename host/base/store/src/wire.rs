// (Over 700 lines, 1153: every request and response of the protocol with its
// encoding, one table to read when the version changes; a quarter is
// tests.)

//! The TCP store's wire protocol: length-prefixed frames carrying one
//! [`Request`] or [`Response`] each.
//!
//! ```text
//! frame    = len:u32le body[len]            len <= max_frame_bytes
//! body     = opcode:u8 fields...            (no trailing bytes)
//! bytes    = n:u32le byte[n]                keys are bytes that are UTF-8
//! list     = count:u32le item[count]
//! hello    = 0x01 magic:u32le version:u16le has_token:u8 [token:bytes]
//! ```
//!
//! Every integer is little-endian. A connection starts with a `Hello`
//! request that the server answers with a `Hello` response (or a
//! `Refused` followed by closing the connection); after that, each request
//! frame gets exactly one response frame, in order. `Error` means the
//! request failed and the connection stays usable; `Refused` (oversize or
//! malformed frame, bad handshake) means the server closes it after this
//! reply.
//!
//! NOTE [bounded allocation]: the decoder never allocates more than the
//! bytes actually present, plus a fixed overhead per list item (which
//! [`DecodeLimits::max_items`] bounds in the server). Frame lengths are checked against the bound
//! before any body byte is read (`read_frame` then grows its buffer only
//! as data arrives), every length inside a body is checked against the
//! bytes left in the body, and every list count against the smallest size
//! its items could have. `decode_request` is pure, so the fuzz target in
//! `host/base/store/fuzz` exercises exactly what the server runs.

use std::io::{self, Read, Write};

/// First field of every `Hello`: `b"INST"` read as a little-endian u32.
pub const MAGIC: u32 = u32::from_le_bytes(*b"INST");

/// Version of this protocol; server and client must agree exactly.
pub const PROTOCOL_VERSION: u16 = 1;

/// Bytes of the length prefix of a frame.
pub const FRAME_HEADER_BYTES: usize = 4;

/// Default bound on a frame body the server accepts after login (16 MiB
/// for a value plus 64 KiB for its key and framing); see
/// [`crate::ServerLimits::max_frame_bytes`].
pub const DEFAULT_MAX_FRAME_BYTES: usize = (16 << 20) + (64 << 10);

/// Bounds [`decode_request_limited`] enforces while decoding, before it
/// allocates what they bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeLimits {
    /// Most items in one list (keys, or key/value pairs).
    pub max_items: usize,
    /// Largest key, in bytes.
    pub max_key_bytes: usize,
    /// Largest value, in bytes.
    pub max_value_bytes: usize,
}

impl DecodeLimits {
    /// No bounds beyond the body's own length.
    pub const NONE: Self = Self {
        max_items: usize::MAX,
        max_key_bytes: usize::MAX,
        max_value_bytes: usize::MAX,
    };
}

/// A malformed frame or body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The frame announced a body longer than allowed.
    #[error("frame of {bytes} bytes exceeds the limit of {max_bytes} bytes")]
    FrameTooLarge {
        /// Announced (or attempted) body length.
        bytes: u64,
        /// The bound.
        max_bytes: u64,
    },
    /// The body ended in the middle of a field.
    #[error("truncated body: field {field} needs {needed} bytes but {remaining} remain")]
    Truncated {
        /// Which field was being read.
        field: &'static str,
        /// Bytes it needed.
        needed: u64,
        /// Bytes left in the body.
        remaining: usize,
    },
    /// Bytes were left over after the last field.
    #[error("{extra} unexpected bytes after the end of the message")]
    TrailingBytes {
        /// How many.
        extra: usize,
    },
    /// The body was empty (no opcode).
    #[error("empty message body")]
    Empty,
    /// The opcode is not one this version knows.
    #[error("unknown opcode {0:#04x}")]
    UnknownOpcode(u8),
    /// A `Hello` did not start with [`MAGIC`].
    #[error("bad magic {found:#010x}, expected {MAGIC:#010x}")]
    BadMagic {
        /// The magic found.
        found: u32,
    },
    /// A key was not UTF-8.
    #[error("key of {bytes} bytes is not utf-8")]
    BadKey {
        /// Its length.
        bytes: usize,
    },
    /// A boolean byte was neither 0 nor 1.
    #[error("invalid boolean byte {0:#04x}")]
    BadBool(u8),
    /// A well-formed request goes past one of the server's
    /// [`DecodeLimits`]. The frame was read whole, so the connection stays
    /// usable.
    #[error("{what} of {got} exceeds the limit of {max} ({limit})")]
    OverLimit {
        /// `"key bytes"`, `"value bytes"` or `"list items"`.
        what: &'static str,
        /// The size found.
        got: u64,
        /// The bound.
        max: u64,
        /// The name of the limit in [`crate::ServerLimits`].
        limit: &'static str,
    },
    /// A list claimed more items than the body could hold.
    #[error("list of {count} items cannot fit in the {remaining} bytes left")]
    TooManyItems {
        /// Count announced.
        count: u32,
        /// Bytes left in the body.
        remaining: usize,
    },
}

/// A client request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Request {
    /// First message of a connection.
    Hello {
        /// The client's [`PROTOCOL_VERSION`].
        version: u16,
        /// The shared secret, when the client has one.
        token: Option<Vec<u8>>,
    },
    /// `Store::set`.
    Set {
        /// Key.
        key: String,
        /// Value.
        value: Vec<u8>,
    },
    /// `Store::get_with_timeout`; the server parks it until the key exists.
    Get {
        /// Key.
        key: String,
        /// How long the server may park the request.
        timeout_ms: u64,
    },
    /// `Store::add`.
    Add {
        /// Key.
        key: String,
        /// Amount added.
        delta: i64,
    },
    /// `Store::compare_set`.
    CompareSet {
        /// Key.
        key: String,
        /// Value expected.
        expected: Vec<u8>,
        /// Value to set.
        desired: Vec<u8>,
    },
    /// `Store::check`.
    Check {
        /// Keys.
        keys: Vec<String>,
    },
    /// `Store::wait`; parked like `Get`.
    Wait {
        /// Keys.
        keys: Vec<String>,
        /// How long the server may park the request.
        timeout_ms: u64,
    },
    /// `Store::delete_key`.
    DeleteKey {
        /// Key.
        key: String,
    },
    /// `Store::num_keys`.
    NumKeys,
    /// `Store::multi_get`; parked like `Get`.
    MultiGet {
        /// Keys.
        keys: Vec<String>,
        /// How long the server may park the request.
        timeout_ms: u64,
    },
    /// `Store::multi_set`.
    MultiSet {
        /// Key/value pairs.
        pairs: Vec<(String, Vec<u8>)>,
    },
    /// `Store::append`.
    Append {
        /// Key.
        key: String,
        /// Bytes appended.
        value: Vec<u8>,
    },
}

/// A server response.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Response {
    /// Handshake accepted.
    Hello {
        /// The server's [`PROTOCOL_VERSION`].
        version: u16,
    },
    /// Done, nothing to return.
    Ok,
    /// One value.
    Bytes(Vec<u8>),
    /// A counter or count.
    Int(i64),
    /// A yes/no answer.
    Bool(bool),
    /// Several values, in request order.
    List(Vec<Vec<u8>>),
    /// A parked request reached its deadline.
    TimedOut,
    /// The request failed; the message says why. The connection stays
    /// usable.
    Error(String),
    /// The server refuses this connection (bad handshake, oversize or
    /// malformed frame) and closes it after this reply.
    Refused(String),
}

mod op {
    pub const HELLO: u8 = 0x01;
    pub const SET: u8 = 0x02;
    pub const GET: u8 = 0x03;
    pub const ADD: u8 = 0x04;
    pub const COMPARE_SET: u8 = 0x05;
    pub const CHECK: u8 = 0x06;
    pub const WAIT: u8 = 0x07;
    pub const DELETE_KEY: u8 = 0x08;
    pub const NUM_KEYS: u8 = 0x09;
    pub const MULTI_GET: u8 = 0x0a;
    pub const MULTI_SET: u8 = 0x0b;
    pub const APPEND: u8 = 0x0c;

    pub const R_HELLO: u8 = 0x81;
    pub const R_OK: u8 = 0x82;
    pub const R_BYTES: u8 = 0x83;
    pub const R_INT: u8 = 0x84;
    pub const R_BOOL: u8 = 0x85;
    pub const R_LIST: u8 = 0x86;
    pub const R_TIMED_OUT: u8 = 0x87;
    pub const R_ERROR: u8 = 0x88;
    pub const R_REFUSED: u8 = 0x89;
}

// ---------------------------------------------------------------- decoding

/// A cursor over a body that refuses to read past its end.
struct Reader<'a> {
    buf: &'a [u8],
    limits: DecodeLimits,
}

fn over(what: &'static str, got: usize, max: usize, limit: &'static str) -> WireError {
    WireError::OverLimit {
        what,
        got: got as u64,
        max: max as u64,
        limit,
    }
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: u64, field: &'static str) -> Result<&'a [u8], WireError> {
        let truncated = || WireError::Truncated {
            field,
            needed: n,
            remaining: self.buf.len(),
        };
        let n = usize::try_from(n).map_err(|_| truncated())?;
        if n > self.buf.len() {
            return Err(truncated());
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], WireError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N as u64, field)?);
        Ok(out)
    }

    fn u8(&mut self, field: &'static str) -> Result<u8, WireError> {
        Ok(self.array::<1>(field)?[0])
    }

    fn u16(&mut self, field: &'static str) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(self.array(field)?))
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    fn u64(&mut self, field: &'static str) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    fn i64(&mut self, field: &'static str) -> Result<i64, WireError> {
        Ok(i64::from_le_bytes(self.array(field)?))
    }

    fn bool(&mut self, field: &'static str) -> Result<bool, WireError> {
        match self.u8(field)? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(WireError::BadBool(b)),
        }
    }

    fn bytes(&mut self, field: &'static str) -> Result<Vec<u8>, WireError> {
        let n = self.u32(field)?;
        // Bounded: `take` checked `n` against the bytes present.
        Ok(self.take(u64::from(n), field)?.to_vec())
    }

    /// A value field, checked against `max_value_bytes` before it is
    /// copied.
    fn value(&mut self, field: &'static str) -> Result<Vec<u8>, WireError> {
        let n = self.u32(field)?;
        // A truncated body is malformed whatever it claims; only then is
        // the size held against the limit, before the copy.
        let bytes = self.take(u64::from(n), field)?;
        let max = self.limits.max_value_bytes;
        if bytes.len() > max {
            return Err(over("value bytes", bytes.len(), max, "max_value_bytes"));
        }
        Ok(bytes.to_vec())
    }

    fn key(&mut self, field: &'static str) -> Result<String, WireError> {
        let n = self.u32(field)?;
        let bytes = self.take(u64::from(n), field)?;
        let max = self.limits.max_key_bytes;
        if bytes.len() > max {
            return Err(over("key bytes", bytes.len(), max, "max_key_bytes"));
        }
        let bytes = bytes.to_vec();
        String::from_utf8(bytes).map_err(|e| WireError::BadKey {
            bytes: e.as_bytes().len(),
        })
    }

    /// Reads a list count, checked against the body: each item takes at
    /// least `min_item_bytes`, so a count that cannot fit is refused before
    /// anything is allocated for it.
    fn count(&mut self, min_item_bytes: usize) -> Result<usize, WireError> {
        let count = self.u32("list count")?;
        let remaining = self.buf.len();
        let fits = usize::try_from(count)
            .ok()
            .and_then(|c| c.checked_mul(min_item_bytes))
            .is_some_and(|needed| needed <= remaining);
        if fits {
            // `fits` implies the conversion succeeds.
            let count = usize::try_from(count).unwrap_or(0);
            if count > self.limits.max_items {
                return Err(over(
                    "list items",
                    count,
                    self.limits.max_items,
                    "max_keys_per_request",
                ));
            }
            Ok(count)
        } else {
            Err(WireError::TooManyItems { count, remaining })
        }
    }

    fn keys(&mut self) -> Result<Vec<String>, WireError> {
        let n = self.count(4)?;
        (0..n).map(|_| self.key("key")).collect()
    }

    fn finish(self) -> Result<(), WireError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(WireError::TrailingBytes {
                extra: self.buf.len(),
            })
        }
    }
}

/// Decodes one request body (the bytes after the length prefix).
///
/// Pure and total: any input gives `Ok` or `Err`, never a panic, and never
/// allocates more than `body.len()` bytes plus a fixed overhead per list
/// item (NOTE [bounded allocation]).
pub fn decode_request(body: &[u8]) -> Result<Request, WireError> {
    decode_request_limited(body, &DecodeLimits::NONE)
}

/// [`decode_request`], refusing keys, values and lists over `limits` with
/// [`WireError::OverLimit`] before allocating them. The server decodes
/// with this.
pub fn decode_request_limited(body: &[u8], limits: &DecodeLimits) -> Result<Request, WireError> {
    let mut r = Reader {
        buf: body,
        limits: *limits,
    };
    let opcode = r.u8("opcode").map_err(|_| WireError::Empty)?;
    let req = match opcode {
        op::HELLO => {
            let magic = r.u32("magic")?;
            if magic != MAGIC {
                return Err(WireError::BadMagic { found: magic });
            }
            let version = r.u16("version")?;
            let token = if r.bool("has token")? {
                Some(r.bytes("token")?)
            } else {
                None
            };
            Request::Hello { version, token }
        }
        op::SET => Request::Set {
            key: r.key("key")?,
            value: r.value("value")?,
        },
        op::GET => Request::Get {
            key: r.key("key")?,
            timeout_ms: r.u64("timeout")?,
        },
        op::ADD => Request::Add {
            key: r.key("key")?,
            delta: r.i64("delta")?,
        },
        op::COMPARE_SET => Request::CompareSet {
            key: r.key("key")?,
            expected: r.value("expected")?,
            desired: r.value("desired")?,
        },
        op::CHECK => Request::Check { keys: r.keys()? },
        op::WAIT => Request::Wait {
            keys: r.keys()?,
            timeout_ms: r.u64("timeout")?,
        },
        op::DELETE_KEY => Request::DeleteKey { key: r.key("key")? },
        op::NUM_KEYS => Request::NumKeys,
        op::MULTI_GET => Request::MultiGet {
            keys: r.keys()?,
            timeout_ms: r.u64("timeout")?,
        },
        op::MULTI_SET => {
            let n = r.count(8)?;
            let pairs = (0..n)
                .map(|_| Ok((r.key("key")?, r.value("value")?)))
                .collect::<Result<_, WireError>>()?;
            Request::MultiSet { pairs }
        }
        op::APPEND => Request::Append {
            key: r.key("key")?,
            value: r.value("value")?,
        },
        other => return Err(WireError::UnknownOpcode(other)),
    };
    r.finish()?;
    Ok(req)
}

/// Items in a list request body (keys of `CHECK`, `WAIT`, `MULTI_GET`,
/// pairs of `MULTI_SET`) as its count field says, and whether they are
/// pairs; `(0, false)` for other requests and bodies too short to say.
/// Read before decoding, so that the server can reserve what decoding
/// them will cost (NOTE [decoded items] in `limits.rs`).
pub(crate) fn list_items(body: &[u8]) -> (usize, bool) {
    let (Some(&opcode), Some(count)) = (body.first(), body.get(1..5)) else {
        return (0, false);
    };
    let pairs = match opcode {
        op::CHECK | op::WAIT | op::MULTI_GET => false,
        op::MULTI_SET => true,
        _ => return (0, false),
    };
    let count = u32::from_le_bytes([count[0], count[1], count[2], count[3]]);
    (usize::try_from(count).unwrap_or(usize::MAX), pairs)
}

fn lossy(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Decodes one response body. Same guarantees as [`decode_request`].
pub fn decode_response(body: &[u8]) -> Result<Response, WireError> {
    let mut r = Reader {
        buf: body,
        limits: DecodeLimits::NONE,
    };
    let opcode = r.u8("opcode").map_err(|_| WireError::Empty)?;
    let resp = match opcode {
        op::R_HELLO => {
            let magic = r.u32("magic")?;
            if magic != MAGIC {
                return Err(WireError::BadMagic { found: magic });
            }
            Response::Hello {
                version: r.u16("version")?,
            }
        }
        op::R_OK => Response::Ok,
        op::R_BYTES => Response::Bytes(r.bytes("value")?),
        op::R_INT => Response::Int(r.i64("int")?),
        op::R_BOOL => Response::Bool(r.bool("bool")?),
        op::R_LIST => {
            let n = r.count(4)?;
            Response::List((0..n).map(|_| r.bytes("value")).collect::<Result<_, _>>()?)
        }
        op::R_TIMED_OUT => Response::TimedOut,
        op::R_ERROR => Response::Error(lossy(r.bytes("message")?)),
        op::R_REFUSED => Response::Refused(lossy(r.bytes("message")?)),
        other => return Err(WireError::UnknownOpcode(other)),
    };
    r.finish()?;
    Ok(resp)
}

// ---------------------------------------------------------------- encoding

struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    fn new(opcode: u8) -> Self {
        Self { buf: vec![opcode] }
    }

    fn len_u32(len: usize) -> Result<u32, WireError> {
        u32::try_from(len).map_err(|_| WireError::FrameTooLarge {
            bytes: len as u64,
            max_bytes: u64::from(u32::MAX),
        })
    }

    fn u16(&mut self, v: u16) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    fn i64(&mut self, v: i64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    fn bool(&mut self, v: bool) {
        self.buf.push(u8::from(v));
    }

    fn bytes(&mut self, v: &[u8]) -> Result<(), WireError> {
        self.u32(Self::len_u32(v.len())?);
        self.buf.extend_from_slice(v);
        Ok(())
    }

    fn count(&mut self, n: usize) -> Result<(), WireError> {
        self.u32(Self::len_u32(n)?);
        Ok(())
    }

    fn keys<S: AsRef<str>>(&mut self, keys: &[S]) -> Result<(), WireError> {
        self.count(keys.len())?;
        keys.iter()
            .try_for_each(|k| self.bytes(k.as_ref().as_bytes()))
    }

    fn finish(self) -> Result<Vec<u8>, WireError> {
        Self::len_u32(self.buf.len())?;
        Ok(self.buf)
    }
}

/// Encodes a request body. Fails only if it would not fit a frame.
pub fn encode_request(req: &Request) -> Result<Vec<u8>, WireError> {
    let w = match req {
        Request::Hello { version, token } => {
            let mut w = Writer::new(op::HELLO);
            w.u32(MAGIC);
            w.u16(*version);
            w.bool(token.is_some());
            if let Some(t) = token {
                w.bytes(t)?;
            }
            w
        }
        Request::Set { key, value } => {
            let mut w = Writer::new(op::SET);
            w.bytes(key.as_bytes())?;
            w.bytes(value)?;
            w
        }
        Request::Get { key, timeout_ms } => {
            let mut w = Writer::new(op::GET);
            w.bytes(key.as_bytes())?;
            w.u64(*timeout_ms);
            w
        }
        Request::Add { key, delta } => {
            let mut w = Writer::new(op::ADD);
            w.bytes(key.as_bytes())?;
            w.i64(*delta);
            w
        }
        Request::CompareSet {
            key,
            expected,
            desired,
        } => {
            let mut w = Writer::new(op::COMPARE_SET);
            w.bytes(key.as_bytes())?;
            w.bytes(expected)?;
            w.bytes(desired)?;
            w
        }
        Request::Check { keys } => {
            let mut w = Writer::new(op::CHECK);
            w.keys(keys)?;
            w
        }
        Request::Wait { keys, timeout_ms } => {
            let mut w = Writer::new(op::WAIT);
            w.keys(keys)?;
            w.u64(*timeout_ms);
            w
        }
        Request::DeleteKey { key } => {
            let mut w = Writer::new(op::DELETE_KEY);
            w.bytes(key.as_bytes())?;
            w
        }
        Request::NumKeys => Writer::new(op::NUM_KEYS),
        Request::MultiGet { keys, timeout_ms } => {
            let mut w = Writer::new(op::MULTI_GET);
            w.keys(keys)?;
            w.u64(*timeout_ms);
            w
        }
        Request::MultiSet { pairs } => {
            let mut w = Writer::new(op::MULTI_SET);
            w.count(pairs.len())?;
            for (k, v) in pairs {
                w.bytes(k.as_bytes())?;
                w.bytes(v)?;
            }
            w
        }
        Request::Append { key, value } => {
            let mut w = Writer::new(op::APPEND);
            w.bytes(key.as_bytes())?;
            w.bytes(value)?;
            w
        }
    };
    w.finish()
}

/// Encodes a response body. Fails only if it would not fit a frame.
pub fn encode_response(resp: &Response) -> Result<Vec<u8>, WireError> {
    let w = match resp {
        Response::Hello { version } => {
            let mut w = Writer::new(op::R_HELLO);
            w.u32(MAGIC);
            w.u16(*version);
            w
        }
        Response::Ok => Writer::new(op::R_OK),
        Response::Bytes(v) => {
            let mut w = Writer::new(op::R_BYTES);
            w.bytes(v)?;
            w
        }
        Response::Int(v) => {
            let mut w = Writer::new(op::R_INT);
            w.i64(*v);
            w
        }
        Response::Bool(v) => {
            let mut w = Writer::new(op::R_BOOL);
            w.bool(*v);
            w
        }
        Response::List(vs) => {
            let mut w = Writer::new(op::R_LIST);
            w.count(vs.len())?;
            vs.iter().try_for_each(|v| w.bytes(v))?;
            w
        }
        Response::TimedOut => Writer::new(op::R_TIMED_OUT),
        Response::Error(msg) => {
            let mut w = Writer::new(op::R_ERROR);
            w.bytes(msg.as_bytes())?;
            w
        }
        Response::Refused(msg) => {
            let mut w = Writer::new(op::R_REFUSED);
            w.bytes(msg.as_bytes())?;
            w
        }
    };
    w.finish()
}

/// Length of the body of a `Bytes` (`list == false`, exactly one value) or
/// `List` response carrying `value_lens`, without building it; `None` when
/// it would not fit a frame.
pub(crate) fn values_body_bytes(
    list: bool,
    mut value_lens: impl Iterator<Item = usize>,
) -> Option<usize> {
    let head = if list { 1 + 4 } else { 1 };
    let total =
        value_lens.try_fold(head, |acc: usize, len| acc.checked_add(4)?.checked_add(len))?;
    (total <= u32::MAX as usize).then_some(total)
}

/// Writes the body of a `Bytes` or `List` response straight from the
/// values, so a large reply is never copied into one buffer. Produces the
/// same bytes as [`encode_response`] of `Response::Bytes` (with
/// `list == false` and one value) or `Response::List`.
pub(crate) fn write_values_body<V: AsRef<[u8]>>(
    w: &mut impl Write,
    list: bool,
    values: &[V],
) -> io::Result<()> {
    let too_large = || io::Error::new(io::ErrorKind::InvalidInput, "reply does not fit a frame");
    let len = |n: usize| u32::try_from(n).map_err(|_| too_large());
    if list {
        w.write_all(&[op::R_LIST])?;
        w.write_all(&len(values.len())?.to_le_bytes())?;
    } else {
        if values.len() != 1 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a bytes reply carries exactly one value",
            ));
        }
        w.write_all(&[op::R_BYTES])?;
    }
    for v in values {
        let v = v.as_ref();
        w.write_all(&len(v.len())?.to_le_bytes())?;
        w.write_all(v)?;
    }
    Ok(())
}

// ---------------------------------------------------------------- frames

/// Why [`read_frame`] returned no body.
#[derive(Debug)]
pub(crate) enum FrameError {
    /// The socket failed (or closed mid-frame).
    Io(io::Error),
    /// The length prefix exceeded the bound; nothing of the body was read.
    TooLarge(WireError),
}

/// Writes one frame (length prefix and body) and flushes.
pub(crate) fn write_frame(w: &mut impl Write, body: &[u8]) -> io::Result<()> {
    let len = u32::try_from(body.len()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("frame body of {} bytes does not fit a u32", body.len()),
        )
    })?;
    // One write for header and small bodies keeps request and reply in one
    // segment each (no Nagle stall); large bodies go out separately to
    // avoid copying them.
    if body.len() <= 4096 {
        let mut buf = Vec::with_capacity(FRAME_HEADER_BYTES + body.len());
        buf.extend_from_slice(&len.to_le_bytes());
        buf.extend_from_slice(body);
        w.write_all(&buf)?;
    } else {
        w.write_all(&len.to_le_bytes())?;
        w.write_all(body)?;
    }
    w.flush()
}

/// Reads one frame whose body may be at most `max_bytes`. Returns
/// `Ok(None)` on a clean end of stream before the first header byte.
///
/// The length is checked against `max_bytes` before anything is
/// allocated, and the buffer then grows only as bytes arrive, so a peer
/// that announces 64 MiB and sends 10 bytes costs 10 bytes (NOTE [bounded
/// allocation]).
pub(crate) fn read_frame(
    r: &mut impl Read,
    max_bytes: usize,
) -> Result<Option<Vec<u8>>, FrameError> {
    let mut header = [0u8; FRAME_HEADER_BYTES];
    let mut filled = 0;
    while filled < header.len() {
        match r.read(&mut header[filled..]) {
            Ok(0) if filled == 0 => return Ok(None),
            Ok(0) => {
                return Err(FrameError::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed inside a frame header",
                )));
            }
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(FrameError::Io(e)),
        }
    }
    let len = u32::from_le_bytes(header);
    let too_large = || {
        FrameError::TooLarge(WireError::FrameTooLarge {
            bytes: u64::from(len),
            max_bytes: max_bytes as u64,
        })
    };
    let len_usize = usize::try_from(len).map_err(|_| too_large())?;
    if len_usize > max_bytes {
        return Err(too_large());
    }
    let mut body = Vec::with_capacity(len_usize.min(64 * 1024));
    r.take(u64::from(len))
        .read_to_end(&mut body)
        .map_err(FrameError::Io)?;
    if body.len() != len_usize {
        return Err(FrameError::Io(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "connection closed after {} of {len} frame body bytes",
                body.len()
            ),
        )));
    }
    Ok(Some(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_requests() -> Vec<Request> {
        vec![
            Request::Hello {
                version: PROTOCOL_VERSION,
                token: None,
            },
            Request::Hello {
                version: 7,
                token: Some(b"secret".to_vec()),
            },
            Request::Set {
                key: "k".into(),
                value: vec![1, 2, 3],
            },
            Request::Get {
                key: "ключ".into(),
                timeout_ms: 200,
            },
            Request::Add {
                key: "c".into(),
                delta: -5,
            },
            Request::CompareSet {
                key: "k".into(),
                expected: vec![],
                desired: b"x".to_vec(),
            },
            Request::Check {
                keys: vec!["a".into(), "b".into()],
            },
            Request::Wait {
                keys: vec![],
                timeout_ms: u64::MAX,
            },
            Request::DeleteKey { key: "".into() },
            Request::NumKeys,
            Request::MultiGet {
                keys: vec!["a".into()],
                timeout_ms: 1,
            },
            Request::MultiSet {
                pairs: vec![("a".into(), vec![]), ("b".into(), vec![0; 300])],
            },
            Request::Append {
                key: "a".into(),
                value: b"tail".to_vec(),
            },
        ]
    }

    #[test]
    fn requests_round_trip() {
        for req in all_requests() {
            let body = encode_request(&req).unwrap();
            assert_eq!(decode_request(&body).unwrap(), req);
        }
    }

    #[test]
    fn responses_round_trip() {
        let all = [
            Response::Hello { version: 1 },
            Response::Ok,
            Response::Bytes(vec![9; 5]),
            Response::Int(i64::MIN),
            Response::Bool(true),
            Response::List(vec![vec![], vec![1]]),
            Response::TimedOut,
            Response::Error("nope".into()),
            Response::Refused("go away".into()),
        ];
        for resp in all {
            let body = encode_response(&resp).unwrap();
            assert_eq!(decode_response(&body).unwrap(), resp);
        }
    }

    #[test]
    fn every_truncation_is_an_error() {
        for req in all_requests() {
            let body = encode_request(&req).unwrap();
            for cut in 0..body.len() {
                assert!(
                    decode_request(&body[..cut]).is_err(),
                    "{req:?} cut at {cut}"
                );
            }
            let mut long = body.clone();
            long.push(0);
            assert_eq!(
                decode_request(&long),
                Err(WireError::TrailingBytes { extra: 1 })
            );
        }
    }

    #[test]
    fn huge_counts_and_lengths_are_refused_without_allocating() {
        // CHECK with 4 billion keys in a 5-byte body.
        let body = [op::CHECK, 0xff, 0xff, 0xff, 0xff];
        assert!(matches!(
            decode_request(&body),
            Err(WireError::TooManyItems { .. })
        ));
        // SET whose key claims 4 GiB.
        let body = [op::SET, 0xff, 0xff, 0xff, 0xff, b'k'];
        assert!(matches!(
            decode_request(&body),
            Err(WireError::Truncated { .. })
        ));
    }

    #[test]
    fn bad_magic_opcode_utf8_bool() {
        assert_eq!(
            decode_request(&[op::HELLO, 1, 2, 3, 4, 1, 0, 0]),
            Err(WireError::BadMagic {
                found: u32::from_le_bytes([1, 2, 3, 4])
            })
        );
        assert_eq!(decode_request(&[0x7f]), Err(WireError::UnknownOpcode(0x7f)));
        assert_eq!(decode_request(&[]), Err(WireError::Empty));
        assert_eq!(
            decode_request(&[op::DELETE_KEY, 1, 0, 0, 0, 0xff]),
            Err(WireError::BadKey { bytes: 1 })
        );
        let mut hello = vec![op::HELLO];
        hello.extend_from_slice(&MAGIC.to_le_bytes());
        hello.extend_from_slice(&1u16.to_le_bytes());
        hello.push(2);
        assert_eq!(decode_request(&hello), Err(WireError::BadBool(2)));
    }

    #[test]
    fn read_frame_checks_the_bound_before_reading() {
        let mut data = (1000u32).to_le_bytes().to_vec();
        data.extend_from_slice(&[0; 10]);
        match read_frame(&mut data.as_slice(), 100) {
            Err(FrameError::TooLarge(WireError::FrameTooLarge {
                bytes: 1000,
                max_bytes: 100,
            })) => {}
            other => panic!("unexpected {other:?}"),
        }
        // Truncated body.
        match read_frame(&mut data.as_slice(), 2000) {
            Err(FrameError::Io(e)) => assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof),
            other => panic!("unexpected {other:?}"),
        }
        // Clean EOF.
        assert!(matches!(read_frame(&mut [].as_slice(), 10), Ok(None)));
        // Round trip.
        let mut out = Vec::new();
        write_frame(&mut out, b"hello").unwrap();
        assert_eq!(
            read_frame(&mut out.as_slice(), 5).unwrap().unwrap(),
            b"hello"
        );
    }

    #[test]
    fn values_bodies_match_the_encoder() {
        let values = vec![vec![], vec![1, 2, 3], vec![9; 300]];
        let mut out = Vec::new();
        write_values_body(&mut out, true, &values).unwrap();
        assert_eq!(
            out,
            encode_response(&Response::List(values.clone())).unwrap()
        );
        assert_eq!(
            values_body_bytes(true, values.iter().map(Vec::len)),
            Some(out.len())
        );
        let mut out = Vec::new();
        write_values_body(&mut out, false, &values[1..2]).unwrap();
        assert_eq!(
            out,
            encode_response(&Response::Bytes(values[1].clone())).unwrap()
        );
        assert_eq!(values_body_bytes(false, [3].into_iter()), Some(out.len()));
        assert!(write_values_body(&mut Vec::new(), false, &values).is_err());
        assert_eq!(
            values_body_bytes(true, [u32::MAX as usize].into_iter()),
            None
        );
    }

    #[test]
    fn limits_are_checked_before_allocating() {
        let limits = DecodeLimits {
            max_items: 2,
            max_key_bytes: 3,
            max_value_bytes: 4,
        };
        let ok = Request::MultiSet {
            pairs: vec![("abc".into(), vec![0; 4]), ("d".into(), vec![])],
        };
        let body = encode_request(&ok).unwrap();
        assert_eq!(decode_request_limited(&body, &limits), Ok(ok));
        let cases = [
            (
                Request::Set {
                    key: "abcd".into(),
                    value: vec![],
                },
                "max_key_bytes",
            ),
            (
                Request::Append {
                    key: "k".into(),
                    value: vec![0; 5],
                },
                "max_value_bytes",
            ),
            (
                Request::MultiGet {
                    keys: vec!["a".into(); 3],
                    timeout_ms: 1,
                },
                "max_keys_per_request",
            ),
        ];
        for (req, limit) in cases {
            let body = encode_request(&req).unwrap();
            let err = decode_request_limited(&body, &limits).unwrap_err();
            assert!(
                matches!(err, WireError::OverLimit { limit: l, .. } if l == limit),
                "{req:?}: {err}"
            );
            assert_eq!(decode_request(&body), Ok(req));
        }
        // A key claiming 4 GiB in a short body is malformed, not over a limit.
        let body = [op::DELETE_KEY, 0xff, 0xff, 0xff, 0xff];
        assert!(matches!(
            decode_request_limited(&body, &limits),
            Err(WireError::Truncated { .. })
        ));
    }

    #[test]
    fn random_bodies_never_panic() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x5354_4f52);
        let seeds: Vec<Vec<u8>> = all_requests()
            .iter()
            .map(|r| encode_request(r).unwrap())
            .collect();
        for i in 0..20_000 {
            let mut body = seeds[i % seeds.len()].clone();
            let flips = rng.random_range(1..4);
            for _ in 0..flips {
                if body.is_empty() {
                    break;
                }
                let at = rng.random_range(0..body.len());
                body[at] = rng.random();
            }
            let plain = decode_request(&body);
            let _ = decode_response(&body);
            // What the fuzz target checks: limits only refuse.
            let limits = DecodeLimits {
                max_items: 1,
                max_key_bytes: 2,
                max_value_bytes: 3,
            };
            match decode_request_limited(&body, &limits) {
                Ok(req) => assert_eq!(plain, Ok(req)),
                Err(WireError::OverLimit { .. }) => {}
                Err(e) => assert!(plain.is_err(), "{e}"),
            }
        }
    }
}
