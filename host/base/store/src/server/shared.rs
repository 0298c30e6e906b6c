//! What the acceptor and every client thread share: the table, the limits,
//! the buffer budget, the registry of clients and the refusal log.

use std::collections::HashMap;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use super::budget::Budget;
use super::refusal_log::RefusalLog;
use crate::hash::MemTable;
use crate::limits::ServerLimits;
use crate::wire::DecodeLimits;

#[derive(Debug, Default)]
pub(super) struct Clients {
    pub(super) next_id: u64,
    /// The live client sockets, shared with their threads (one descriptor
    /// each), so shutdown can unblock their reads. Its length is the
    /// number of connections served.
    pub(super) streams: HashMap<u64, Arc<TcpStream>>,
    pub(super) threads: Vec<JoinHandle<()>>,
}

#[derive(Debug)]
pub(super) struct Shared {
    pub(super) table: MemTable,
    pub(super) limits: ServerLimits,
    pub(super) token: Option<String>,
    pub(super) budget: Budget,
    pub(super) shutting_down: AtomicBool,
    pub(super) clients: Mutex<Clients>,
    /// Threads now refusing connections over the cap.
    pub(super) refusers: AtomicUsize,
    /// NOTE [refusal log].
    pub(super) refusal_log: RefusalLog,
}

impl Shared {
    pub(super) fn clients(&self) -> MutexGuard<'_, Clients> {
        // Registry updates cannot panic half-way; a poisoned lock is fine.
        self.clients.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn is_shutting_down(&self) -> bool {
        // Acquire pairs with the Release store in `shutdown`.
        self.shutting_down.load(Ordering::Acquire)
    }

    pub(super) fn decode_limits(&self) -> DecodeLimits {
        DecodeLimits {
            max_items: self.limits.max_keys_per_request,
            max_key_bytes: self.limits.max_key_bytes,
            max_value_bytes: self.limits.max_value_bytes,
        }
    }
}
