//! `intranode-run`: start the ranks of one node, torchrun style, and supervise them.
//!
//! The launcher hosts the rendezvous store ([`intranode_store::TcpStoreServer`]),
//! starts `--nproc-per-node` copies of a command with the torchrun variables
//! set ([`rank_env`]), prefixes every line they print with `[rank]`
//! ([`output`]), and stops the whole job as soon as one rank fails, the
//! timeout passes or the launcher itself gets a signal that would end it
//! (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM:
//! [`supervise`]).
//!
//! Main types: [`cli::Args`] (the command line), [`JobConfig`] (validated
//! job), [`Report`] (what happened, with the summary and exit code).
//!
//! Architecture Invariant: every rank runs in a process group of its own,
//! so that a signal to the group reaches the rank and everything it
//! started, and a Ctrl-C at the terminal reaches only the launcher, which
//! decides what the ranks get. When the job ends, however it ends, every
//! group is emptied: what a rank left running is stopped and reported.
// NOTE [leftover processes] in `leftovers.rs` and `supervise.rs`.
#![deny(missing_docs)]

pub mod cli;
mod exit;
mod leftovers;
pub mod mps;
pub mod output;
pub mod rank_env;
pub mod supervise;

use std::io;

pub use cli::{Args, JobConfig};
pub use supervise::{Outcome, RankExit, Report};

/// Everything that keeps the launcher from running a job at all.
///
/// A rank that fails to start or exits non-zero is not an error here: it is
/// an [`Outcome`] in the [`Report`].
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// `--nproc-per-node 0`.
    #[error("--nproc-per-node must be at least 1")]
    NoRanks,
    /// `--nproc-per-node` is neither a number nor `gpu` or `auto`.
    #[error("--nproc-per-node {value:?} is not a number of ranks, `gpu` or `auto`")]
    BadNproc {
        /// The value given.
        value: String,
    },
    /// `--nproc-per-node gpu`, but NVML could not count the GPUs.
    #[error(
        "--nproc-per-node gpu: cannot count the GPUs ({why}); give the number of ranks instead"
    )]
    CannotCountGpus {
        /// NVML's error.
        why: String,
    },
    /// `--nproc-per-node gpu`, but no GPU is visible to this process.
    #[error("--nproc-per-node gpu: no GPU is visible (CUDA_VISIBLE_DEVICES, NVML)")]
    NoGpus,
    /// A multi-node option (`--nnodes` over 1, a `--node-rank` over 0).
    #[error("{what} {value}: intranode-run starts the ranks of one node only")]
    MultiNode {
        /// The option.
        what: &'static str,
        /// Its value.
        value: String,
    },
    /// More ranks than one node can hold.
    #[error("--nproc-per-node {nproc} is over the limit of {max} ranks on one node")]
    TooManyRanks {
        /// Ranks asked for.
        nproc: usize,
        /// The most the launcher starts.
        max: usize,
    },
    /// `--gpus` names another number of GPUs than there are ranks.
    #[error("--gpus lists {gpus} GPUs but --nproc-per-node is {nproc}: give one GPU per rank")]
    GpuCountMismatch {
        /// GPUs listed.
        gpus: usize,
        /// Ranks asked for.
        nproc: usize,
    },
    /// A duration option that is not a finite, non-negative number of
    /// seconds.
    #[error("--{name} must be a finite number of seconds >= 0, got {value:?}")]
    BadSeconds {
        /// The option, without its dashes.
        name: &'static str,
        /// The value given.
        value: String,
    },
    /// A duration option longer than a year.
    #[error("--{name} {value} is more than a year ({max_secs} s), which is surely a mistake")]
    SecondsTooLarge {
        /// The option, without its dashes.
        name: &'static str,
        /// The value given.
        value: String,
        /// The longest accepted, in seconds.
        max_secs: u64,
    },
    /// `--timeout 0`.
    #[error("--timeout must be greater than 0 s")]
    ZeroTimeout,
    /// `--master-addr` does not resolve to an address.
    #[error("cannot resolve --master-addr {addr:?}")]
    MasterAddr {
        /// The address given.
        addr: String,
        /// The resolver's error.
        #[source]
        source: io::Error,
    },
    /// The job's key-value store could not start (the port taken, say).
    #[error("cannot start the rendezvous store (--master-addr {addr}, --master-port {port})")]
    Store {
        /// The address it was to listen on.
        addr: String,
        /// The port it was to listen on.
        port: u16,
        /// The store's error.
        #[source]
        source: intranode_store::StoreError,
    },
    /// The launcher's signal handlers could not be installed.
    #[error(
        "cannot install the signal handlers (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGCHLD)"
    )]
    Signals(#[source] io::Error),
    /// The thread that handles signals could not start.
    #[error("cannot start the signal-handling thread")]
    SignalThread(#[source] io::Error),
    /// Every thread waiting on a rank ended while ranks were still
    /// running: the launcher can no longer tell when they exit.
    #[error("all rank waiters stopped while {running} ranks were still running")]
    WaitersGone {
        /// Ranks still running.
        running: usize,
    },
}

/// Runs one job: hosts the store, starts the ranks and supervises them.
///
/// The store server lives until every rank has exited (it is dropped on
/// return), so ranks can use it until their last instruction.
pub fn launch(job: &JobConfig) -> Result<Report, LaunchError> {
    let token = new_token();
    let defaults = intranode_store::ServerLimits::default();
    let server = intranode_store::TcpStoreServer::bind(intranode_store::ServerConfig {
        addr: job.bind_ip,
        port: job.master_port,
        token: Some(token.clone()),
        limits: intranode_store::ServerLimits {
            // Room for a few connections per rank however many ranks run;
            // each costs one descriptor (see docs/SECURITY.md on `ulimit -n`
            // for very large jobs).
            max_connections: defaults
                .max_connections
                .max(job.nproc.saturating_mul(4).saturating_add(16)),
            ..defaults
        },
    })
    .map_err(|source| LaunchError::Store {
        addr: job.master_addr.clone(),
        port: job.master_port,
        source,
    })?;
    let port = server.local_addr().port();
    let report = supervise::run_ranks(job, port, &token);
    drop(server);
    report
}

/// A fresh secret for the store of one job, 128 random bits as hex.
///
/// `rand::rng()` is a CSPRNG seeded from the operating system, so the token
/// cannot be guessed by another user's process on the same machine.
pub fn new_token() -> String {
    let bytes: [u8; 16] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_hex_and_differ() {
        let a = new_token();
        let b = new_token();
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
