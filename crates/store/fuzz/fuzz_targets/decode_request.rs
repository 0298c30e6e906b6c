//! Fuzzes the server's request decoder: it must never panic, and whatever
//! it accepts must survive an encode/decode round trip unchanged.

#![no_main]

use intranode_store::wire::{decode_request, encode_request};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    if let Ok(req) = decode_request(body) {
        let again = encode_request(&req).expect("a decoded request re-encodes");
        assert_eq!(again, body, "encoding is canonical");
        assert_eq!(decode_request(&again).as_ref(), Ok(&req));
    }
});
