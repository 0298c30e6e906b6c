//! Forwarding a rank's output line by line with a `[rank] ` prefix.
//!
//! Each rank's stdout and stderr are pipes read by a thread of their own.
//! Lines are written to the launcher's stream in whole lines, prefix and
//! line together, in one `write_all` under the stream's lock, so lines of
//! different ranks never interleave within a line.
//!
// NOTE [batched forwarding] is the paragraph below.
//! The lines already read from a rank's pipe go out together, in one write and
//! one flush, up to [`MAX_BATCH_BYTES`]; a batch ends as soon as what is
//! buffered holds no complete line, that is before any read that may wait for
//! the rank. So a rank that prints a line now and then still shows it at once,
//! and so do the complete lines read together with the start of a line not
//! finished yet (`"A\npartial"`): only that partial line waits, for its
//! newline, the end of the stream or [`MAX_LINE_BYTES`]. One write and one
//! flush per line took 9 minutes of a full core for a billion lines.

use std::io::{self, BufRead, BufReader, Read, Write};

/// Longest piece written as one line. A rank that prints more without a
/// newline (a binary blob, a long progress bar) gets it cut into pieces of
/// this size, each with its prefix, instead of the launcher buffering it
/// all in memory.
pub const MAX_LINE_BYTES: u64 = 64 * 1024;

// NOTE [batched forwarding].
/// Most bytes of lines written together, in one write (see
/// [`crate::output`]).
pub const MAX_BATCH_BYTES: usize = 64 * 1024;

/// The prefix of every line of `rank`: `[3] `.
pub fn prefix(rank: usize) -> Vec<u8> {
    format!("[{rank}] ").into_bytes()
}

// NOTE [batched forwarding].
/// Reads `reader` to its end and hands its lines, each prefixed and ending
/// in `\n`, to `sink`: whole lines, as many together as were already read
/// (see [`crate::output`]). A last line without a newline gets one.
///
/// Once `sink` fails (the launcher's stdout is a closed pipe, say) reading
/// goes on without writing, so the rank never blocks on a full pipe; the
/// first write error is returned at the end.
pub fn forward_lines<R, F>(reader: R, prefix: &[u8], mut sink: F) -> io::Result<()>
where
    R: Read,
    F: FnMut(&[u8]) -> io::Result<()>,
{
    let mut reader = BufReader::with_capacity(MAX_BATCH_BYTES, reader);
    let mut batch = Vec::with_capacity(MAX_BATCH_BYTES + prefix.len() + 1);
    let mut write_error = None;
    let mut send = |batch: &mut Vec<u8>| {
        if !batch.is_empty()
            && write_error.is_none()
            && let Err(err) = sink(batch)
        {
            write_error = Some(err);
        }
        batch.clear();
    };
    loop {
        let start = batch.len();
        batch.extend_from_slice(prefix);
        let read = match (&mut reader)
            .take(MAX_LINE_BYTES)
            .read_until(b'\n', &mut batch)
        {
            Ok(read) => read,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {
                batch.truncate(start);
                continue;
            }
            Err(err) => {
                batch.truncate(start);
                send(&mut batch);
                return Err(err);
            }
        };
        if read == 0 {
            batch.truncate(start);
            break;
        }
        if batch.last() != Some(&b'\n') {
            batch.push(b'\n');
        }
        // No complete line buffered: the next read may wait for the rank,
        // maybe for ever, so show what we have now. A buffered partial line
        // is not enough to go on: reading it to its end waits too.
        if !holds_complete_line(reader.buffer()) || batch.len() >= MAX_BATCH_BYTES {
            send(&mut batch);
        }
    }
    send(&mut batch);
    write_error.map_or(Ok(()), Err)
}

/// Whether the next line can be read from `buffered` alone, without a
/// read from the pipe that may block: a newline ends it there, or the
/// [`MAX_LINE_BYTES`] cap does before it. (Without a newline the batch
/// goes out even when the cap would end the line within the buffer; that
/// costs one write, never a wait.)
fn holds_complete_line(buffered: &[u8]) -> bool {
    buffered.contains(&b'\n')
}

/// Where [`forward_lines`] puts whole prefixed lines.
pub type Sink = fn(&[u8]) -> io::Result<()>;

/// A sink writing whole lines to the launcher's stdout, with one flush
/// per batch.
pub fn stdout_sink(line: &[u8]) -> io::Result<()> {
    let mut out = io::stdout().lock();
    out.write_all(line)?;
    out.flush()
}

