//! A c10d-style key-value store for rendezvous, and typed exchanges on top.
//!
//! - [`Store`]: the object-safe trait with the c10d operations (`set`,
//!   blocking `get`, `add`, `compare_set`, `wait`, `multi_get`, ...), each
//!   blocking one bounded by a timeout (300 s by default;
//!   [`STORE_TIMEOUT_ENV`] for clients built with [`ClientConfig::from_env`]).
//! - [`HashStore`]: in-process, for threads and tests.
//! - [`PrefixStore`]: a `prefix/` namespace inside another store.
//! - [`TcpStoreServer`] and [`TcpStore`]: a server (thread per client,
//!   blocking reads parked server-side) and its client, speaking the
//!   versioned, length-prefixed protocol of [`wire`], optionally guarded by
//!   a shared token ([`TOKEN_ENV`]). The server's memory stays within the
//!   bounds of [`ServerLimits`] whatever its clients send
//!   (`docs/SECURITY.md` for the threat model). Every client call has one
//!   deadline, its reconnect included, and a parked call past it ends with
//!   its own [`StoreError::Timeout`].
// NOTE [memory budget] in `limits.rs`; NOTE [late replies] in
// `client/connection.rs`.
//! - [`TorchStore`]: a client of PyTorch's `TCPStore` (speaking its wire
//!   protocol, described in [`torch`]), for ranks started by torchrun.
//! - [`connect_env`]: the store of this rank's job, [`TcpStore`] or
//!   [`TorchStore`] as `intranode_dist_env` decides.
// NOTE [store protocol decision] in `intranode_dist_env`.
//! - [`StoreExchange`]: `all_gather`, `broadcast` and `barrier` of
//!   serde values (bincode 2), cleaning up their keys as they go; a rank
//!   that never arrives is named ([`StoreError::MissingRanks`]).
//! - [`StoreError`]: the one error type.
//!
//! Architecture Invariant: this crate knows nothing of CUDA; it only moves
//! bytes between processes. It reads the launcher's variables only through
//! `intranode_dist_env`.
//!
//! ```
//! use intranode_store::{ClientConfig, ServerConfig, Store, StoreExchange, TcpStore, TcpStoreServer};
//!
//! # fn main() -> Result<(), intranode_store::StoreError> {
//! let server = TcpStoreServer::bind(ServerConfig::default())?;
//! let store = TcpStore::connect(server.local_addr(), ClientConfig::default())?;
//! store.set("greeting", b"hello")?;
//! assert_eq!(store.get("greeting")?, b"hello");
//! assert_eq!(store.add("counter", 2)?, 2);
//!
//! let mut exchange = StoreExchange::new("demo");
//! let all: Vec<u32> = exchange.all_gather(&store, 0, 1, &7)?;
//! assert_eq!(all, [7]);
//! # Ok(())
//! # }
//! ```

// Every public item is documented; CI keeps it so (`cargo xtask doc`).
#![deny(missing_docs)]

mod client;
mod connect;
mod error;
mod exchange;
mod hash;
mod limits;
mod malloc;
mod prefix;
mod server;
mod store;
pub mod torch;
mod vars;
pub mod wire;

pub use client::{ClientConfig, DEFAULT_HANDSHAKE_TIMEOUT, DEFAULT_MAX_REPLY_BYTES, TcpStore};
pub use connect::{connect, connect_env};
pub use error::StoreError;
pub use exchange::StoreExchange;
pub use hash::HashStore;
pub use limits::{ENTRY_OVERHEAD_BYTES, ServerLimits};
pub use prefix::PrefixStore;
pub use server::{ServerConfig, TcpStoreServer};
pub use store::{DEFAULT_TIMEOUT, Store};
pub use torch::TorchStore;
pub use vars::{HANDSHAKE_TIMEOUT_ENV, STORE_TIMEOUT_ENV, TOKEN_ENV};
pub use wire::WireError;
