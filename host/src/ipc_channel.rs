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
//!   file is made 0600 as well. A socket file
//!   left by a dead process is removed before binding; one that a live
//!   process still holds is an error ([`IpcError::SocketInUse`]), as it means
//!   two channels claim the same job id and rank.
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
//!   way round), are buffered until asked for. See `NOTE [round numbering]`.
//!
//! After an error inside a collective the rounds of this channel may be out
//! of step with its peers': drop the channel (and, in practice, the job).
//!
//! # Example
//!
//! ```no_run
//! use std::os::fd::AsFd;
//! use std::time::Duration;
//! use intranode::ipc_channel::IpcChannel;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let (rank, world) = (0, 4);
//! let mut channel = IpcChannel::new(
//!     &IpcChannel::default_dir(),
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

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::fs::{self, DirBuilder};
use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{
    self, AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType,
    SockaddrLike, UnixAddr, UnixCredentials, sockopt,
};
use nix::unistd::{geteuid, getuid};

/// Largest user payload that [`IpcChannel::send_fd`] carries next to the
/// descriptor, in bytes.
pub const MAX_PAYLOAD_BYTES: usize = 4096;

/// Largest world size a channel accepts (a sanity bound; ranks travel as
/// `u32` in the message header).
pub const MAX_WORLD: usize = 4096;

/// Longest timeout a channel keeps; longer ones are clamped to it, so that
/// `Instant::now() + timeout` can never overflow.
const MAX_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 3600);

/// How many received but not yet consumed messages a channel buffers before
/// it declares the peers out of step (each one holds an open descriptor).
const MAX_PENDING_MESSAGES: usize = 1024;

/// The kernel's limit on descriptors in one `SCM_RIGHTS` message
/// (`SCM_MAX_FD` in `include/net/scm.h`). The control buffer is sized for it
/// so that `MSG_CTRUNC` cannot hide descriptors we would then fail to close.
const SCM_MAX_FD: usize = 253;

/// Wire header of every datagram: magic, version, kind, 2 reserved bytes,
/// source rank (u32 LE), world size (u32 LE), sequence number (u64 LE).
const HEADER_BYTES: usize = 24;
const MAGIC: [u8; 4] = *b"INFD";
const WIRE_VERSION: u8 = 1;

/// Errors of [`IpcChannel`]. Each one names our rank and, where there is one,
/// the peer and the socket path involved.
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

/// What a datagram belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    PointToPoint = 1,
    AllGather = 2,
    Broadcast = 3,
}

impl Kind {
    fn from_wire(byte: u8) -> Option<Self> {
        match byte {
            1 => Some(Self::PointToPoint),
            2 => Some(Self::AllGather),
            3 => Some(Self::Broadcast),
            _ => None,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::PointToPoint => "send_fd",
            Self::AllGather => "all_gather_fds",
            Self::Broadcast => "broadcast_fds",
        })
    }
}

/// A received, validated message.
#[derive(Debug)]
struct Message {
    kind: Kind,
    src: usize,
    seq: u64,
    fd: OwnedFd,
    payload: Vec<u8>,
}

/// A rank's end of the descriptor channel of one job. See the module docs.
///
/// All methods take `&mut self`; a channel is used by one thread at a time.
#[derive(Debug)]
pub struct IpcChannel {
    rank: usize,
    world: usize,
    timeout: Duration,
    /// Our socket path (inside the canonical directory).
    path: PathBuf,
    /// The socket paths of all ranks, ours included.
    peer_paths: Vec<PathBuf>,
    /// The same as socket addresses.
    peer_addrs: Vec<UnixAddr>,
    socket: OwnedFd,
    /// (device, inode) of the socket file we bound, so that `Drop` removes
    /// the path only while it is still ours.
    bound_inode: (u64, u64),
    /// Our real uid: `SCM_CREDENTIALS` carries the sender's real uid.
    uid: u32,
    allowed_pids: Option<HashSet<i32>>,
    /// Sequence number of the next collective round.
    next_round: u64,
    /// Rounds below this number have completed; their messages are stale.
    completed_rounds: u64,
    /// Per destination: sequence number of our next `send_fd` message.
    p2p_sent: Vec<u64>,
    /// Per source: sequence number of the next `send_fd` message we expect.
    p2p_expected: Vec<u64>,
    /// `send_fd` messages not yet returned by `recv_fd`, oldest first.
    p2p_inbox: VecDeque<Message>,
    /// Collective messages not yet consumed, by (source rank, round).
    round_inbox: HashMap<(usize, u64), Message>,
}

