//! Forwarding a rank's output line by line with a `[rank] ` prefix.
//!
//! Each rank's stdout and stderr are pipes read by a thread of their own.
//! Every line is written to the launcher's stream in one `write_all` of
//! prefix and line together, under the stream's lock, so lines of different
//! ranks never interleave within a line.

use std::io::{self, BufRead, BufReader, Read, Write};

/// Longest piece written as one line. A rank that prints more without a
/// newline (a binary blob, a long progress bar) gets it cut into pieces of
/// this size, each with its prefix, instead of the launcher buffering it
/// all in memory.
pub const MAX_LINE_BYTES: u64 = 64 * 1024;

/// The prefix of every line of `rank`: `[3] `.
pub fn prefix(rank: usize) -> Vec<u8> {
    format!("[{rank}] ").into_bytes()
}

/// Reads `reader` to its end and hands each line, prefixed and ending in
/// `\n`, to `sink`. A last line without a newline gets one.
///
/// Once `sink` fails (the launcher's stdout is a closed pipe, say) reading
/// goes on without writing, so the rank never blocks on a full pipe; the
/// first write error is returned at the end.
pub fn forward_lines<R, F>(reader: R, prefix: &[u8], mut sink: F) -> io::Result<()>
where
    R: Read,
    F: FnMut(&[u8]) -> io::Result<()>,
{
    let mut reader = BufReader::new(reader);
    let mut line = Vec::with_capacity(256);
    let mut write_error = None;
    loop {
        line.clear();
        line.extend_from_slice(prefix);
        let read = match (&mut reader)
            .take(MAX_LINE_BYTES)
            .read_until(b'\n', &mut line)
        {
            Ok(read) => read,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(err),
        };
        if read == 0 {
            break;
        }
        if line.last() != Some(&b'\n') {
            line.push(b'\n');
        }
        if write_error.is_none()
            && let Err(err) = sink(&line)
        {
            write_error = Some(err);
        }
    }
    write_error.map_or(Ok(()), Err)
}

/// Where [`forward_lines`] puts each prefixed line.
pub type Sink = fn(&[u8]) -> io::Result<()>;

/// A sink writing whole lines to the launcher's stdout.
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
    use super::*;

    fn collect(input: &[u8], rank: usize) -> (Vec<Vec<u8>>, io::Result<()>) {
        let mut lines = Vec::new();
        let result = forward_lines(input, &prefix(rank), |line| {
            lines.push(line.to_vec());
            Ok(())
        });
        (lines, result)
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
        let result = forward_lines(&b"a\nb\nc\n"[..], b"", |_| {
            calls += 1;
            Err(io::Error::from(io::ErrorKind::BrokenPipe))
        });
        assert_eq!(calls, 1);
        assert_eq!(result.unwrap_err().kind(), io::ErrorKind::BrokenPipe);
    }
}
