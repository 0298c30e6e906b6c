//! [`DeadlineStream`]: one deadline for every read and write of a call
//! (NOTE [client trusts no server] in `client.rs`).

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// A stream whose every read and write is bounded by what is left until
/// one deadline (NOTE [client trusts no server]); past it they fail with
/// `TimedOut`, saying so. Both clients use it, for every call and for
/// the handshake.
pub(crate) struct DeadlineStream<'a> {
    stream: &'a TcpStream,
    deadline: Option<Instant>,
    budget: Duration,
    /// Bytes read so far: a deadline that passes before the first byte of
    /// a reply leaves the connection in step (NOTE [late replies]).
    read_bytes: u64,
}

impl<'a> DeadlineStream<'a> {
    /// `budget` from now; a budget too large for `Instant` has no deadline.
    pub(crate) fn new(stream: &'a TcpStream, budget: Duration) -> Self {
        Self {
            stream,
            deadline: Instant::now().checked_add(budget),
            budget,
            read_bytes: 0,
        }
    }

    /// Bytes read through this stream so far.
    pub(crate) fn read_bytes(&self) -> u64 {
        self.read_bytes
    }

    fn left(&self) -> io::Result<Option<Duration>> {
        let Some(deadline) = self.deadline else {
            return Ok(None);
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(self.late());
        }
        Ok(Some(left))
    }

    fn late(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "timed out: the store did not answer within {} ms",
                self.budget.as_millis()
            ),
        )
    }

    fn check(&self, result: io::Result<usize>) -> io::Result<usize> {
        match result {
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Err(self.late())
            }
            other => other,
        }
    }
}

impl Read for DeadlineStream<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.set_read_timeout(self.left()?)?;
        let result = (&*self.stream).read(buf);
        if let Ok(n) = result {
            self.read_bytes += n as u64;
        }
        self.check(result)
    }
}

impl Write for DeadlineStream<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.stream.set_write_timeout(self.left()?)?;
        let result = (&*self.stream).write(buf);
        self.check(result)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