impl IpcChannel {
    /// Binds this rank's socket at `dir/<job_id>-<rank>.sock`.
    ///
    /// `dir` is created (mode 0700, parents included) when absent, and
    /// refused when it is not a directory owned by us with no group or other
    /// permission bits. A stale socket file at our path is removed first.
    /// `timeout` bounds every later call (each send retry loop and each
    /// wait); it is clamped to one year.
    ///
    /// `job_id` may contain ASCII letters, digits, `-`, `_` and `.`; the
    /// whole socket path must fit in `sun_path` (107 bytes).
    pub fn new(
        dir: &Path,
        job_id: &str,
        rank: usize,
        world: usize,
        timeout: Duration,
    ) -> Result<Self, IpcError> {
        let invalid = |detail: String| IpcError::InvalidArgument { rank, detail };
        if world == 0 || world > MAX_WORLD {
            return Err(invalid(format!(
                "world size {world} not in 1..={MAX_WORLD}"
            )));
        }
        if rank >= world {
            return Err(invalid(format!("rank {rank} not below world size {world}")));
        }
        if job_id.is_empty()
            || !job_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        {
            return Err(invalid(format!(
                "job id {job_id:?} must be non-empty ASCII letters, digits, '-', '_' or '.'"
            )));
        }

        ensure_private_dir(dir, rank)?;
        // Every rank must name the peers' paths exactly as they bound them
        // (the sender-address check compares paths), so use one spelling.
        let dir = fs::canonicalize(dir).map_err(|source| IpcError::Io {
            rank,
            op: "canonicalize",
            path: dir.to_path_buf(),
            source,
        })?;
        let peer_paths: Vec<PathBuf> = (0..world)
            .map(|r| dir.join(format!("{job_id}-{r}.sock")))
            .collect();
        let peer_addrs = peer_paths
            .iter()
            .map(|p| {
                UnixAddr::new(p).map_err(|errno| IpcError::Io {
                    rank,
                    op: "socket address for",
                    path: p.clone(),
                    source: errno.into(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let path = peer_paths[rank].clone();

        remove_stale_socket(&path, &peer_addrs[rank], rank)?;

        let io_err = |op: &'static str, errno: Errno| IpcError::Io {
            rank,
            op,
            path: path.clone(),
            source: errno.into(),
        };
        let socket = socket::socket(
            AddressFamily::Unix,
            SockType::Datagram,
            SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
            None,
        )
        .map_err(|e| io_err("socket for", e))?;
        // Before bind: every datagram that can reach us must carry the
        // sender's credentials.
        socket::setsockopt(&socket, sockopt::PassCred, &true)
            .map_err(|e| io_err("setsockopt SO_PASSCRED on", e))?;
        match socket::bind(socket.as_raw_fd(), &peer_addrs[rank]) {
            Ok(()) => {}
            Err(Errno::EADDRINUSE) => return Err(IpcError::SocketInUse { rank, path }),
            Err(e) => return Err(io_err("bind", e)),
        }
        // The directory already keeps everyone else out; a socket file
        // writable only by us keeps them out even if it moves or the
        // directory's mode is loosened later (connecting needs write
        // permission on the file).
        if let Err(source) = fs::set_permissions(&path, fs::Permissions::from_mode(0o600)) {
            let _ = fs::remove_file(&path);
            return Err(IpcError::Io {
                rank,
                op: "chmod 0600",
                path,
                source,
            });
        }
        let bound_inode = match fs::symlink_metadata(&path) {
            Ok(meta) => (meta.dev(), meta.ino()),
            Err(source) => {
                // Best effort: do not leave a socket file nobody will remove.
                let _ = fs::remove_file(&path);
                return Err(IpcError::Io {
                    rank,
                    op: "stat bound socket",
                    path,
                    source,
                });
            }
        };

        Ok(Self {
            rank,
            world,
            timeout: timeout.min(MAX_TIMEOUT),
            path,
            peer_paths,
            peer_addrs,
            socket,
            bound_inode,
            uid: getuid().as_raw(),
            allowed_pids: None,
            next_round: 0,
            completed_rounds: 0,
            p2p_sent: vec![0; world],
            p2p_expected: vec![0; world],
            p2p_inbox: VecDeque::new(),
            round_inbox: HashMap::new(),
        })
    }

    /// The default socket directory: `$XDG_RUNTIME_DIR/intranode` when that
    /// variable holds an absolute path (a per-user 0700 tmpfs on systemd
    /// hosts), else `<temp dir>/intranode-<euid>`. All ranks of a job must
    /// resolve it to the same directory.
    pub fn default_dir() -> PathBuf {
        match std::env::var_os("XDG_RUNTIME_DIR") {
            Some(d) if Path::new(&d).is_absolute() => PathBuf::from(d).join("intranode"),
            _ => std::env::temp_dir().join(format!("intranode-{}", geteuid().as_raw())),
        }
    }

    /// Only accept messages from these process ids (in addition to the uid
    /// check). Fill it with every rank's pid, ours included, after
    /// exchanging pids through the store. Until this is called only the uid
    /// is checked.
    pub fn set_allowed_pids(&mut self, pids: Vec<i32>) {
        self.allowed_pids = Some(pids.into_iter().collect());
    }

    /// Changes the timeout of later calls (clamped to one year).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout.min(MAX_TIMEOUT);
    }

    /// Our rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks in the job.
    pub fn world(&self) -> usize {
        self.world
    }

    /// The timeout of each call.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Path of our bound socket.
    pub fn socket_path(&self) -> &Path {
        &self.path
    }

    /// Sends `fd` (as `SCM_RIGHTS`) and a small `payload` (at most
    /// [`MAX_PAYLOAD_BYTES`]) to `dst_rank`, retrying until the timeout while
    /// the peer has not bound its socket yet or its queue is full. The
    /// kernel duplicates the descriptor: the caller keeps `fd`.
    pub fn send_fd(
        &mut self,
        dst_rank: usize,
        fd: BorrowedFd<'_>,
        payload: &[u8],
    ) -> Result<(), IpcError> {
        self.check_rank(dst_rank, "dst_rank")?;
        if payload.len() > MAX_PAYLOAD_BYTES {
            return Err(IpcError::InvalidArgument {
                rank: self.rank,
                detail: format!(
                    "payload of {} bytes exceeds {MAX_PAYLOAD_BYTES} bytes",
                    payload.len()
                ),
            });
        }
        let deadline = self.deadline();
        let seq = self.p2p_sent[dst_rank];
        self.send_message(dst_rank, Kind::PointToPoint, seq, fd, payload, deadline)?;
        self.p2p_sent[dst_rank] += 1;
        Ok(())
    }

    /// Receives the oldest [`send_fd`](Self::send_fd) message from any rank:
    /// `(source rank, descriptor, payload)`. Waits at most the timeout.
    pub fn recv_fd(&mut self) -> Result<(usize, OwnedFd, Vec<u8>), IpcError> {
        let deadline = self.deadline();
        loop {
            if let Some(m) = self.p2p_inbox.pop_front() {
                return Ok((m.src, m.fd, m.payload));
            }
            let m = self.recv_until(deadline, || "a send_fd message from any rank".into())?;
            self.stash(m)?;
        }
    }

    /// Every rank contributes `fd`; returns one descriptor per rank, index =
    /// rank. Our own entry is a duplicate of `fd`.
    pub fn all_gather_fds(&mut self, fd: BorrowedFd<'_>) -> Result<Vec<OwnedFd>, IpcError> {
        let round = self.begin_round();
        let deadline = self.deadline();
        let own = self.dup(fd)?;
        // Start with the next rank up so that not every rank sends to rank 0
        // first.
        for step in 1..self.world {
            let peer = (self.rank + step) % self.world;
            self.send_message(peer, Kind::AllGather, round, fd, &[], deadline)?;
        }
        let sources = (0..self.world).filter(|&r| r != self.rank).collect();
        let mut fds = self.collect_round(Kind::AllGather, round, sources, deadline)?;
        fds.push((self.rank, own));
        fds.sort_by_key(|&(src, _)| src);
        self.completed_rounds = round + 1;
        Ok(fds.into_iter().map(|(_, fd)| fd).collect())
    }

    /// Rank `root` passes `Some(fd)`; every rank gets a descriptor for it
    /// (the root a duplicate of its own). Other ranks' `fd` is ignored.
    pub fn broadcast_fds(
        &mut self,
        root: usize,
        fd: Option<BorrowedFd<'_>>,
    ) -> Result<OwnedFd, IpcError> {
        self.check_rank(root, "root")?;
        let round = self.begin_round();
        let deadline = self.deadline();
        if root == self.rank {
            let fd = fd.ok_or_else(|| IpcError::InvalidArgument {
                rank: self.rank,
                detail: format!("broadcast_fds round {round}: the root must pass a descriptor"),
            })?;
            let own = self.dup(fd)?;
            for step in 1..self.world {
                let peer = (self.rank + step) % self.world;
                self.send_message(peer, Kind::Broadcast, round, fd, &[], deadline)?;
            }
            self.completed_rounds = round + 1;
            return Ok(own);
        }
        let received = self.collect_round(Kind::Broadcast, round, vec![root], deadline)?;
        let fd = received
            .into_iter()
            .next()
            .map(|(_, fd)| fd)
            .ok_or_else(|| IpcError::Protocol {
                rank: self.rank,
                peer: root,
                detail: format!("broadcast_fds round {round}: no descriptor collected"),
            })?;
        self.completed_rounds = round + 1;
        Ok(fd)
    }

    // NOTE [round numbering]: every collective takes the next round number
    // when it starts, on every rank, so the k-th collective call of each rank
    // carries round k-1 in its messages. That only holds while all ranks call
    // the same collectives in the same order, which is the contract of any
    // collective API; a peer that called another collective for the same
    // round is reported as `IpcError::Protocol`. Point-to-point messages
    // have their own per-(source, destination) numbering and never consume a
    // round.
    fn begin_round(&mut self) -> u64 {
        let round = self.next_round;
        self.next_round += 1;
        round
    }

    fn deadline(&self) -> Instant {
        let now = Instant::now();
        // `timeout` is clamped to MAX_TIMEOUT, so this does not overflow.
        now.checked_add(self.timeout).unwrap_or(now)
    }

    fn check_rank(&self, r: usize, what: &str) -> Result<(), IpcError> {
        if r < self.world {
            Ok(())
        } else {
            Err(IpcError::InvalidArgument {
                rank: self.rank,
                detail: format!("{what} {r} not below world size {}", self.world),
            })
        }
    }

    fn dup(&self, fd: BorrowedFd<'_>) -> Result<OwnedFd, IpcError> {
        fd.try_clone_to_owned().map_err(|source| IpcError::Io {
            rank: self.rank,
            op: "dup descriptor for",
            path: self.path.clone(),
            source,
        })
    }

    fn timeout_error(&self, waiting_for: String) -> IpcError {
        IpcError::Timeout {
            rank: self.rank,
            timeout_ms: self.timeout.as_millis(),
            waiting_for,
        }
    }

    /// Sends one datagram, retrying transient failures until `deadline`.
    fn send_message(
        &mut self,
        peer: usize,
        kind: Kind,
        seq: u64,
        fd: BorrowedFd<'_>,
        payload: &[u8],
        deadline: Instant,
    ) -> Result<(), IpcError> {
        let header = encode_header(kind, self.rank, self.world, seq);
        let iov = [IoSlice::new(&header), IoSlice::new(payload)];
        let fds = [fd.as_raw_fd()];
        let cmsgs = [ControlMessage::ScmRights(&fds)];
        let len = HEADER_BYTES + payload.len();
        let mut backoff = Duration::from_micros(200);
        loop {
            let sent = socket::sendmsg(
                self.socket.as_raw_fd(),
                &iov,
                &cmsgs,
                MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
                Some(&self.peer_addrs[peer]),
            );
            match sent {
                Ok(n) if n == len => return Ok(()),
                Ok(n) => {
                    return Err(IpcError::Send {
                        rank: self.rank,
                        peer,
                        path: self.peer_paths[peer].clone(),
                        source: io::Error::other(format!("sent {n} of {len} bytes")),
                    });
                }
                Err(Errno::EINTR) => {}
                // ENOENT / ECONNREFUSED: the peer has not bound (or has not
                // re-bound over a stale file) yet. EAGAIN / ENOBUFS: its
                // queue or our send buffer is full.
                Err(e @ (Errno::ENOENT | Errno::ECONNREFUSED | Errno::EAGAIN | Errno::ENOBUFS)) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return Err(self.timeout_error(format!(
                            "{kind} (seq {seq}) to rank {peer}: its socket {} to accept \
                             the message (last error: {e})",
                            self.peer_paths[peer].display()
                        )));
                    }
                    // Drain our own queue while we wait, so that ranks
                    // blocked on each other's full queues cannot deadlock.
                    self.drain_incoming()?;
                    std::thread::sleep(backoff.min(deadline - now));
                    backoff = (backoff * 2).min(Duration::from_millis(20));
                }
                Err(e) => {
                    return Err(IpcError::Send {
                        rank: self.rank,
                        peer,
                        path: self.peer_paths[peer].clone(),
                        source: e.into(),
                    });
                }
            }
        }
    }

    /// Waits for round `round` of `kind` from every rank in `sources`.
    fn collect_round(
        &mut self,
        kind: Kind,
        round: u64,
        mut missing: Vec<usize>,
        deadline: Instant,
    ) -> Result<Vec<(usize, OwnedFd)>, IpcError> {
        let mut got = Vec::with_capacity(missing.len());
        loop {
            let mut i = 0;
            while i < missing.len() {
                let src = missing[i];
                match self.round_inbox.remove(&(src, round)) {
                    Some(m) if m.kind == kind => {
                        got.push((src, m.fd));
                        missing.swap_remove(i);
                    }
                    Some(m) => {
                        return Err(IpcError::Protocol {
                            rank: self.rank,
                            peer: src,
                            detail: format!(
                                "in round {round} it called {} while we called {kind}",
                                m.kind
                            ),
                        });
                    }
                    None => i += 1,
                }
            }
            if missing.is_empty() {
                return Ok(got);
            }
            missing.sort_unstable();
            let m = self.recv_until(deadline, || {
                format!("{kind} round {round}: descriptors from rank(s) {missing:?}")
            })?;
            self.stash(m)?;
        }
    }

    /// Files a received message where `recv_fd` or a collective will look.
    fn stash(&mut self, m: Message) -> Result<(), IpcError> {
        if self.p2p_inbox.len() + self.round_inbox.len() >= MAX_PENDING_MESSAGES {
            return Err(IpcError::Protocol {
                rank: self.rank,
                peer: m.src,
                detail: format!(
                    "{MAX_PENDING_MESSAGES} messages received but not consumed; \
                     ranks are out of step"
                ),
            });
        }
        match m.kind {
            Kind::PointToPoint => {
                // One sender's datagrams reach one receiver in order, so a
                // gap or repeat means a lost or duplicated message.
                let expected = self.p2p_expected[m.src];
                if m.seq != expected {
                    return Err(IpcError::Protocol {
                        rank: self.rank,
                        peer: m.src,
                        detail: format!("send_fd message #{} arrived, expected #{expected}", m.seq),
                    });
                }
                self.p2p_expected[m.src] += 1;
                self.p2p_inbox.push_back(m);
            }
            Kind::AllGather | Kind::Broadcast => {
                if m.seq < self.completed_rounds {
                    return Err(IpcError::Protocol {
                        rank: self.rank,
                        peer: m.src,
                        detail: format!(
                            "{} message for round {}, which already completed here",
                            m.kind, m.seq
                        ),
                    });
                }
                let key = (m.src, m.seq);
                if self.round_inbox.contains_key(&key) {
                    return Err(IpcError::Protocol {
                        rank: self.rank,
                        peer: m.src,
                        detail: format!("second {} message for round {}", m.kind, m.seq),
                    });
                }
                self.round_inbox.insert(key, m);
            }
        }
        Ok(())
    }

    /// Moves every datagram already queued on our socket into the inboxes.
    fn drain_incoming(&mut self) -> Result<(), IpcError> {
        while let Some(m) = self.try_recv()? {
            self.stash(m)?;
        }
        Ok(())
    }

    /// Receives one message, waiting until `deadline`.
    fn recv_until(
        &mut self,
        deadline: Instant,
        waiting_for: impl FnOnce() -> String,
    ) -> Result<Message, IpcError> {
        loop {
            if let Some(m) = self.try_recv()? {
                return Ok(m);
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(self.timeout_error(waiting_for()));
            }
            // Round up: a 0 ms poll would spin until the deadline.
            let remaining_ms =
                u64::try_from(remaining.as_micros().div_ceil(1000)).unwrap_or(u64::MAX);
            let poll_timeout = PollTimeout::try_from(remaining_ms).unwrap_or(PollTimeout::MAX);
            let mut fds = [PollFd::new(self.socket.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, poll_timeout) {
                Ok(_) | Err(Errno::EINTR) => {}
                Err(e) => {
                    return Err(IpcError::Io {
                        rank: self.rank,
                        op: "poll",
                        path: self.path.clone(),
                        source: e.into(),
                    });
                }
            }
        }
    }

    /// Receives and validates one datagram if one is queued.
    fn try_recv(&mut self) -> Result<Option<Message>, IpcError> {
        let mut buf = vec![0u8; HEADER_BYTES + MAX_PAYLOAD_BYTES];
        let mut cmsg_buf = nix::cmsg_space!(UnixCredentials, [RawFd; SCM_MAX_FD]);
        let mut iov = [IoSliceMut::new(&mut buf)];
        let received = loop {
            match socket::recvmsg::<UnixAddr>(
                self.socket.as_raw_fd(),
                &mut iov,
                Some(&mut cmsg_buf),
                MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_CMSG_CLOEXEC,
            ) {
                Ok(r) => break r,
                Err(Errno::EINTR) => {}
                Err(Errno::EAGAIN) => return Ok(None),
                Err(e) => {
                    return Err(IpcError::Io {
                        rank: self.rank,
                        op: "recvmsg on",
                        path: self.path.clone(),
                        source: e.into(),
                    });
                }
            }
        };

        // Own every received descriptor before any check can fail, so that
        // a rejected message closes them.
        let mut fds: Vec<OwnedFd> = Vec::new();
        let mut creds: Option<UnixCredentials> = None;
        let control_truncated = match received.cmsgs() {
            Ok(cmsgs) => {
                for cmsg in cmsgs {
                    match cmsg {
                        ControlMessageOwned::ScmRights(raw_fds) => {
                            fds.extend(raw_fds.into_iter().map(|raw| {
                                // SAFETY: recvmsg just installed `raw` in our
                                // descriptor table for this SCM_RIGHTS message;
                                // nothing else refers to it, so we take sole
                                // ownership (and close it on drop).
                                unsafe { OwnedFd::from_raw_fd(raw) }
                            }));
                        }
                        ControlMessageOwned::ScmCredentials(c) => creds = Some(c),
                        _ => {}
                    }
                }
                false
            }
            // MSG_CTRUNC: nix refuses to walk a truncated buffer. The buffer
            // has room for SCM_MAX_FD descriptors plus credentials, so only
            // unexpected control messages can get us here.
            Err(_) => true,
        };
        let bytes = received.bytes;
        let data_truncated = received.flags.contains(MsgFlags::MSG_TRUNC);
        let sender_path = received
            .address
            .as_ref()
            // A sender without a bound name leaves an address of length 0,
            // on which nix's `path()` asserts (a panic any local process
            // could trigger): treat it as no address.
            .filter(|a| a.len() as usize >= std::mem::size_of::<nix::libc::sa_family_t>())
            .and_then(|a| a.path().map(Path::to_path_buf));

        let header = decode_header(buf.get(..bytes).unwrap_or(&[]));
        let claimed = header.as_ref().ok().map(|h| h.src);
        let sender = match &creds {
            Some(c) => format!("pid {} uid {} (claims rank {claimed:?})", c.pid(), c.uid()),
            None => format!("unknown process (claims rank {claimed:?})"),
        };
        let reject = |reason: String| IpcError::Rejected {
            rank: self.rank,
            path: self.path.clone(),
            sender: sender.clone(),
            reason,
        };

        if control_truncated {
            return Err(reject("control data truncated (MSG_CTRUNC)".into()));
        }
        let Some(creds) = creds else {
            return Err(reject("no SCM_CREDENTIALS on the message".into()));
        };
        if creds.uid() != self.uid {
            return Err(reject(format!(
                "uid {} is not ours ({})",
                creds.uid(),
                self.uid
            )));
        }
        if let Some(allowed) = &self.allowed_pids
            && !allowed.contains(&creds.pid())
        {
            return Err(reject(format!(
                "pid {} is not a process of this job",
                creds.pid()
            )));
        }
        if data_truncated {
            return Err(reject(format!(
                "datagram longer than {HEADER_BYTES} + {MAX_PAYLOAD_BYTES} bytes"
            )));
        }
        let header = header.map_err(reject)?;
        if header.world != self.world {
            return Err(reject(format!(
                "world size {} differs from ours ({})",
                header.world, self.world
            )));
        }
        let Some(expected_path) = self.peer_paths.get(header.src) else {
            return Err(reject(format!("rank {} not below world size", header.src)));
        };
        if sender_path.as_deref() != Some(expected_path.as_path()) {
            return Err(reject(format!(
                "sent from {sender_path:?}, not from rank {}'s socket {}",
                header.src,
                expected_path.display()
            )));
        }
        if fds.len() != 1 {
            return Err(reject(format!(
                "{} descriptors attached, expected 1",
                fds.len()
            )));
        }
        let Some(fd) = fds.pop() else {
            return Err(reject("no descriptor attached".into()));
        };
        Ok(Some(Message {
            kind: header.kind,
            src: header.src,
            seq: header.seq,
            fd,
            payload: buf.get(HEADER_BYTES..bytes).unwrap_or(&[]).to_vec(),
        }))
    }
}

impl Drop for IpcChannel {
    fn drop(&mut self) {
        // Unlink our path only while it still names the socket we bound: a
        // newer channel with the same job id and rank may have replaced it.
        match fs::symlink_metadata(&self.path) {
            Ok(meta) if (meta.dev(), meta.ino()) == self.bound_inode => {
                if let Err(e) = fs::remove_file(&self.path) {
                    tracing::debug!(rank = self.rank, path = %self.path.display(), error = %e,
                        "could not remove socket file");
                }
            }
            _ => {}
        }
    }
}

/// Decoded wire header.
#[derive(Debug)]
struct Header {
    kind: Kind,
    src: usize,
    world: usize,
    seq: u64,
}

fn encode_header(kind: Kind, src: usize, world: usize, seq: u64) -> [u8; HEADER_BYTES] {
    let mut h = [0u8; HEADER_BYTES];
    h[0..4].copy_from_slice(&MAGIC);
    h[4] = WIRE_VERSION;
    h[5] = kind as u8;
    // `src < world <= MAX_WORLD` (checked in `new`), so both fit in u32.
    h[8..12].copy_from_slice(&(src as u32).to_le_bytes());
    h[12..16].copy_from_slice(&(world as u32).to_le_bytes());
    h[16..24].copy_from_slice(&seq.to_le_bytes());
    h
}

fn decode_header(data: &[u8]) -> Result<Header, String> {
    let Some(h) = data.first_chunk::<HEADER_BYTES>() else {
        return Err(format!(
            "datagram of {} bytes is shorter than the header",
            data.len()
        ));
    };
    if h[0..4] != MAGIC {
        return Err("bad magic".into());
    }
    if h[4] != WIRE_VERSION {
        return Err(format!(
            "wire version {} is not ours ({WIRE_VERSION})",
            h[4]
        ));
    }
    let kind = Kind::from_wire(h[5]).ok_or_else(|| format!("unknown message kind {}", h[5]))?;
    let u32_at = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]) as usize;
    let mut seq = [0u8; 8];
    seq.copy_from_slice(&h[16..24]);
    Ok(Header {
        kind,
        src: u32_at(8),
        world: u32_at(12),
        seq: u64::from_le_bytes(seq),
    })
}

