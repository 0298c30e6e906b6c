//! Progress of long sweeps, shown by rank 0 only.
//!
//! On a terminal it is an `indicatif` bar on stderr. Under `intranode-run`
//! stderr is a pipe that the launcher forwards line by line with a `[rank]`
//! prefix, so a redrawn bar would show nothing until its end; there it is
//! a plain line each time another tenth of the work is done, or after
//! `LINE_EVERY` without one, so device logs show progress without
//! flooding.
//!
//! Callers step it between configurations, never inside a timed region;
//! the bar has no steady tick (no thread drawing while we measure host
//! time).

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Longest silence between two plain progress lines.
const LINE_EVERY: Duration = Duration::from_secs(30);

#[derive(Debug)]
enum Sink {
    Off,
    Bar(ProgressBar),
    Lines { last_line: Instant, last_done: u64 },
}

#[derive(Debug)]
pub struct Progress {
    what: &'static str,
    total: u64,
    done: u64,
    start: Instant,
    sink: Sink,
}

impl Progress {
    /// `total` steps of `what`; shown only where `show` (rank 0).
    pub fn new(what: &'static str, total: usize, show: bool) -> Self {
        let total = total as u64;
        let sink = if !show {
            Sink::Off
        } else if std::io::stderr().is_terminal() {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr())
                .with_style(
                    ProgressStyle::with_template(
                        "{prefix} [{bar:30}] {pos}/{len} {wide_msg} {elapsed}",
                    )
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
                );
            bar.set_prefix(what);
            Sink::Bar(bar)
        } else {
            Sink::Lines {
                last_line: Instant::now(),
                last_done: 0,
            }
        };
        Progress {
            what,
            total,
            done: 0,
            start: Instant::now(),
            sink,
        }
    }

    /// One step done; `label` says which (`1 MiB two-shot`).
    pub fn step(&mut self, label: &str) {
        self.done += 1;
        let (done, total) = (self.done, self.total);
        match &mut self.sink {
            Sink::Off => {}
            Sink::Bar(bar) => {
                bar.set_message(label.to_owned());
                bar.set_position(done);
            }
            Sink::Lines {
                last_line,
                last_done,
            } => {
                if line_due(done, *last_done, total, last_line.elapsed()) {
                    eprintln!(
                        "{}: {done}/{total} ({}%) done, last {label}, {:.0} s elapsed",
                        self.what,
                        done * 100 / total.max(1),
                        self.start.elapsed().as_secs_f64()
                    );
                    *last_line = Instant::now();
                    *last_done = done;
                }
            }
        }
    }

    /// Removes the bar (the table follows); plain lines end with the last
    /// step's line.
    pub fn finish(self) {
        if let Sink::Bar(bar) = &self.sink {
            bar.finish_and_clear();
        }
    }
}

/// A plain line is due at the last step, when `done` enters a new tenth
/// of `total` since the last line, or after [`LINE_EVERY`] of silence.
fn line_due(done: u64, last_done: u64, total: u64, since_last: Duration) -> bool {
    done >= total
        || done * 10 / total.max(1) > last_done * 10 / total.max(1)
        || since_last >= LINE_EVERY
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines printed for `total` quick steps.
    fn lines_for(total: u64) -> Vec<u64> {
        let mut last = 0;
        let mut lines = Vec::new();
        for done in 1..=total {
            if line_due(done, last, total, Duration::ZERO) {
                lines.push(done);
                last = done;
            }
        }
        lines
    }

    #[test]
    fn a_line_per_tenth_and_at_the_end() {
        assert_eq!(lines_for(44), [5, 9, 14, 18, 22, 27, 31, 36, 40, 44]);
        assert_eq!(lines_for(3), [1, 2, 3]);
        assert_eq!(lines_for(1000).len(), 10);
    }

    #[test]
    fn a_line_after_a_long_silence() {
        assert!(!line_due(2, 1, 1000, Duration::from_secs(5)));
        assert!(line_due(2, 1, 1000, LINE_EVERY));
    }
}
