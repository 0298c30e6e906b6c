//! Connecting with retries: both clients dial a store this way, so a rank
//! may start before its store.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use crate::error::StoreError;

/// First and largest pause between connect attempts (doubling in between).
const BACKOFF_START: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// What greeting the server on one connection came to ([`dial`]).
pub(crate) enum Attempt {
    /// Connected and greeted.
    Done(TcpStream),
    /// Not to be retried: the server said no, or nothing in time.
    Fatal(StoreError),
    /// Retried within the window: a busy server, a broken connection.
    Retry(io::Error),
}

/// Connects to `name` (its addresses from `resolve`, asked again on every
/// round) and greets the server with `greet(stream, time left)`, retrying
/// with backoff until `window` has passed, so a rank may start before the
/// store. Both clients dial this way: intranode's (`TcpStore`) and
/// PyTorch's (`TorchStore`); `what` names the store in trace events.
pub(crate) fn dial(
    name: &str,
    resolve: impl Fn() -> io::Result<Vec<SocketAddr>>,
    window: Duration,
    what: &str,
    mut greet: impl FnMut(TcpStream, Duration) -> Attempt,
) -> Result<(TcpStream, Vec<SocketAddr>), StoreError> {
    let start = Instant::now();
    let deadline = start.checked_add(window);
    let left = || match deadline {
        Some(d) => d.saturating_duration_since(Instant::now()),
        None => Duration::MAX,
    };
    let mut backoff = BACKOFF_START;
    let mut last_err = io::Error::new(
        io::ErrorKind::TimedOut,
        "no connect attempt fit the timeout",
    );
    loop {
        match resolve() {
            Ok(addrs) if addrs.is_empty() => {
                last_err = io::Error::new(io::ErrorKind::NotFound, "address resolved to nothing");
            }
            Ok(addrs) => {
                for sa in &addrs {
                    let remaining = left();
                    if remaining.is_zero() {
                        break;
                    }
                    // Cap one attempt so a black-holed address does not eat
                    // the whole window before the next one is tried.
                    match TcpStream::connect_timeout(sa, remaining.min(Duration::from_secs(5))) {
                        Ok(stream) => match greet(stream, remaining) {
                            Attempt::Done(stream) => return Ok((stream, addrs)),
                            Attempt::Fatal(e) => return Err(e),
                            Attempt::Retry(e) => last_err = e,
                        },
                        Err(e) => last_err = e,
                    }
                }
            }
            Err(e) => last_err = e,
        }
        let remaining = left();
        if remaining.is_zero() {
            return Err(StoreError::Connect {
                addr: name.to_owned(),
                waited: start.elapsed(),
                source: last_err,
            });
        }
        tracing::trace!(addr = %name, error = %last_err, "{what} connect failed, retrying");
        thread::sleep(backoff.min(remaining));
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}
