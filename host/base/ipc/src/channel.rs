//! [`IpcChannel`]: binding, the public calls, and the bookkeeping of
//! rounds and inboxes; the datagrams themselves go through `datagram`.

mod datagram;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet, VecDeque};
use std::fs;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::socket::{self, AddressFamily, SockFlag, SockType, UnixAddr, sockopt};
use nix::unistd::{geteuid, getuid};

use crate::error::IpcError;
use crate::socket_dir::{choose_dir, remove_dead_sockets, remove_stale_socket, valid_job_id};
use crate::wire::{Kind, MAX_PAYLOAD_BYTES, MAX_WORLD, Message};

/// Longest timeout a channel keeps; longer ones are clamped to it, so that
/// `Instant::now() + timeout` can never overflow.
const MAX_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 3600);

/// How many received but not yet consumed messages a channel buffers before
/// it declares the peers out of step (each one holds an open descriptor).
const MAX_PENDING_MESSAGES: usize = 1024;

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
    /// The job's own directory when the default one was refused (NOTE
    /// [hijacked socket directory]); `Drop` removes it once empty.
    fallback_dir: Option<PathBuf>,
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
    /// permission bits. Pass every rank the directory that one rank chose
    /// with [`IpcChannel::job_dir`] and published with the job id: the
    /// default directory has a name anyone can predict and take first, and
    /// a rank never falls back on its own. The job's own directory that
    /// `job_dir` may choose is removed when the last channel drops. Socket
    /// files of dead jobs in the directory, and a stale one at our path,
    /// are removed first.
    /// `timeout` bounds every later call (each send retry loop and each
    /// wait); it is clamped to one year.
    ///
    /// `job_id` may contain ASCII letters, digits, `-`, `_` and `.`; the
    /// whole socket path must fit in `sun_path` (107 bytes).
    // NOTE [hijacked socket directory] in `socket_dir.rs`.
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
        if !valid_job_id(job_id) {
            return Err(invalid(format!(
                "job id {job_id:?} must be non-empty ASCII letters, digits, '-', '_' or '.'"
            )));
        }

        let (dir, fallback_dir) = choose_dir(dir, job_id, rank, &Self::default_dir())?;
        // Every rank must name the peers' paths exactly as they bound them
        // (the sender-address check compares paths), so use one spelling.
        let dir = fs::canonicalize(&dir).map_err(|source| IpcError::Io {
            rank,
            op: "canonicalize",
            path: dir.clone(),
            source,
        })?;
        remove_dead_sockets(&dir);
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
            fallback_dir,
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

    /// The directory the channels of `job_id` bind in, for one rank to
    /// decide before it publishes the job id, and every rank to pass to
    /// [`IpcChannel::new`]: [`IpcChannel::default_dir`] when it is ours
    /// and private (it is created if absent), otherwise a directory of the
    /// job's own beside it, `intranode-<euid>-<job_id>`, created 0700.
    /// Also removes the own directories of killed jobs beside it (empty of
    /// live sockets and older than ten minutes).
    // NOTE [hijacked socket directory] in `socket_dir.rs`.
    pub fn job_dir(job_id: &str) -> PathBuf {
        crate::socket_dir::job_dir(&Self::default_dir(), job_id)
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
        // The last rank's drop removes the job's own directory; the others
        // find it not empty, which is fine.
        if let Some(dir) = &self.fallback_dir {
            let _ = fs::remove_dir(dir);
        }
    }
}
