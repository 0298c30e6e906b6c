//! Sending and receiving one datagram: retries while a peer is not
//! ready, waiting with a deadline, and the checks on every received
//! message (sender's uid, pid, address, header, one descriptor).

use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{
    self, ControlMessage, ControlMessageOwned, MsgFlags, SockaddrLike, UnixAddr, UnixCredentials,
};

use super::IpcChannel;
use crate::error::IpcError;
use crate::wire::{HEADER_BYTES, Kind, MAX_PAYLOAD_BYTES, Message, decode_header, encode_header};

/// The kernel's limit on descriptors in one `SCM_RIGHTS` message
/// (`SCM_MAX_FD` in `include/net/scm.h`). The control buffer is sized for it
/// so that `MSG_CTRUNC` cannot hide descriptors we would then fail to close.
const SCM_MAX_FD: usize = 253;

impl IpcChannel {
    /// Sends one datagram, retrying transient failures until `deadline`.
    pub(super) fn send_message(
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

    /// Moves every datagram already queued on our socket into the inboxes.
    fn drain_incoming(&mut self) -> Result<(), IpcError> {
        while let Some(m) = self.try_recv()? {
            self.stash(m)?;
        }
        Ok(())
    }

    /// Receives one message, waiting until `deadline`.
    pub(super) fn recv_until(
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
