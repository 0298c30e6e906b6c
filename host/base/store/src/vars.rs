//! The environment variables this crate reads: the token that server and
//! clients share, and the clients' timeouts.

/// Environment variable holding the shared secret of server and clients.
pub const TOKEN_ENV: &str = "INTRANODE_STORE_TOKEN";

/// Bound of every blocking store operation and of connecting, in
/// milliseconds (default [`crate::DEFAULT_TIMEOUT`]): how long a rank waits
/// for a peer that never arrives before the collective names it as missing.
pub const STORE_TIMEOUT_ENV: &str = "INTRANODE_STORE_TIMEOUT_MS";

/// How long a server that accepted the connection has to answer the hello,
/// in milliseconds (default [`crate::DEFAULT_HANDSHAKE_TIMEOUT`]).
pub const HANDSHAKE_TIMEOUT_ENV: &str = "INTRANODE_STORE_HANDSHAKE_TIMEOUT_MS";
