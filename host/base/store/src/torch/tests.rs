//! Unit tests of PyTorch's protocol: query bytes, request encoding, reply
//! lengths and limits.

use std::io;

use super::protocol::*;

#[test]
fn query_bytes_are_pytorchs() {
    // The order of `QueryType` in PyTorch's TCPStoreBackend.hpp.
    for (byte, query) in [
        (0, TorchQuery::Validate),
        (1, TorchQuery::Set),
        (6, TorchQuery::Wait),
        (11, TorchQuery::MultiSet),
        (12, TorchQuery::CancelWait),
        (13, TorchQuery::Ping),
    ] {
        assert_eq!(query as u8, byte);
        assert_eq!(TorchQuery::from_byte(byte), Some(query));
    }
    assert_eq!(TorchQuery::from_byte(14), None);
}

#[test]
fn requests_encode_little_endian_with_u64_lengths() {
    let req = Request::new(TorchQuery::Add).key("k").i64(-2);
    let mut want = vec![4u8];
    want.extend_from_slice(&2u64.to_le_bytes());
    want.extend_from_slice(b"/k");
    want.extend_from_slice(&(-2i64).to_le_bytes());
    assert_eq!(req.0, want);
    let req = keys_request(TorchQuery::Check, &["a", "bc"]);
    assert_eq!(req.0[0], 5);
    assert_eq!(req.0[1..9], 2u64.to_le_bytes());
    // Each key with PyTorch's "/" before it.
    assert_eq!(req.0.len(), 1 + 8 + 8 + 2 + 8 + 3);
}

#[test]
fn garbage_lengths_fail_without_allocating() {
    let mut reply = Vec::new();
    reply.extend_from_slice(&u64::MAX.to_le_bytes());
    reply.extend_from_slice(b"abc");
    let err = read_bytes(&mut reply.as_slice()).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    assert!(err.to_string().contains("MAX_PAYLOAD_LEN"), "{err}");
    let mut reply = Vec::new();
    reply.extend_from_slice(&(TORCH_MAX_VALUE_BYTES as u64).to_le_bytes());
    reply.extend_from_slice(b"abc");
    let err = read_bytes(&mut reply.as_slice()).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    assert!(err.to_string().contains("3 bytes into"), "{err}");
}

#[test]
fn limits_are_checked_before_sending() {
    // The limit counts the "/" PyTorch's client puts before a key.
    let long = "k".repeat(TORCH_MAX_KEY_BYTES);
    let err = check_keys(&[&long]).unwrap_err();
    assert!(err.to_string().contains("MAX_STRING_LEN"), "{err}");
    check_keys(&[&long[1..]]).unwrap();
    let big = vec![0u8; TORCH_MAX_VALUE_BYTES + 1];
    let err = check_value(&big).unwrap_err();
    assert!(err.to_string().contains("MAX_PAYLOAD_LEN"), "{err}");
    check_value(&big[1..]).unwrap();
}
