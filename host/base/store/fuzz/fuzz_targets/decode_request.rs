//! Fuzzes the server's request decoder: it must never panic, whatever it
//! accepts must survive an encode/decode round trip unchanged, and the
//! limited decoder the server runs must agree with the plain one whenever
//! it accepts.

#![no_main]

use intranode_store::wire::{
    DecodeLimits, WireError, decode_request, decode_request_limited, encode_request,
};
use libfuzzer_sys::fuzz_target;

/// Small enough that the fuzzer's inputs reach every limit.
const LIMITS: DecodeLimits = DecodeLimits {
    max_items: 3,
    max_key_bytes: 8,
    max_value_bytes: 16,
};

fuzz_target!(|body: &[u8]| {
    let plain = decode_request(body);
    if let Ok(req) = &plain {
        let again = encode_request(req).expect("a decoded request re-encodes");
        assert_eq!(again, body, "encoding is canonical");
        assert_eq!(decode_request(&again).as_ref(), Ok(req));
    }
    match decode_request_limited(body, &LIMITS) {
        Ok(req) => assert_eq!(plain.as_ref(), Ok(&req), "limits only refuse"),
        // Over a limit, the body is still well formed up to that point;
        // the plain decoder may accept it or fail later in the body.
        Err(WireError::OverLimit { .. }) => {}
        Err(e) => assert!(plain.is_err(), "limited decoder refused a valid body: {e}"),
    }
});