/// Creates `dir` (mode 0700) when absent; refuses it unless it is a real
/// directory owned by our effective uid with no group or other bits.
fn ensure_private_dir(dir: &Path, rank: usize) -> Result<(), IpcError> {
    let io_err = |op: &'static str, source: io::Error| IpcError::Io {
        rank,
        op,
        path: dir.to_path_buf(),
        source,
    };
    match fs::symlink_metadata(dir) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| io_err("create directory", e))?;
        }
        Err(e) => return Err(io_err("stat directory", e)),
    }
    // Checked again after creating: another process may have won the race
    // and created it with other permissions.
    let meta = fs::symlink_metadata(dir).map_err(|e| io_err("stat directory", e))?;
    let insecure = |reason: String| IpcError::InsecureDir {
        rank,
        path: dir.to_path_buf(),
        reason,
    };
    if meta.file_type().is_symlink() {
        return Err(insecure("it is a symbolic link".into()));
    }
    if !meta.is_dir() {
        return Err(insecure("it is not a directory".into()));
    }
    let euid = geteuid().as_raw();
    if meta.uid() != euid {
        return Err(insecure(format!(
            "owned by uid {}, not by us (uid {euid})",
            meta.uid()
        )));
    }
    let mode = meta.mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(insecure(format!(
            "mode {mode:04o} lets group or others in; expected 0700"
        )));
    }
    Ok(())
}

