//! The one error type of this crate.

use std::io;
use std::path::PathBuf;

/// Errors of [`IpcChannel`](crate::IpcChannel). Each one names our rank
/// and, where there is one, the peer and the socket path involved.
#[derive(Debug, thiserror::Error)]
pub enum IpcError {
    /// A caller-supplied value is out of range.
    #[error("rank {rank}: invalid argument: {detail}")]
    InvalidArgument {
        /// Our rank.
        rank: usize,
        /// What was wrong.
        detail: String,
    },
    /// The socket directory exists but is not private to us.
    #[error("rank {rank}: socket directory {path} is not private: {reason}")]
    InsecureDir {
        /// Our rank.
        rank: usize,
        /// The directory.
        path: PathBuf,
        /// Why it was refused.
        reason: String,
    },
    /// A local system call failed.
    #[error("rank {rank}: {op} {path}: {source}")]
    Io {
        /// Our rank.
        rank: usize,
        /// The operation (`bind`, `recvmsg`, ...).
        op: &'static str,
        /// The path involved (our socket, or the directory).
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// Our socket path is bound by a live socket: another channel with the
    /// same job id and rank exists.
    #[error(
        "rank {rank}: socket {path} is bound by a live process \
         (another channel with the same job id and rank?)"
    )]
    SocketInUse {
        /// Our rank.
        rank: usize,
        /// The socket path.
        path: PathBuf,
    },
    /// Sending to a peer failed for a reason that retrying cannot fix.
    #[error("rank {rank}: sending to rank {peer} at {path}: {source}")]
    Send {
        /// Our rank.
        rank: usize,
        /// The destination rank.
        peer: usize,
        /// The destination's socket path.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The channel's timeout expired.
    #[error("rank {rank}: timed out after {timeout_ms} ms waiting for {waiting_for}")]
    Timeout {
        /// Our rank.
        rank: usize,
        /// The timeout that expired, in milliseconds.
        timeout_ms: u128,
        /// What we were waiting for (which ranks, which round).
        waiting_for: String,
    },
    /// A message failed the sender checks; its descriptors were closed.
    #[error("rank {rank}: rejected a message on {path} from {sender}: {reason}")]
    Rejected {
        /// Our rank.
        rank: usize,
        /// Our socket path.
        path: PathBuf,
        /// Who sent it, as far as known (pid, uid, claimed rank).
        sender: String,
        /// Which check failed.
        reason: String,
    },
    /// A peer's messages do not fit the collective we are running (it called
    /// a different collective, or messages were lost or duplicated).
    #[error("rank {rank}: protocol mismatch with rank {peer}: {detail}")]
    Protocol {
        /// Our rank.
        rank: usize,
        /// The peer.
        peer: usize,
        /// What did not match.
        detail: String,
    },
}
