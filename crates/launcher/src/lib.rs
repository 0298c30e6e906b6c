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
mod error;
mod exit;
mod leftovers;
pub mod mps;
pub mod output;
pub mod rank_env;
pub mod supervise;

pub use cli::{Args, JobConfig};
pub use error::LaunchError;
pub use supervise::{Outcome, RankExit, Report};

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
