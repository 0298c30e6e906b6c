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
// NOTE [bounded allocation] is the paragraph below.
//! The decoder never allocates more than the bytes actually present, plus a
//! fixed overhead per list item (which [`DecodeLimits::max_items`] bounds in
//! the server). Frame lengths are checked against the bound before any body
//! byte is read (`read_frame` then grows its buffer only as data arrives),
//! every length inside a body is checked against the bytes left in the body,
//! and every list count against the smallest size its items could have.
//! `decode_request` is pure, so the fuzz target in
//! `host/base/store/fuzz` exercises exactly what the server runs.

// The messages and their opcodes in `message.rs`, their bodies read in
// `decode.rs` and written in `encode.rs`, the length prefix in `frame.rs`.
mod decode;
mod encode;
mod frame;
mod message;

pub(crate) use decode::list_items;
pub use decode::{decode_request, decode_request_limited, decode_response};
pub use encode::{encode_request, encode_response};
pub(crate) use encode::{values_body_bytes, write_values_body};
pub use frame::{DEFAULT_MAX_FRAME_BYTES, FRAME_HEADER_BYTES};
pub(crate) use frame::{FrameError, read_frame, write_frame};
pub use message::{DecodeLimits, MAGIC, PROTOCOL_VERSION, Request, Response, WireError};

#[cfg(test)]
mod tests;
