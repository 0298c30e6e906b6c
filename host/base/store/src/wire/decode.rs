//! Decoding request and response bodies, within NOTE [bounded allocation]
//! (in the [module docs](super)).

use super::message::{DecodeLimits, MAGIC, Request, Response, WireError, op};

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
/// item.
// NOTE [bounded allocation].
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
