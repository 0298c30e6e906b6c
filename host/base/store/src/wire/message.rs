//! The messages of the protocol: every [`Request`] and [`Response`], the
//! opcodes that name them on the wire (one table to read when the version
//! changes), and [`WireError`].

/// First field of every `Hello`: `b"INST"` read as a little-endian u32.
pub const MAGIC: u32 = u32::from_le_bytes(*b"INST");

/// Version of this protocol; server and client must agree exactly.
pub const PROTOCOL_VERSION: u16 = 1;

/// Bounds [`decode_request_limited`](super::decode_request_limited)
/// enforces while decoding, before it allocates what they bound.
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

pub(super) mod op {
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
