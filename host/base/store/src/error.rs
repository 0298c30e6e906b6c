//! [`StoreError`]: the one error type of this crate.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use crate::wire::WireError;

impl std::fmt::Debug for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The messages already carry their sources' text.
        write!(f, "{self}")
    }
}

/// Everything that can go wrong in a store, a server or an exchange.
///
/// Each variant carries the context needed to act on it without a debugger:
/// the keys waited for, the address that could not be reached, the rank
/// whose value would not decode. `Debug` prints the message (which holds its
/// causes), so `main` returning this error reads like the message.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A blocking `get`/`wait`/`multi_get` gave up.
    #[error("timed out after {} ms waiting for keys {keys:?}", waited.as_millis())]
    Timeout {
        /// The keys waited for (all of them, present or not).
        keys: Vec<String>,
        /// How long the caller waited.
        waited: Duration,
    },

    /// The client could not reach the server before its connect timeout.
    #[error("could not connect to store at {addr} within {} ms: {source}", waited.as_millis())]
    Connect {
        /// The address as the caller gave it.
        addr: String,
        /// How long the client kept retrying.
        waited: Duration,
        /// The last connect error seen.
        #[source]
        source: io::Error,
    },

    /// The server refused the handshake (wrong token, wrong version).
    #[error("store at {addr} refused the handshake: {reason}")]
    Handshake {
        /// The server address.
        addr: String,
        /// The reason the server gave.
        reason: String,
    },

    /// The server accepted the connection but did not answer the hello in
    /// time: not an intranode store, or a hung one.
    #[error(
        "store at {addr} accepted the connection but did not answer the hello within {} ms \
         (handshake timeout, {}): is another kind of server listening there?",
        waited.as_millis(),
        crate::vars::HANDSHAKE_TIMEOUT_ENV
    )]
    Silent {
        /// The server address.
        addr: String,
        /// How long the client waited for the answer.
        waited: Duration,
    },

    /// Reading from or writing to the server failed after connecting.
    #[error("i/o error with store at {addr} during {op}: {source}")]
    Io {
        /// The server address.
        addr: String,
        /// The operation in flight (`"set"`, `"handshake"`, ...).
        op: &'static str,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// The server (or client) got bytes it could not parse.
    #[error("protocol error with store at {addr} during {op}: {source}")]
    Protocol {
        /// The peer address.
        addr: String,
        /// The operation in flight.
        op: &'static str,
        /// What was wrong with the bytes (boxed: it is large, and every
        /// `Result` of the store and the library above it carries this
        /// error).
        #[source]
        source: Box<WireError>,
    },

    /// The server answered a request with an error.
    #[error("store at {addr} rejected {op}: {message}")]
    Server {
        /// The server address.
        addr: String,
        /// The operation that was rejected.
        op: &'static str,
        /// The server's message.
        message: String,
    },

    /// An earlier I/O error left the connection unusable.
    #[error(
        "connection to store at {addr} is broken by an earlier error; reconnect failed: {source}"
    )]
    Broken {
        /// The server address.
        addr: String,
        /// Why reconnecting failed.
        #[source]
        source: Box<StoreError>,
    },

    /// The server could not bind its listening socket.
    #[error("store server could not bind {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// `add` found a value that is not a decimal `i64`.
    #[error("key {key:?} holds {bytes} bytes that are not a decimal i64 counter")]
    NotACounter {
        /// The key.
        key: String,
        /// Length of the value found.
        bytes: usize,
    },

    /// `add` would overflow `i64`.
    #[error("adding {delta} to counter {key:?} (now {current}) overflows i64")]
    CounterOverflow {
        /// The key.
        key: String,
        /// The value before the add.
        current: i64,
        /// The amount added.
        delta: i64,
    },

    /// `multi_set` got different numbers of keys and values.
    #[error("multi_set got {keys} keys but {values} values")]
    LengthMismatch {
        /// Number of keys.
        keys: usize,
        /// Number of values.
        values: usize,
    },

    /// An exchange was called with `world == 0`.
    #[error("world size must be at least 1, got 0")]
    EmptyWorld,

    /// An exchange was called with a rank (or root) outside the world.
    #[error("{what} {rank} is out of range for world size {world}")]
    RankOutOfRange {
        /// `"rank"` or `"root"`.
        what: &'static str,
        /// The offending rank.
        rank: usize,
        /// The world size.
        world: usize,
    },

    /// `broadcast` was called on the root without a value.
    #[error("broadcast root {root} passed no value")]
    MissingRootValue {
        /// The root rank.
        root: usize,
    },

    // NOTE [one group per prefix] in `exchange.rs`.
    /// An exchange's key holds another group's contribution: two groups
    /// of ranks use one store under the same prefix.
    #[error(
        "exchange key {key:?} (rank {rank} of a world of {world}) was written by another group ({theirs}); two groups share this exchange's prefix on one store: give each group a prefix of its own (intranode: INTRANODE_GROUP=<name> on every rank of the group; or a PrefixStore per group)"
    )]
    ForeignContribution {
        /// The key (the exchange's prefix, the call's number, the rank).
        key: String,
        /// The rank the key belongs to.
        rank: u32,
        /// The world this rank expects.
        world: u32,
        /// What the other writer said of itself (process, world).
        theirs: String,
    },

    /// A value could not be serialized for an exchange.
    #[error("could not encode the value of rank {rank} for exchange {key:?}: {source}")]
    Encode {
        /// The key it was meant for.
        key: String,
        /// The rank encoding it.
        rank: usize,
        /// The bincode error.
        #[source]
        source: bincode::error::EncodeError,
    },

    /// A value read in an exchange did not deserialize.
    #[error("could not decode the value of rank {rank} from key {key:?} ({bytes} bytes): {source}")]
    Decode {
        /// The key it came from.
        key: String,
        /// The rank that wrote it.
        rank: usize,
        /// Its length.
        bytes: usize,
        /// The bincode error.
        #[source]
        source: bincode::error::DecodeError,
    },

    /// A collective exchange gave up waiting for some ranks' contributions:
    /// those ranks died, hang, or call a different collective.
    #[error(
        "{op} {base:?} timed out after {} ms: rank(s) {missing:?} of world size {world} never arrived (dead, hung, or in another collective)",
        waited.as_millis()
    )]
    MissingRanks {
        /// `"all_gather"`, `"broadcast"` or `"barrier"`.
        op: &'static str,
        /// The exchange's key base (`prefix/seq`).
        base: String,
        /// The ranks whose keys never appeared, ascending.
        missing: Vec<usize>,
        /// The world size of the exchange.
        world: usize,
        /// How long the caller waited.
        waited: Duration,
    },

    /// A store setting from the environment has a value it cannot mean.
    #[error("{var}={value:?}: expected {expected}")]
    Config {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What would have been accepted.
        expected: &'static str,
    },

    /// The server is shutting down and dropped the request.
    #[error("store is shutting down")]
    Closed,

    /// The store token in the environment is unusable. The message names
    /// the variable but never shows the value: it is a secret.
    #[error("{var} {reason}")]
    BadToken {
        /// The variable ([`crate::TOKEN_ENV`]).
        var: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// A [`crate::ServerLimits`] that cannot be honoured.
    #[error("invalid store server limits: {reason}")]
    InvalidLimits {
        /// Which limit and why.
        reason: String,
    },

    /// A write would make a value larger than the server's limit.
    #[error(
        "{what} of {bytes} bytes for key {key:?} exceeds the limit of {max_bytes} bytes (max_value_bytes)"
    )]
    ValueTooLarge {
        /// `"value"` or `"appended value"`.
        what: &'static str,
        /// The key.
        key: String,
        /// Size the value would have.
        bytes: usize,
        /// The limit.
        max_bytes: usize,
    },

    /// A write would take the table past its limit on stored bytes.
    #[error(
        "store is full: {op} needs {needed_bytes} more bytes, {stored_bytes} of {max_bytes} are used (max_stored_bytes)"
    )]
    StoreFull {
        /// The operation refused.
        op: &'static str,
        /// Bytes the write would add.
        needed_bytes: usize,
        /// Bytes stored now.
        stored_bytes: usize,
        /// The limit.
        max_bytes: usize,
    },

    /// The launcher's variables name no store this rank can join.
    #[error("no rendezvous store for this rank: {source}")]
    Env {
        /// What is missing or wrong.
        #[source]
        source: Box<intranode_dist_env::DistEnvError>,
    },
}
#[cfg(test)]
mod size_tests {
    /// Every `Result` of the store, and of the host crate that wraps this
    /// error, carries it: keep it at the 88 bytes it had before the
    /// limits came (at 96, the host's error reached 128 bytes and
    /// clippy's `result_large_err` failed the build).
    #[test]
    fn store_error_stays_small() {
        let bytes = std::mem::size_of::<super::StoreError>();
        assert!(bytes <= 88, "StoreError takes {bytes} bytes");
    }
}
