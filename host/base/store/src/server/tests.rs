//! Unit tests of the server's token check, config and shutdown.

use super::connection::token_matches;
use super::*;

#[test]
fn token_compare() {
    assert!(token_matches(b"abc", b"abc"));
    assert!(!token_matches(b"abc", b"abd"));
    assert!(!token_matches(b"abc", b"ab"));
    assert!(token_matches(b"", b""));
}

#[test]
fn debug_redacts_token() {
    let cfg = ServerConfig {
        token: Some("hunter2".into()),
        ..ServerConfig::default()
    };
    let s = format!("{cfg:?}");
    assert!(!s.contains("hunter2"), "{s}");
    assert!(s.contains("redacted"));
}

#[test]
fn drop_without_clients_returns() {
    let server = TcpStoreServer::bind(ServerConfig::default()).unwrap();
    assert!(server.local_addr().ip().is_loopback());
    assert_ne!(server.local_addr().port(), 0);
    drop(server);
}
