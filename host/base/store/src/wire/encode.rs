//! Encoding request and response bodies, and writing a values reply
//! straight from the stored values.

use std::io::{self, Write};

use super::message::{MAGIC, Request, Response, WireError, op};

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
