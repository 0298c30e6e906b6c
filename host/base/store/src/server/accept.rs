//! The acceptor: takes each connection, refuses those over
//! `max_connections` or past the process's descriptors (NOTE [out of
//! descriptors]) and starts a thread for every other client.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::connection::{poll_fds, refuse, serve_client};
use super::refusal_log::{OUT_OF_DESCRIPTORS, TOO_MANY_CONNECTIONS, refusal_kind};
use super::shared::Shared;
use crate::limits::CLIENT_STACK_BYTES;
use crate::wire::{self, Response};

/// Pause after `accept` fails for a reason other than an empty queue, and
/// the spare descriptor could not turn it into a refusal (NOTE [out of
/// descriptors]), so the acceptor does not spin on a listener that stays
/// readable. Only that error path sleeps: the acceptor otherwise blocks in
/// `poll(2)` until a client connects or shutdown wakes it, so a login
/// never waits on a timer.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// Most reads, of up to 4 KiB each, of what a client sent before it is
/// refused for want of descriptors: its hello (at most `max_hello_bytes`,
/// 4 KiB by default, and a frame header) takes one or two.
const OUT_OF_DESCRIPTORS_READS: usize = 4;

/// Most threads at once that answer connections over `max_connections`
/// with a refusal; past that, such connections are closed without one, so
/// a connect flood cannot turn into a thread flood.
const MAX_REFUSERS: usize = 8;

/// Stack of a refusing thread: it only writes one small frame and drains.
const REFUSER_STACK_BYTES: usize = 64 * 1024;

/// NOTE [out of descriptors]: when the process runs out of file
/// descriptors (`ulimit -n`, EMFILE; or the system, ENFILE), `accept`
/// fails and the connection stays in the listen backlog. Its client's
/// connect has already succeeded there and its hello is sent; left there,
/// it waits for an answer that never comes and fails for good after its
/// handshake timeout, as if another kind of server were listening (under
/// `ulimit -n 64` with 100 idle clients: after 5.06 s, "is another kind of
/// server listening there?"). So the acceptor holds one spare descriptor. On
/// EMFILE or ENFILE it closes the spare, accepts the waiting connection
/// into the freed slot, reads what the client sent, answers
/// `Refused("server busy: out of file descriptors ...")`, closes it and
/// takes the spare again, all without blocking (the answer is a small
/// frame into an empty send buffer), so the backlog drains. The client
/// retries that refusal with backoff within its connect timeout, and gets
/// in once descriptors free up, or its connect fails with the server's
/// reason. When the spare cannot be had (another thread took the slot),
/// the acceptor counts the failure and tries again after
/// [`ACCEPT_ERROR_PAUSE`]. Tested by `tests/limits.rs`
/// `a_store_out_of_descriptors_refuses_clients_and_lets_them_in_once_freed`.
#[derive(Debug)]
pub(super) struct SpareDescriptor(Option<std::os::fd::OwnedFd>);

impl SpareDescriptor {
    /// A descriptor held only to be given up: a duplicate of `listener`'s,
    /// which needs no file system and stays harmless while held.
    pub(super) fn take(listener: &TcpListener) -> Self {
        use std::os::fd::AsFd;
        Self(listener.as_fd().try_clone_to_owned().ok())
    }

    /// Whether `e` is running out of descriptors, which the spare helps
    /// with.
    fn helps_with(e: &io::Error) -> bool {
        matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
    }

    /// Frees the spare's slot, accepts one waiting connection into it and
    /// refuses that connection, then takes the spare again. Whether a
    /// connection was refused.
    fn refuse_one(&mut self, shared: &Shared, listener: &TcpListener, cause: &io::Error) -> bool {
        let Some(spare) = self.0.take() else {
            *self = Self::take(listener);
            return false;
        };
        drop(spare);
        let refused = match listener.accept() {
            Ok((stream, peer)) => {
                refuse_out_of_descriptors(shared, &stream, peer, cause);
                true
            }
            Err(_) => false,
        };
        *self = Self::take(listener);
        refused
    }
}

