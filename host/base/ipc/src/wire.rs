//! The datagram format: a fixed header (magic, version, kind, source
//! rank, world size, sequence number), then the caller's payload.

use std::fmt;
use std::os::fd::OwnedFd;

/// Wire header of every datagram: magic, version, kind, 2 reserved bytes,
/// source rank (u32 LE), world size (u32 LE), sequence number (u64 LE).
pub(crate) const HEADER_BYTES: usize = 24;
pub(crate) const MAGIC: [u8; 4] = *b"INFD";
pub(crate) const WIRE_VERSION: u8 = 1;

/// Largest user payload that [`IpcChannel::send_fd`](crate::IpcChannel::send_fd) carries next to the
/// descriptor, in bytes.
pub const MAX_PAYLOAD_BYTES: usize = 4096;

/// Largest world size a channel accepts (a sanity bound; ranks travel as
/// `u32` in the message header).
pub const MAX_WORLD: usize = 4096;

/// What a datagram belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    PointToPoint = 1,
    AllGather = 2,
    Broadcast = 3,
}

impl Kind {
    fn from_wire(byte: u8) -> Option<Self> {
        match byte {
            1 => Some(Self::PointToPoint),
            2 => Some(Self::AllGather),
            3 => Some(Self::Broadcast),
            _ => None,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::PointToPoint => "send_fd",
            Self::AllGather => "all_gather_fds",
            Self::Broadcast => "broadcast_fds",
        })
    }
}

/// A received, validated message.
#[derive(Debug)]
pub(crate) struct Message {
    pub(crate) kind: Kind,
    pub(crate) src: usize,
    pub(crate) seq: u64,
    pub(crate) fd: OwnedFd,
    pub(crate) payload: Vec<u8>,
}

/// Decoded wire header.
#[derive(Debug)]
pub(crate) struct Header {
    pub(crate) kind: Kind,
    pub(crate) src: usize,
    pub(crate) world: usize,
    pub(crate) seq: u64,
}

pub(crate) fn encode_header(kind: Kind, src: usize, world: usize, seq: u64) -> [u8; HEADER_BYTES] {
    let mut h = [0u8; HEADER_BYTES];
    h[0..4].copy_from_slice(&MAGIC);
    h[4] = WIRE_VERSION;
    h[5] = kind as u8;
    // `src < world <= MAX_WORLD` (checked in `new`), so both fit in u32.
    h[8..12].copy_from_slice(&(src as u32).to_le_bytes());
    h[12..16].copy_from_slice(&(world as u32).to_le_bytes());
    h[16..24].copy_from_slice(&seq.to_le_bytes());
    h
}

pub(crate) fn decode_header(data: &[u8]) -> Result<Header, String> {
    let Some(h) = data.first_chunk::<HEADER_BYTES>() else {
        return Err(format!(
            "datagram of {} bytes is shorter than the header",
            data.len()
        ));
    };
    if h[0..4] != MAGIC {
        return Err("bad magic".into());
    }
    if h[4] != WIRE_VERSION {
        return Err(format!(
            "wire version {} is not ours ({WIRE_VERSION})",
            h[4]
        ));
    }
    let kind = Kind::from_wire(h[5]).ok_or_else(|| format!("unknown message kind {}", h[5]))?;
    let u32_at = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]) as usize;
    let mut seq = [0u8; 8];
    seq.copy_from_slice(&h[16..24]);
    Ok(Header {
        kind,
        src: u32_at(8),
        world: u32_at(12),
        seq: u64::from_le_bytes(seq),
    })
}
