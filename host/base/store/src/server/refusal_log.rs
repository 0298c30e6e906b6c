//! Refused clients: how the refusals that clients retry on start, and the
//! summary of refusals that stderr gets at most once a second (NOTE
//! [refusal log]).

use std::net::SocketAddr;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How a refusal for want of file descriptors starts; the client retries
/// on it (within its connect timeout), as on [`TOO_MANY_CONNECTIONS`].
pub(crate) const OUT_OF_DESCRIPTORS: &str = "server busy: out of file descriptors";

/// How a refusal for being over `max_connections` starts; the client
/// retries on it (within its connect timeout) instead of giving up.
pub(crate) const TOO_MANY_CONNECTIONS: &str = "too many connections";

/// Least time between two lines of the refusal summary (NOTE [refusal
/// log]).
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(1);

/// NOTE [refusal log]: were every refused client (wrong or missing token,
/// a login timeout, a malformed or oversize frame, one over the connection
/// cap) to write a warning line at once, one of them from the acceptor
/// thread, a client without a token would make about 7.5k lines a second,
/// and when the job's stderr was slow or not drained (a paused terminal, a
/// stalled log collector) the write would block, first the acceptor, then
/// every client thread, and no rank could log in. So a refusal is only
/// counted, under a lock held for a few instructions; the acceptor never
/// writes a line. A client thread that has just refused its client
/// writes the summary of what was counted, at most once per
/// [`REFUSAL_LOG_INTERVAL`] and one thread at a time (the others only
/// count), so a blocked stderr holds at most one thread; the rest is
/// written at shutdown.
#[derive(Debug, Default)]
pub(super) struct RefusalLog {
    state: Mutex<RefusalLogState>,
}

#[derive(Debug, Default)]
pub(super) struct RefusalLogState {
    /// Refusals since the last line, by kind.
    pending: Vec<(&'static str, u64)>,
    /// The latest refusal since the last line: peer and message.
    latest: Option<(SocketAddr, String)>,
    last_line: Option<Instant>,
    /// A thread is writing a line now.
    writing: bool,
    /// Lines written, for tests.
    pub(super) lines: u64,
    /// Refusals counted, for tests.
    pub(super) total: u64,
}

impl RefusalLog {
    pub(super) fn state(&self) -> MutexGuard<'_, RefusalLogState> {
        // Counters only; a poisoned lock still holds usable ones.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts one refusal; never writes (the acceptor calls it).
    pub(super) fn record(&self, kind: &'static str, peer: SocketAddr, message: &str) {
        let mut state = self.state();
        state.total += 1;
        match state.pending.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) => *n += 1,
            None => state.pending.push((kind, 1)),
        }
        // The server's own text (never a token), kept to 200 characters.
        state.latest = Some((peer, message.chars().take(200).collect()));
    }

    /// Writes the summary if one is due and no other thread is writing;
    /// `force` ignores the interval (shutdown). Never from the acceptor.
    pub(super) fn write_due(&self, force: bool) {
        let (pending, latest) = {
            let mut state = self.state();
            let due = force
                || state
                    .last_line
                    .is_none_or(|t| t.elapsed() >= REFUSAL_LOG_INTERVAL);
            if state.writing || !due || state.pending.is_empty() {
                return;
            }
            state.writing = true;
            (std::mem::take(&mut state.pending), state.latest.take())
        };
        let total: u64 = pending.iter().map(|(_, n)| n).sum();
        let kinds = pending
            .iter()
            .map(|(kind, n)| format!("{n} {kind}"))
            .collect::<Vec<_>>()
            .join(", ");
        let (peer, message) = latest.map_or_else(
            || (String::new(), String::new()),
            |(p, m)| (p.to_string(), m),
        );
        tracing::warn!(
            refused = total,
            %peer,
            %message,
            "store server refused {total} client(s) since its last report ({kinds}); \
             at most one such line a second (the latest peer and message attached)"
        );
        let mut state = self.state();
        state.writing = false;
        state.lines += 1;
        state.last_line = Some(Instant::now());
    }
}

/// The kind of a refusal, for the summary of NOTE [refusal log].
pub(super) fn refusal_kind(message: &str) -> &'static str {
    if message.starts_with("wrong token") {
        "wrong token"
    } else if message.starts_with("missing token") {
        "missing token"
    } else if message.contains("(login_timeout)") {
        "login timeout"
    } else if message.contains("(frame_timeout)") {
        "frame timeout"
    } else if message.starts_with("malformed") || message.starts_with("expected hello") {
        "malformed request"
    } else if message.starts_with(TOO_MANY_CONNECTIONS) {
        TOO_MANY_CONNECTIONS
    } else if message.starts_with(OUT_OF_DESCRIPTORS) {
        "out of descriptors"
    } else if message.starts_with("server busy") {
        "server busy"
    } else if message.contains("exceeds") {
        "oversize frame"
    } else {
        "other"
    }
}