/// Answers a connection accepted into the spare descriptor's slot (NOTE
/// [out of descriptors]), on the acceptor, never blocking: drops what the
/// client has sent (closing with unread input would reset the connection
/// and could destroy the answer), answers, closes.
fn refuse_out_of_descriptors(
    shared: &Shared,
    stream: &TcpStream,
    peer: SocketAddr,
    cause: &io::Error,
) {
    let message = format!(
        "{OUT_OF_DESCRIPTORS} (accept: {cause}); retry shortly, or raise the server's open-file \
         limit (ulimit -n)"
    );
    // On the acceptor: counted, never written (NOTE [refusal log]).
    shared
        .refusal_log
        .record(refusal_kind(&message), peer, &message);
    if stream.set_nonblocking(true).is_err() {
        return;
    }
    let mut sink = [0u8; 4096];
    for _ in 0..OUT_OF_DESCRIPTORS_READS {
        match (&*stream).read(&mut sink) {
            Ok(n) if n > 0 => {}
            _ => break,
        }
    }
    let Ok(body) = wire::encode_response(&Response::Refused(message)) else {
        return;
    };
    let mut frame = Vec::with_capacity(wire::FRAME_HEADER_BYTES + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(&body);
    // A short frame into a fresh socket's empty send buffer: one write.
    let _ = (&*stream).write(&frame);
    let _ = stream.shutdown(Shutdown::Write);
}

/// Accepts clients until shutdown; `spare` is NOTE [out of descriptors].
pub(super) fn accept_loop(
    shared: &Arc<Shared>,
    listener: &TcpListener,
    woken: &UnixStream,
    mut spare: SpareDescriptor,
) {
    use std::os::fd::AsRawFd;
    while !shared.is_shutting_down() {
        match listener.accept() {
            Ok((stream, peer)) => {
                spawn_client(shared, stream, peer, Instant::now());
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if SpareDescriptor::helps_with(&e) && spare.refuse_one(shared, listener, &e) => {
                continue;
            }
            Err(e) => {
                // Out of descriptors with no spare to refuse with, or
                // another failure: keep serving the clients we have and try
                // again shortly. Counted, not written: NOTE [refusal log].
                let unknown = SocketAddr::from(([0, 0, 0, 0], 0));
                let message = format!("accept failed: {e}");
                shared
                    .refusal_log
                    .record("accept failed", unknown, &message);
                thread::sleep(ACCEPT_ERROR_PAUSE);
                continue;
            }
        }
        // The queue is empty: sleep in the kernel until a client connects
        // or shutdown closes the other end of `woken`.
        let mut fds = [listener.as_raw_fd(), woken.as_raw_fd()].map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
        match poll_fds(&mut fds, -1) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                let unknown = SocketAddr::from(([0, 0, 0, 0], 0));
                let message = format!("poll failed: {e}");
                shared
                    .refusal_log
                    .record("accept failed", unknown, &message);
                thread::sleep(ACCEPT_ERROR_PAUSE);
            }
        }
    }
}

fn spawn_client(shared: &Arc<Shared>, stream: TcpStream, peer: SocketAddr, accepted_at: Instant) {
    // Accepted sockets are blocking on Linux, but do not rely on it.
    if let Err(e) = stream
        .set_nonblocking(false)
        .and_then(|()| stream.set_nodelay(true))
    {
        let message = format!("could not configure the client socket: {e}");
        shared
            .refusal_log
            .record("socket set-up failed", peer, &message);
        return;
    }
    let stream = Arc::new(stream);
    let mut clients = shared.clients();
    // Reap finished threads so a long job's registry stays small.
    let (done, live): (Vec<_>, Vec<_>) = std::mem::take(&mut clients.threads)
        .into_iter()
        .partition(JoinHandle::is_finished);
    clients.threads = live;
    for t in done {
        if t.join().is_err() {
            tracing::error!(%peer, "store client thread panicked");
        }
    }
    if clients.streams.len() >= shared.limits.max_connections {
        if let Some(handle) = refuse_over_cap(shared, stream, peer) {
            clients.threads.push(handle);
        }
        return;
    }
    let id = clients.next_id;
    clients.next_id += 1;
    let thread_shared = Arc::clone(shared);
    let thread_stream = Arc::clone(&stream);
    let spawned = thread::Builder::new()
        .name(format!("store-client-{id}"))
        .stack_size(CLIENT_STACK_BYTES)
        .spawn(move || {
            serve_client(&thread_shared, &thread_stream, peer, accepted_at);
            thread_shared.clients().streams.remove(&id);
        });
    match spawned {
        Ok(handle) => {
            clients.streams.insert(id, stream);
            clients.threads.push(handle);
        }
        Err(e) => {
            let message = format!("could not spawn a client thread: {e}");
            shared
                .refusal_log
                .record("thread spawn failed", peer, &message);
        }
    }
}

/// Answers a connection over `max_connections` with a refusal on a short
/// thread of its own (the drain must not hold up the acceptor); when
/// [`MAX_REFUSERS`] are already busy, just closes it.
fn refuse_over_cap(
    shared: &Arc<Shared>,
    stream: Arc<TcpStream>,
    peer: SocketAddr,
) -> Option<JoinHandle<()>> {
    let max = shared.limits.max_connections;
    let message = format!(
        "{TOO_MANY_CONNECTIONS}: this store serves at most {max} at once (max_connections); close idle clients or raise the limit"
    );
    // On the acceptor: counted, never written (NOTE [refusal log]).
    shared
        .refusal_log
        .record(TOO_MANY_CONNECTIONS, peer, &message);
    if shared.refusers.fetch_add(1, Ordering::Relaxed) >= MAX_REFUSERS {
        shared.refusers.fetch_sub(1, Ordering::Relaxed);
        return None;
    }
    let thread_shared = Arc::clone(shared);
    let spawned = thread::Builder::new()
        .name("store-refuse".into())
        .stack_size(REFUSER_STACK_BYTES)
        .spawn(move || {
            refuse(&stream, message);
            thread_shared.refusers.fetch_sub(1, Ordering::Relaxed);
            thread_shared.refusal_log.write_due(false);
        });
    match spawned {
        Ok(handle) => Some(handle),
        Err(_) => {
            shared.refusers.fetch_sub(1, Ordering::Relaxed);
            None
        }
    }
}
