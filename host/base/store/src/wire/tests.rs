//! Unit tests of the protocol's encoding and decoding: round trips, truncation,
//! limits, frames.

use std::io;

use super::message::op;
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