/// Removes a socket file at `path` that no live socket is bound to.
fn remove_stale_socket(path: &Path, addr: &UnixAddr, rank: usize) -> Result<(), IpcError> {
    let io_err = |op: &'static str, source: io::Error| IpcError::Io {
        rank,
        op,
        path: path.to_path_buf(),
        source,
    };
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err("stat socket path", e)),
    };
    if !meta.file_type().is_socket() {
        return Err(IpcError::InvalidArgument {
            rank,
            detail: format!(
                "{} exists and is not a socket; not removing it",
                path.display()
            ),
        });
    }
    // A datagram connect succeeds only while some socket is bound there.
    let probe = socket::socket(
        AddressFamily::Unix,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(|e| io_err("socket to probe", e.into()))?;
    match socket::connect(probe.as_raw_fd(), addr) {
        Ok(()) => Err(IpcError::SocketInUse {
            rank,
            path: path.to_path_buf(),
        }),
        Err(Errno::ECONNREFUSED) => match fs::remove_file(path) {
            Ok(()) => {
                tracing::debug!(rank, path = %path.display(), "removed stale socket file");
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err("remove stale socket", e)),
        },
        Err(Errno::ENOENT) => Ok(()),
        Err(e) => Err(io_err("probe socket", e.into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::io::{Read, Write};
    use std::os::unix::fs::FileExt;
    use std::os::unix::net::UnixDatagram;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const LONG: Duration = Duration::from_secs(10);

    /// A private scratch directory, removed on drop.
    struct TestDir(PathBuf);

    impl TestDir {
        fn new(name: &str) -> Self {
            static COUNTER: AtomicUsize = AtomicUsize::new(0);
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let p = std::env::temp_dir()
                .join(format!("intranode-ipc-{}-{name}-{n}", std::process::id()));
            let _ = fs::remove_dir_all(&p);
            DirBuilder::new()
                .mode(0o700)
                .create(&p)
                .expect("create test dir");
            Self(p)
        }
    }

    impl Drop for TestDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    /// An unlinked read-write file holding `text` at offset 0.
    fn marker_file(dir: &Path, text: &str) -> File {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        // The pid too: the ranks of `separate_processes_exchange_fds` are
        // processes with counters of their own, creating files in one
        // directory, and `create_new` must not race between them.
        let p = dir.join(format!("file-{}-{n}", std::process::id()));
        let f = File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&p)
            .expect("create marker file");
        fs::remove_file(&p).expect("unlink marker file");
        f.write_all_at(format!("{text:<32}").as_bytes(), 0)
            .expect("write marker");
        f
    }

    fn read_marker(fd: OwnedFd) -> (File, String) {
        let f = File::from(fd);
        let mut buf = [0u8; 32];
        f.read_exact_at(&mut buf, 0).expect("read marker");
        let text = String::from_utf8_lossy(&buf).trim_end().to_string();
        (f, text)
    }

    /// Runs `f` on `world` threads, each with its own channel (rank = index).
    fn with_ranks<T: Send>(
        dir: &Path,
        job: &str,
        world: usize,
        timeout: Duration,
        f: impl Fn(&mut IpcChannel) -> T + Sync,
    ) -> Vec<T> {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..world)
                .map(|rank| {
                    let f = &f;
                    s.spawn(move || {
                        let mut ch = IpcChannel::new(dir, job, rank, world, timeout)
                            .expect("create channel");
                        f(&mut ch)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("rank thread panicked"))
                .collect()
        })
    }

    /// Each rank writes its marker into slot `rank` of the file behind `fd`.
    fn stamp(fd: &File, rank: usize, round: usize) {
        let text = format!("{rank}:{round:<6}");
        fd.write_all_at(text.as_bytes(), 64 + 8 * rank as u64)
            .expect("stamp");
    }

    fn check_stamps(f: &File, world: usize, round: usize, skip: Option<usize>) {
        for r in (0..world).filter(|&r| Some(r) != skip) {
            let mut buf = [0u8; 8];
            f.read_exact_at(&mut buf, 64 + 8 * r as u64)
                .expect("read stamp");
            assert_eq!(
                buf,
                *format!("{r}:{round:<6}").as_bytes(),
                "stamp of rank {r}"
            );
        }
    }

    #[test]
    fn all_gather_delivers_working_fds_over_rounds() {
        let dir = TestDir::new("allgather");
        let world = 4;
        with_ranks(&dir.0, "ag", world, LONG, |ch| {
            let rank = ch.rank();
            for round in 0..12 {
                // Uneven pacing so that fast ranks run rounds ahead.
                std::thread::sleep(Duration::from_millis(((rank * 7 + round * 3) % 5) as u64));
                let mine = marker_file(&dir.0, &format!("round {round} rank {rank}"));
                let fds = ch.all_gather_fds(mine.as_fd()).expect("all_gather");
                assert_eq!(fds.len(), world);
                for (src, fd) in fds.into_iter().enumerate() {
                    let (f, text) = read_marker(fd);
                    assert_eq!(text, format!("round {round} rank {src}"));
                    stamp(&f, rank, round);
                }
                // Second gather doubles as a barrier: after it, every rank
                // has written through its descriptor for our file.
                ch.all_gather_fds(mine.as_fd()).expect("barrier");
                check_stamps(&mine, world, round, None);
            }
        });
    }

    #[test]
    fn broadcast_delivers_working_fds_with_rotating_root() {
        let dir = TestDir::new("bcast");
        let world = 4;
        with_ranks(&dir.0, "bc", world, LONG, |ch| {
            let rank = ch.rank();
            for round in 0..8 {
                let root = round % world;
                std::thread::sleep(Duration::from_millis(((rank + round) % 3) as u64));
                let mine = (rank == root).then(|| marker_file(&dir.0, &format!("bcast {round}")));
                let fd = ch
                    .broadcast_fds(root, mine.as_ref().map(|f| f.as_fd()))
                    .expect("broadcast");
                let (f, text) = read_marker(fd);
                assert_eq!(text, format!("bcast {round}"));
                stamp(&f, rank, round);
                let dummy = File::open("/dev/null").expect("open /dev/null");
                ch.all_gather_fds(dummy.as_fd()).expect("barrier");
                if let Some(mine) = &mine {
                    check_stamps(mine, world, round, None);
                }
            }
        });
    }

    #[test]
    fn send_recv_pipe_ring_with_collectives_interleaved() {
        let dir = TestDir::new("p2p");
        let world = 4;
        with_ranks(&dir.0, "p2p", world, LONG, |ch| {
            let rank = ch.rank();
            let next = (rank + 1) % world;
            let prev = (rank + world - 1) % world;
            for round in 0..5 {
                // Send the write end of a pipe to `next`; it writes back.
                let (mut reader, writer) = io::pipe().expect("pipe");
                let payload = format!("ring {round} from {rank}");
                ch.send_fd(next, writer.as_fd(), payload.as_bytes())
                    .expect("send_fd");
                drop(writer);
                // A collective in between: the send_fd message from `prev`
                // is buffered while it runs.
                let dummy = File::open("/dev/null").expect("open /dev/null");
                ch.all_gather_fds(dummy.as_fd()).expect("all_gather");
                let (src, fd, got) = ch.recv_fd().expect("recv_fd");
                assert_eq!(src, prev);
                assert_eq!(got, format!("ring {round} from {prev}").as_bytes());
                let mut w = File::from(fd);
                w.write_all(format!("hello {prev} from {rank}").as_bytes())
                    .expect("write pipe");
                drop(w);
                let mut back = String::new();
                reader.read_to_string(&mut back).expect("read pipe");
                assert_eq!(back, format!("hello {rank} from {next}"));
            }
        });
    }

    #[test]
    fn send_waits_for_late_peer() {
        let dir = TestDir::new("late");
        std::thread::scope(|s| {
            let sender = s.spawn(|| {
                let mut ch = IpcChannel::new(&dir.0, "late", 0, 2, LONG).expect("rank 0");
                let f = marker_file(&dir.0, "late");
                ch.send_fd(1, f.as_fd(), b"x").expect("send to late peer");
            });
            std::thread::sleep(Duration::from_millis(200));
            let mut ch = IpcChannel::new(&dir.0, "late", 1, 2, LONG).expect("rank 1");
            let (src, fd, payload) = ch.recv_fd().expect("recv");
            assert_eq!((src, payload.as_slice()), (0, &b"x"[..]));
            assert_eq!(read_marker(fd).1, "late");
            sender.join().expect("sender");
        });
    }

    #[test]
    fn all_gather_times_out_naming_the_silent_rank() {
        let dir = TestDir::new("timeout");
        let timeout = Duration::from_millis(300);
        let mut r0 = IpcChannel::new(&dir.0, "to", 0, 3, timeout).expect("rank 0");
        let _r1 = IpcChannel::new(&dir.0, "to", 1, 3, timeout).expect("rank 1");
        let mut r2 = IpcChannel::new(&dir.0, "to", 2, 3, timeout).expect("rank 2");
        // Rank 2 contributes (it cannot complete either: rank 1 is silent).
        let f = marker_file(&dir.0, "t");
        let err = r2
            .all_gather_fds(f.as_fd())
            .expect_err("rank 2 must time out");
        assert!(matches!(err, IpcError::Timeout { rank: 2, .. }), "{err}");
        let start = Instant::now();
        let err = r0
            .all_gather_fds(f.as_fd())
            .expect_err("rank 0 must time out");
        let elapsed = start.elapsed();
        let text = err.to_string();
        assert!(
            matches!(
                err,
                IpcError::Timeout {
                    rank: 0,
                    timeout_ms: 300,
                    ..
                }
            ),
            "{text}"
        );
        assert!(text.contains("all_gather_fds round 0"), "{text}");
        assert!(text.contains("rank(s) [1]"), "{text}");
        assert!(
            elapsed >= timeout && elapsed < Duration::from_secs(3),
            "{elapsed:?}"
        );
    }

    #[test]
    fn recv_and_send_time_out() {
        let dir = TestDir::new("timeout2");
        let timeout = Duration::from_millis(300);
        let mut r0 = IpcChannel::new(&dir.0, "to2", 0, 2, timeout).expect("rank 0");
        let start = Instant::now();
        let err = r0.recv_fd().expect_err("nothing was sent");
        assert!(start.elapsed() >= timeout);
        assert!(
            err.to_string().contains("send_fd message from any rank"),
            "{err}"
        );
        // Rank 1 never binds: the send gives up after the timeout.
        let f = marker_file(&dir.0, "t");
        let err = r0.send_fd(1, f.as_fd(), b"").expect_err("peer never binds");
        let text = err.to_string();
        assert!(
            text.contains("to rank 1") && text.contains("to2-1.sock"),
            "{text}"
        );
    }

    #[test]
    fn pid_check_rejects_and_closes_the_fd() {
        let dir = TestDir::new("pid");
        let mut r0 = IpcChannel::new(&dir.0, "pid", 0, 2, LONG).expect("rank 0");
        let mut r1 = IpcChannel::new(&dir.0, "pid", 1, 2, LONG).expect("rank 1");
        // Our own pid is allowed: accepted.
        let me = std::process::id() as i32;
        r0.set_allowed_pids(vec![me]);
        let (_reader, writer) = io::pipe().expect("pipe");
        r1.send_fd(0, writer.as_fd(), b"ok").expect("send");
        assert_eq!(r0.recv_fd().expect("allowed pid").0, 1);
        // Not in the set: rejected, and the passed write end is closed.
        r0.set_allowed_pids(vec![me + 1_000_000]);
        let (mut reader, writer) = io::pipe().expect("pipe");
        r1.send_fd(0, writer.as_fd(), b"no").expect("send");
        drop(writer);
        let err = r0.recv_fd().expect_err("pid not allowed");
        let text = err.to_string();
        assert!(matches!(err, IpcError::Rejected { rank: 0, .. }), "{text}");
        assert!(text.contains("not a process of this job"), "{text}");
        let mut buf = [0u8; 1];
        assert_eq!(
            reader.read(&mut buf).expect("read"),
            0,
            "write end must be closed"
        );
    }

    #[test]
    fn mismatched_collectives_are_a_protocol_error() {
        let dir = TestDir::new("mismatch");
        // Both channels stay bound until both calls have returned.
        let done = std::sync::Barrier::new(2);
        let results = with_ranks(&dir.0, "mm", 2, Duration::from_secs(2), |ch| {
            let f = File::open("/dev/null").expect("open /dev/null");
            let result = if ch.rank() == 0 {
                ch.all_gather_fds(f.as_fd()).map(drop)
            } else {
                ch.broadcast_fds(1, Some(f.as_fd())).map(drop)
            };
            done.wait();
            result
        });
        let err = results[0]
            .as_ref()
            .expect_err("rank 0 must see the mismatch");
        assert!(
            matches!(
                err,
                IpcError::Protocol {
                    rank: 0,
                    peer: 1,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("broadcast_fds"), "{err}");
    }

    #[test]
    fn invalid_arguments() {
        let dir = TestDir::new("args");
        let t = Duration::from_millis(100);
        for (job, rank, world) in [("j", 2, 2), ("j", 0, 0), ("a/b", 0, 1), ("", 0, 1)] {
            let err = IpcChannel::new(&dir.0, job, rank, world, t).expect_err("invalid");
            assert!(matches!(err, IpcError::InvalidArgument { .. }), "{err}");
        }
        let mut ch = IpcChannel::new(&dir.0, "j", 0, 2, t).expect("channel");
        let f = File::open("/dev/null").expect("open /dev/null");
        let big = vec![0u8; MAX_PAYLOAD_BYTES + 1];
        assert!(matches!(
            ch.send_fd(1, f.as_fd(), &big),
            Err(IpcError::InvalidArgument { .. })
        ));
        assert!(matches!(
            ch.send_fd(2, f.as_fd(), b""),
            Err(IpcError::InvalidArgument { .. })
        ));
        assert!(matches!(
            ch.broadcast_fds(0, None),
            Err(IpcError::InvalidArgument { .. })
        ));
    }

    #[test]
    fn directory_permissions() {
        let base = TestDir::new("perm");
        // Absent (with a missing parent): created with mode 0700.
        let fresh = base.0.join("a").join("b");
        let ch = IpcChannel::new(&fresh, "j", 0, 1, LONG).expect("create dir");
        let mode = fs::metadata(&fresh).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        drop(ch);
        // World-accessible: refused.
        let open = base.0.join("open");
        fs::create_dir(&open).expect("mkdir");
        fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).expect("chmod");
        let err = IpcChannel::new(&open, "j", 0, 1, LONG).expect_err("0777 must be refused");
        assert!(matches!(err, IpcError::InsecureDir { .. }), "{err}");
        assert!(err.to_string().contains("0777"), "{err}");
        // Group-readable: refused too.
        fs::set_permissions(&open, fs::Permissions::from_mode(0o740)).expect("chmod");
        assert!(IpcChannel::new(&open, "j", 0, 1, LONG).is_err());
        // Not a directory: refused.
        let file = base.0.join("file");
        fs::write(&file, b"").expect("write");
        assert!(matches!(
            IpcChannel::new(&file, "j", 0, 1, LONG),
            Err(IpcError::InsecureDir { .. })
        ));
        // A symlink to a private directory: refused.
        let link = base.0.join("link");
        std::os::unix::fs::symlink(&fresh, &link).expect("symlink");
        assert!(matches!(
            IpcChannel::new(&link, "j", 0, 1, LONG),
            Err(IpcError::InsecureDir { .. })
        ));
    }

    #[test]
    fn stale_socket_is_replaced_and_own_socket_removed_on_drop() {
        let dir = TestDir::new("stale");
        let path = dir.0.join("st-0.sock");
        drop(UnixDatagram::bind(&path).expect("bind stale"));
        assert!(path.exists(), "std leaves the socket file behind");
        let ch = IpcChannel::new(&dir.0, "st", 0, 1, LONG).expect("replace stale socket");
        assert_eq!(
            ch.socket_path(),
            fs::canonicalize(&dir.0).expect("canon").join("st-0.sock")
        );
        drop(ch);
        assert!(!path.exists(), "drop removes our socket file");

        // A live socket at our path is not stolen.
        let live = UnixDatagram::bind(&path).expect("bind live");
        let err = IpcChannel::new(&dir.0, "st", 0, 1, LONG).expect_err("live socket");
        assert!(
            matches!(err, IpcError::SocketInUse { rank: 0, .. }),
            "{err}"
        );
        drop(live);
        fs::remove_file(&path).expect("cleanup");

        // A regular file at our path is not removed.
        fs::write(&path, b"keep").expect("write");
        assert!(IpcChannel::new(&dir.0, "st", 0, 1, LONG).is_err());
        assert_eq!(fs::read(&path).expect("read"), b"keep");
    }

    #[test]
    fn socket_file_and_directory_are_private() {
        let base = TestDir::new("private");
        let dir = base.0.join("sockets");
        let ch = IpcChannel::new(&dir, "priv", 0, 2, LONG).expect("channel");
        let euid = geteuid().as_raw();
        let dir_meta = fs::metadata(&dir).expect("stat dir");
        assert_eq!(dir_meta.permissions().mode() & 0o777, 0o700);
        assert_eq!(dir_meta.uid(), euid);
        let sock = fs::symlink_metadata(ch.socket_path()).expect("stat socket");
        assert!(sock.file_type().is_socket());
        assert_eq!(sock.permissions().mode() & 0o777, 0o600);
        assert_eq!(sock.uid(), euid);
    }

    /// A process of another user: root drops to uid 65534 in a forked
    /// child. It cannot even reach the socket through the private
    /// directory; and a socket it connected while still root (as a
    /// process that slipped past the directory would be) carries its new
    /// uid in SCM_CREDENTIALS, and the message is rejected.
    #[test]
    fn other_users_are_kept_out() {
        use nix::sys::wait::{WaitStatus, waitpid};
        use nix::unistd::{ForkResult, Uid, fork, setresuid};

        if !geteuid().is_root() {
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED other_users_are_kept_out: switching to another uid needs root"
            );
            return;
        }
        let dir = TestDir::new("uid");
        let mut r0 = IpcChannel::new(&dir.0, "uid", 0, 2, Duration::from_secs(5)).expect("rank 0");
        let target = r0.peer_addrs[0];
        let message = encode_header(Kind::PointToPoint, 1, 2, 0);
        let nobody = Uid::from_raw(65534);
        // Prepared before fork: the child allocates nothing.
        let probe = socket::socket(
            AddressFamily::Unix,
            SockType::Datagram,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .expect("socket");
        socket::connect(probe.as_raw_fd(), &target).expect("connect as root");
        let late = socket::socket(
            AddressFamily::Unix,
            SockType::Datagram,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .expect("socket");
        // SAFETY: the child only makes system calls (setresuid, sendto,
        // send, _exit) on values prepared before the fork: no allocation,
        // no lock, nothing another thread of the harness could hold.
        match unsafe { fork() }.expect("fork") {
            ForkResult::Child => {
                let code = (|| {
                    if setresuid(nobody, nobody, nobody).is_err() {
                        return 10;
                    }
                    // Through the 0700 directory: no entry.
                    match socket::sendto(late.as_raw_fd(), &message, &target, MsgFlags::empty()) {
                        Err(Errno::EACCES) => {}
                        Ok(_) => return 11,
                        Err(_) => return 12,
                    }
                    // Over the socket connected before dropping root.
                    match socket::send(probe.as_raw_fd(), &message, MsgFlags::empty()) {
                        Ok(_) => 0,
                        Err(_) => 13,
                    }
                })();
                // SAFETY: ends the forked child without running the
                // parent's exit handlers or destructors.
                unsafe { nix::libc::_exit(code) }
            }
            ForkResult::Parent { child } => {
                let status = waitpid(child, None).expect("waitpid");
                assert_eq!(
                    status,
                    WaitStatus::Exited(child, 0),
                    "child of uid 65534: 10 setresuid, 11/12 the directory let it in, 13 send failed"
                );
                let err = r0.recv_fd().expect_err("another uid must be rejected");
                let text = err.to_string();
                assert!(matches!(err, IpcError::Rejected { rank: 0, .. }), "{text}");
                assert!(text.contains("uid 65534 is not ours"), "{text}");
            }
        }
    }

    /// A datagram from a socket without a name (a same-user process that
    /// never bound one) is rejected; it used to panic inside nix.
    #[test]
    fn unnamed_sender_is_rejected_not_a_panic() {
        let dir = TestDir::new("unnamed");
        let mut r0 = IpcChannel::new(&dir.0, "un", 0, 2, LONG).expect("rank 0");
        let sender = UnixDatagram::unbound().expect("socket");
        let header = encode_header(Kind::PointToPoint, 1, 2, 0);
        sender
            .send_to(&header, r0.socket_path())
            .expect("send from an unnamed socket");
        let err = r0.recv_fd().expect_err("no sender address");
        let text = err.to_string();
        assert!(matches!(err, IpcError::Rejected { rank: 0, .. }), "{text}");
        assert!(text.contains("not from rank 1's socket"), "{text}");
        // The channel still works afterwards.
        let mut r1 = IpcChannel::new(&dir.0, "un", 1, 2, LONG).expect("rank 1");
        let f = File::open("/dev/null").expect("open /dev/null");
        r1.send_fd(0, f.as_fd(), b"ok").expect("send");
        assert_eq!(r0.recv_fd().expect("a real peer").0, 1);
    }

    const FOREIGN_ENV: &str = "INTRANODE_IPC_TEST_FOREIGN";

    /// The sender of `a_process_outside_the_job_is_rejected`; a no-op
    /// unless that test started this process.
    #[test]
    fn foreign_process_child() {
        let Ok(dir) = std::env::var(FOREIGN_ENV) else {
            return;
        };
        let mut ch = IpcChannel::new(Path::new(&dir), "foreign", 1, 2, LONG).expect("channel");
        let (_reader, writer) = io::pipe().expect("pipe");
        ch.send_fd(0, writer.as_fd(), b"let me in").expect("send");
    }

    /// Same user, right socket path, right rank, but a pid outside the
    /// job's (as exchanged through the store): rejected, with its
    /// descriptor closed.
    #[test]
    fn a_process_outside_the_job_is_rejected() {
        if std::env::var_os(FOREIGN_ENV).is_some() || std::env::var_os(CHILD_ENV).is_some() {
            return;
        }
        let dir = TestDir::new("foreign");
        let mut r0 = IpcChannel::new(&dir.0, "foreign", 0, 2, LONG).expect("rank 0");
        // The job is this process alone (plus a pid that is not the child).
        r0.set_allowed_pids(vec![std::process::id() as i32, 1]);
        let exe = std::env::current_exe().expect("current exe");
        let child = std::process::Command::new(exe)
            .args(["--exact", "ipc_channel::tests::foreign_process_child"])
            .args(["--nocapture", "--test-threads=1"])
            .env(FOREIGN_ENV, &dir.0)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn the foreign process");
        let child_pid = child.id();
        let err = r0.recv_fd().expect_err("a foreign pid must be rejected");
        let text = err.to_string();
        assert!(matches!(err, IpcError::Rejected { rank: 0, .. }), "{text}");
        assert!(
            text.contains(&format!("pid {child_pid}"))
                && text.contains("not a process of this job"),
            "{text}"
        );
        let out = child.wait_with_output().expect("wait");
        assert!(out.status.success());
    }

    #[test]
    fn default_dir_is_absolute() {
        assert!(IpcChannel::default_dir().is_absolute());
    }

    const CHILD_ENV: &str = "INTRANODE_IPC_TEST_CHILD";

    /// Rank `k > 0` of `separate_processes_exchange_fds`; a no-op unless
    /// that test spawned this process.
    #[test]
    fn separate_process_child() {
        let Ok(spec) = std::env::var(CHILD_ENV) else {
            return;
        };
        let mut parts = spec.splitn(3, ':');
        let rank: usize = parts.next().and_then(|s| s.parse().ok()).expect("rank");
        let world: usize = parts.next().and_then(|s| s.parse().ok()).expect("world");
        let dir = PathBuf::from(parts.next().expect("dir"));
        let mut ch = IpcChannel::new(&dir, "proc", rank, world, LONG).expect("child channel");
        let mine = marker_file(&dir, &format!("pid {}", std::process::id()));
        let fds = ch.all_gather_fds(mine.as_fd()).expect("child all_gather");
        // Every peer's file reads as "pid <something>"; ours as our pid.
        for (src, fd) in fds.into_iter().enumerate() {
            let (_, text) = read_marker(fd);
            assert!(text.starts_with("pid "), "rank {src}: {text}");
        }
        let fd = ch.broadcast_fds(0, None).expect("child broadcast");
        stamp(&File::from(fd), rank, 0);
        let dummy = File::open("/dev/null").expect("open /dev/null");
        ch.all_gather_fds(dummy.as_fd()).expect("child barrier");
    }

    #[test]
    fn separate_processes_exchange_fds() {
        if std::env::var_os(CHILD_ENV).is_some() {
            return;
        }
        let dir = TestDir::new("proc");
        let world = 4;
        let exe = std::env::current_exe().expect("current exe");
        let children: Vec<_> = (1..world)
            .map(|rank| {
                std::process::Command::new(&exe)
                    .args(["--exact", "ipc_channel::tests::separate_process_child"])
                    .args(["--nocapture", "--test-threads=1"])
                    .env(CHILD_ENV, format!("{rank}:{world}:{}", dir.0.display()))
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .expect("spawn child rank")
            })
            .collect();
        let mut ch = IpcChannel::new(&dir.0, "proc", 0, world, LONG).expect("rank 0");
        let mut pids: Vec<i32> = children.iter().map(|c| c.id() as i32).collect();
        pids.push(std::process::id() as i32);
        ch.set_allowed_pids(pids.clone());

        let mine = marker_file(&dir.0, &format!("pid {}", std::process::id()));
        let fds = ch.all_gather_fds(mine.as_fd()).expect("all_gather");
        for (src, fd) in fds.into_iter().enumerate() {
            let (_, text) = read_marker(fd);
            // Rank k's file names rank k's pid: the descriptors crossed
            // process boundaries intact and in rank order.
            let expected = if src == 0 {
                pids[world - 1]
            } else {
                pids[src - 1]
            };
            assert_eq!(text, format!("pid {expected}"));
        }
        let shared = marker_file(&dir.0, "shared");
        let own = ch
            .broadcast_fds(0, Some(shared.as_fd()))
            .expect("broadcast");
        stamp(&File::from(own), 0, 0);
        let dummy = File::open("/dev/null").expect("open /dev/null");
        ch.all_gather_fds(dummy.as_fd()).expect("barrier");
        // Each child wrote its stamp through the descriptor it received.
        check_stamps(&shared, world, 0, None);

        for (i, child) in children.into_iter().enumerate() {
            let out = child.wait_with_output().expect("wait child");
            assert!(
                out.status.success(),
                "child rank {} failed:\n{}\n{}",
                i + 1,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}
