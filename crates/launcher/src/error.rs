//! [`LaunchError`]: what keeps the launcher from running a job at all.

use std::io;

/// Everything that keeps the launcher from running a job at all.
///
/// A rank that fails to start or exits non-zero is not an error here: it is
/// an [`Outcome`](crate::Outcome) in the [`Report`](crate::Report).
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
