//! Unix-socket channel that passes file descriptors between the ranks of one
//! job on one host.
//!
//! This is the Rust counterpart of the `IpcChannel` in PyTorch's
//! `CUDASymmetricMemoryUtils`: symmetric memory exports each rank's CUDA VMM
//! allocation as a POSIX file descriptor (`cuMemExportToShareableHandle`),
//! and the peers need that descriptor in their own process to import and map
//! it. A descriptor can only cross a process boundary as `SCM_RIGHTS`
//! ancillary data on a Unix-domain socket, so every rank binds one
//! [`IpcChannel`] and the ranks exchange descriptors with
//! [`IpcChannel::send_fd`] / [`IpcChannel::recv_fd`] (point to point) or the
//! collectives [`IpcChannel::all_gather_fds`] and
//! [`IpcChannel::broadcast_fds`].
//!
//! Main types: [`IpcChannel`] (one rank's end of a job's channel) and
//! [`IpcError`] (every failure, naming our rank and the peer or path).
//! `intranode`'s symmetric memory passes its blocks' descriptors with it.
//!
//! Architecture Invariant: this crate knows nothing of CUDA; it moves
//! descriptors between processes and does not look at what they are.
//!
//! Where the parts live: `channel.rs` binds the socket and keeps rounds
//! and inboxes, `channel/datagram.rs` sends and receives one checked
//! datagram, `wire.rs` is the header format, `socket_dir.rs` the private
//! directory and stale socket files.
//!
//! # Design
//!
//! - **Socket.** One `SOCK_DGRAM` Unix socket per rank, bound at
//!   `<dir>/<job_id>-<rank>.sock`. Datagrams keep message boundaries and need
//!   no connection set-up, so any rank can send to any other as soon as the
//!   peer has bound its path; a send to a peer that has not bound yet
//!   (`ENOENT`, `ECONNREFUSED`) or whose queue is full (`EAGAIN`) is retried
//!   until the channel's timeout.
//! - **Private directory.** `dir` is created with mode 0700 when absent and
//!   refused when it exists but belongs to another user or is reachable by
//!   group or others: nobody else may bind or connect there. Each socket
//!   file is made 0600 as well. The default directory has a predictable
//!   name that anyone can take first; when it is refused, the job binds in
//!   a directory of its own beside it instead, chosen by one rank with
//!   [`IpcChannel::job_dir`] and published with the job id. Socket files
//!   that no live socket holds (killed jobs) are removed when a channel
//!   binds; one at our path that a live process still holds is an error
//!   ([`IpcError::SocketInUse`]), as it means two channels claim the same
//!   job id and rank.
// NOTE [hijacked socket directory] in `socket_dir.rs`.
//! - **Who may send.** The socket has `SO_PASSCRED`, so the kernel attaches
//!   the sender's pid and uid (`SCM_CREDENTIALS`) to every datagram. A
//!   message is accepted only when that uid is ours and, once the caller has
//!   exchanged pids through the store and called
//!   [`IpcChannel::set_allowed_pids`], the pid is one of the job's. The
//!   sender's bound address must also be the socket path of the rank it
//!   claims to be. Anything else is rejected with [`IpcError::Rejected`], and
//!   every descriptor that came with it is closed.
//! - **Rounds.** Messages from different ranks and different collective
//!   rounds can arrive in any order (a fast rank may already be in round
//!   `r + 1` while we are still in round `r`). Each datagram therefore starts
//!   with a fixed header: magic, kind (`send_fd`, `all_gather_fds`,
//!   `broadcast_fds`), source rank, world size and a sequence number.
//!   Collectives number their rounds with one counter that advances on every
//!   rank in the same order (all ranks call the same collectives in the same
//!   order, as with any collective API); messages for a later round, and
//!   point-to-point messages that arrive during a collective (or the other
//!   way round), are buffered until asked for.
// NOTE [round numbering] in `channel.rs`.
//!
//! After an error inside a collective the rounds of this channel may be out
//! of step with its peers': drop the channel (and, in practice, the job).
//!
//! # Example
//!
//! ```no_run
//! use std::os::fd::AsFd;
//! use std::time::Duration;
//! use intranode_ipc::IpcChannel;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let (rank, world) = (0, 4);
//! // Rank 0 chooses the directory and publishes it with the job id.
//! let dir = IpcChannel::job_dir("job-1234");
//! let mut channel = IpcChannel::new(
//!     &dir,
//!     "job-1234",
//!     rank,
//!     world,
//!     Duration::from_secs(30),
//! )?;
//! let file = std::fs::File::open("/dev/null")?;
//! // Index = rank; our own entry is a duplicate of `file`'s descriptor.
//! let fds = channel.all_gather_fds(file.as_fd())?;
//! assert_eq!(fds.len(), world);
//! # Ok(())
//! # }
//! ```

// Every public item is documented; CI keeps it so (`cargo xtask doc`).
#![deny(missing_docs)]

mod channel;
mod error;
mod socket_dir;
mod wire;

pub use channel::IpcChannel;
pub use error::IpcError;
pub use wire::{MAX_PAYLOAD_BYTES, MAX_WORLD};
