//! The bytes of PyTorch's `TCPStore` protocol (the table of the [parent
//! module's docs](super)): the query types, PyTorch's constants and
//! limits, writing a request and reading the fields of a reply.

use std::io::{self, Read};

use crate::wire::WireError;

// NOTE [torch store protocol].
/// The query types of PyTorch's `TCPStore` protocol (the table of the
/// [module docs](super)).
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

/// A request being written: the query byte, then its fields.
pub(super) struct Request(pub(super) Vec<u8>);

impl Request {
    pub(super) fn new(query: TorchQuery) -> Self {
        Self(vec![query as u8])
    }

    pub(super) fn u32(mut self, value: u32) -> Self {
        self.0.extend_from_slice(&value.to_le_bytes());
        self
    }

    pub(super) fn u64(mut self, value: u64) -> Self {
        self.0.extend_from_slice(&value.to_le_bytes());
        self
    }

    pub(super) fn i64(mut self, value: i64) -> Self {
        self.0.extend_from_slice(&value.to_le_bytes());
        self
    }

    pub(super) fn bytes(self, bytes: &[u8]) -> Self {
        let mut req = self.u64(bytes.len() as u64);
        req.0.extend_from_slice(bytes);
        req
    }

    /// A key as PyTorch's client sends it: [`TORCH_KEY_PREFIX`] first
    /// (`TCPStore::keyPrefix_`), so a key this client sets is the key a
    /// Python rank's `store.get` asks for, and the other way round.
    pub(super) fn key(self, key: &str) -> Self {
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
pub(super) fn check_keys(keys: &[&str]) -> Result<(), WireError> {
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

pub(super) fn check_value(value: &[u8]) -> Result<(), WireError> {
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
pub(super) fn read_bytes(stream: &mut impl Read) -> io::Result<Vec<u8>> {
    let len = read_value_len(stream)?;
    read_value(stream, len)
}

/// The length of a byte vector, refused over [`TORCH_MAX_VALUE_BYTES`].
pub(super) fn read_value_len(stream: &mut impl Read) -> io::Result<u64> {
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
pub(super) fn read_value(stream: &mut impl Read, len: u64) -> io::Result<Vec<u8>> {
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

pub(super) fn read_u8(stream: &mut impl Read) -> io::Result<u8> {
    Ok(read_array::<1>(stream)?[0])
}

pub(super) fn read_u32(stream: &mut impl Read) -> io::Result<u32> {
    Ok(u32::from_le_bytes(read_array(stream)?))
}

fn read_u64(stream: &mut impl Read) -> io::Result<u64> {
    Ok(u64::from_le_bytes(read_array(stream)?))
}

pub(super) fn read_i64(stream: &mut impl Read) -> io::Result<i64> {
    Ok(i64::from_le_bytes(read_array(stream)?))
}

pub(super) fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

pub(super) fn keys_request(query: TorchQuery, keys: &[&str]) -> Request {
    let mut req = Request::new(query).u64(keys.len() as u64);
    for key in keys {
        req = req.key(key);
    }
    req
}
