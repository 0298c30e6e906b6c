//! Key-value store for rendezvous (work in progress).
