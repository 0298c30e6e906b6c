//! Frames: a length prefix and a body, read within a bound.

use std::io::{self, Read, Write};

use super::message::WireError;

/// Bytes of the length prefix of a frame.
pub const FRAME_HEADER_BYTES: usize = 4;

/// Default bound on a frame body the server accepts after login (16 MiB
/// for a value plus 64 KiB for its key and framing); see
/// [`crate::ServerLimits::max_frame_bytes`].
pub const DEFAULT_MAX_FRAME_BYTES: usize = (16 << 20) + (64 << 10);

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
