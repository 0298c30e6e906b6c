//! Fuzzes the client's response decoder: it must never panic.

#![no_main]

use intranode_store::wire::decode_response;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    let _ = decode_response(body);
});