/// A sink writing whole lines to the launcher's stderr.
pub fn stderr_sink(line: &[u8]) -> io::Result<()> {
    io::stderr().lock().write_all(line)
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::thread;

    use super::*;

    fn collect(input: &[u8], rank: usize) -> (Vec<Vec<u8>>, io::Result<()>) {
        let mut lines = Vec::new();
        let result = forward_lines(input, &prefix(rank), |batch| {
            assert_eq!(batch.last(), Some(&b'\n'), "whole lines only");
            lines.extend(batch.split_inclusive(|b| *b == b'\n').map(<[u8]>::to_vec));
            Ok(())
        });
        (lines, result)
    }

    /// Not one write and one flush per line: 100 000 short lines already
    /// in the pipe go out in a handful of writes, each of whole lines.
    #[test]
    fn lines_already_read_are_written_together() {
        let lines = 100_000;
        let input: Vec<u8> = (0..lines)
            .flat_map(|i| format!("{i}\n").into_bytes())
            .collect();
        let mut writes = 0;
        let mut forwarded = 0;
        forward_lines(&input[..], b"[0] ", |batch| {
            assert!(batch.starts_with(b"[0] ") && batch.ends_with(b"\n"));
            writes += 1;
            forwarded += batch.iter().filter(|b| **b == b'\n').count();
            Ok(())
        })
        .unwrap();
        assert_eq!(forwarded, lines);
        assert!(writes <= lines / 1000, "{writes} writes for {lines} lines");
    }

    /// A pipe whose writer sends chunks down a channel: a read returns
    /// (part of) one chunk, and waits, as a pipe does, while none is there.
    struct Pipe(mpsc::Receiver<Vec<u8>>, Vec<u8>);

    impl Read for Pipe {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.1.is_empty() {
                match self.0.recv() {
                    Ok(chunk) => self.1 = chunk,
                    Err(_) => return Ok(0),
                }
            }
            let n = self.1.len().min(buf.len());
            buf[..n].copy_from_slice(&self.1[..n]);
            self.1.drain(..n);
            Ok(n)
        }
    }

    /// The thread running [`forward_lines`] on a [`Pipe`] (no prefix).
    type Forwarder = thread::JoinHandle<io::Result<()>>;

    /// [`forward_lines`] on a [`Pipe`] on a thread: the pipe's writer, the
    /// batches as they are written, and the thread.
    fn forward_pipe() -> (mpsc::Sender<Vec<u8>>, mpsc::Receiver<Vec<u8>>, Forwarder) {
        let (tx, rx) = mpsc::channel::<Vec<u8>>();
        let (seen_tx, seen_rx) = mpsc::channel::<Vec<u8>>();
        let forwarder = thread::spawn(move || {
            forward_lines(Pipe(rx, Vec::new()), b"", |batch| {
                seen_tx
                    .send(batch.to_vec())
                    .map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))
            })
        });
        (tx, seen_rx, forwarder)
    }

    /// A line that arrives alone is written at once, not held for company.
    #[test]
    fn a_lone_line_is_written_before_the_next_arrives() {
        let (tx, seen_rx, forwarder) = forward_pipe();
        tx.send(b"first\n".to_vec()).unwrap();
        // The pipe stays open: the line must come out while it does.
        assert_eq!(seen_rx.recv().unwrap(), b"first\n");
        tx.send(b"second\n".to_vec()).unwrap();
        assert_eq!(seen_rx.recv().unwrap(), b"second\n");
        drop(tx);
        forwarder.join().unwrap().unwrap();
    }

    /// Complete lines read together with the start of an unfinished line
    /// are written at once; only the unfinished line waits for its end.
    #[test]
    fn complete_lines_before_a_partial_line_are_written_at_once() {
        let (tx, seen_rx, forwarder) = forward_pipe();
        tx.send(b"A\nB\npartial".to_vec()).unwrap();
        // The pipe stays open and the partial line unfinished; a bound, not
        // a timing: a forwarder that holds the lines never sends them.
        let seen = seen_rx.recv_timeout(std::time::Duration::from_secs(10));
        assert_eq!(seen.as_deref(), Ok(&b"A\nB\n"[..]));
        tx.send(b" line\n".to_vec()).unwrap();
        assert_eq!(seen_rx.recv().unwrap(), b"partial line\n");
        // A partial line at the end of the stream gets its newline.
        tx.send(b"C\nlast".to_vec()).unwrap();
        drop(tx);
        let rest: Vec<u8> = seen_rx.iter().flatten().collect();
        assert_eq!(rest, b"C\nlast\n");
        forwarder.join().unwrap().unwrap();
    }

    #[test]
    fn prefixes_each_line() {
        let (lines, result) = collect(b"a\nbb\n\nccc\n", 2);
        result.unwrap();
        assert_eq!(
            lines,
            [&b"[2] a\n"[..], b"[2] bb\n", b"[2] \n", b"[2] ccc\n"]
        );
    }

    #[test]
    fn keeps_trailing_line_without_newline() {
        let (lines, result) = collect(b"first\nlast", 0);
        result.unwrap();
        assert_eq!(lines, [&b"[0] first\n"[..], b"[0] last\n"]);
    }

    #[test]
    fn empty_input_gives_no_lines() {
        let (lines, result) = collect(b"", 0);
        result.unwrap();
        assert!(lines.is_empty());
    }

    #[test]
    fn non_utf8_passes_through() {
        let (lines, result) = collect(b"\xff\xfe\n", 1);
        result.unwrap();
        assert_eq!(lines, [&b"[1] \xff\xfe\n"[..]]);
    }

    #[test]
    fn long_lines_are_cut() {
        let max = usize::try_from(MAX_LINE_BYTES).unwrap();
        let input = vec![b'x'; max * 2 + 10];
        let (lines, result) = collect(&input, 7);
        result.unwrap();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0].len(), 4 + max + 1);
        assert_eq!(lines[2], b"[7] xxxxxxxxxx\n");
        for line in &lines {
            assert!(line.starts_with(b"[7] "));
        }
    }

    #[test]
    fn keeps_reading_after_sink_fails() {
        let mut calls = 0;
        // One line per read, so that each is its own batch.
        struct Slow<'a>(&'a [u8]);
        impl Read for Slow<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let n = self
                    .0
                    .iter()
                    .position(|b| *b == b'\n')
                    .map_or(self.0.len(), |i| i + 1);
                let n = n.min(buf.len());
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let result = forward_lines(Slow(b"a\nb\nc\n"), b"", |_| {
            calls += 1;
            Err(io::Error::from(io::ErrorKind::BrokenPipe))
        });
        assert_eq!(calls, 1);
        assert_eq!(result.unwrap_err().kind(), io::ErrorKind::BrokenPipe);
    }
}
