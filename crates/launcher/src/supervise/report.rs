//! What a job ends with: its [`Outcome`], every rank's [`RankRecord`], and
//! the [`Report`] of both, with the launcher's exit code and summary.

use std::fmt;
use std::io;
use std::time::Duration;

use crate::exit::{RankExit, signal_exit_code, signal_name};

/// Why the job ended: success, or the first thing that went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every rank exited 0.
    Success,
    /// This rank was the first to exit non-zero or be killed.
    RankFailed {
        /// The rank.
        rank: usize,
        /// How it ended.
        exit: RankExit,
    },
    /// This rank could not be started (the ranks before it were stopped).
    SpawnFailed {
        /// The rank.
        rank: usize,
        /// The kind of the error starting it.
        kind: io::ErrorKind,
        /// The error starting it.
        error: String,
    },
    /// The job ran past `--timeout`.
    Timeout {
        /// The timeout that passed.
        after: Duration,
    },
    /// The launcher got this signal and stopped the ranks with it or with
    /// SIGTERM (`signal_for_ranks`).
    Interrupted {
        /// The signal's number (`SIGINT` is 2).
        signal: i32,
    },
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Success => write!(f, "every rank exited with code 0"),
            Self::RankFailed { rank, exit } => write!(f, "rank {rank} {exit}"),
            Self::SpawnFailed { rank, error, .. } => {
                write!(f, "rank {rank} could not be started: {error}")
            }
            Self::Timeout { after } => write!(f, "timeout after {} s", after.as_secs_f64()),
            Self::Interrupted { signal } => {
                write!(
                    f,
                    "the launcher was interrupted by {}",
                    signal_name(*signal)
                )
            }
        }
    }
}

/// What the launcher knows about one rank at the end.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RankRecord {
    /// Process id, which is also its process group id; `None`: never started.
    pub pid: Option<u32>,
    /// How it ended; `None`: still running when the launcher gave up.
    pub exit: Option<RankExit>,
    /// The launcher sent it SIGTERM (or a forwarded signal).
    pub stopped: bool,
    /// The launcher sent it SIGKILL after the grace period.
    pub killed: bool,
    // NOTE [leftover processes].
    /// Processes it left running in its process group when the job ended,
    /// which the launcher stopped.
    pub leftovers: Vec<u32>,
}

/// The result of a job: its [`Outcome`] and every rank's [`RankRecord`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// How the job ended.
    pub outcome: Outcome,
    /// Every rank's record, indexed by rank.
    pub ranks: Vec<RankRecord>,
    /// Orphaned processes outside every rank's group (they made a group of
    /// their own) that the launcher stopped when the job ended.
    pub strays: Vec<u32>,
    /// Why the launcher could not look for what the ranks left running
    /// (the process table could not be read); it signalled every rank's
    /// group instead, and exits non-zero even when the ranks succeeded.
    pub sweep_error: Option<String>,
}

impl Report {
    /// Whether every rank exited 0 and nothing they left behind escaped
    /// the launcher's notice.
    pub fn success(&self) -> bool {
        self.outcome == Outcome::Success && self.sweep_error.is_none()
    }

    /// The launcher's exit code (see the `--help` text).
    pub fn exit_code(&self) -> u8 {
        match &self.outcome {
            Outcome::Success if self.sweep_error.is_some() => 1,
            Outcome::Success => 0,
            Outcome::RankFailed { exit, .. } => exit.launcher_code(),
            Outcome::SpawnFailed { kind, .. } => match kind {
                io::ErrorKind::NotFound => 127,
                io::ErrorKind::PermissionDenied => 126,
                _ => 1,
            },
            Outcome::Timeout { .. } => 124,
            Outcome::Interrupted { signal } => signal_exit_code(*signal),
        }
    }

    /// The lines the launcher prints at the end of a failed job: the first
    /// failure, then one line per rank, then the processes the ranks left
    /// behind. For a successful job, only the latter (usually nothing).
    pub fn summary(&self) -> Vec<String> {
        if self.success() {
            return self.leftover_lines();
        }
        let mut lines = if self.outcome == Outcome::Success {
            vec![format!("job failed: {}, but see below", self.outcome)]
        } else {
            vec![format!("job failed: {}", self.outcome)]
        };
        for (rank, record) in self.ranks.iter().enumerate() {
            let what = match (&record.pid, &record.exit) {
                (None, _) => "not started".to_owned(),
                (Some(pid), None) => format!("still running after SIGKILL (pid {pid})"),
                (Some(_), Some(exit)) if record.killed => {
                    format!("{exit} (did not stop within the grace period)")
                }
                (Some(_), Some(exit)) if record.stopped => {
                    format!("{exit} (stopped by the launcher)")
                }
                (Some(_), Some(exit)) => exit.to_string(),
            };
            lines.push(format!("  rank {rank}: {what}"));
        }
        lines.extend(self.leftover_lines());
        lines
    }

    /// One line per rank that left processes behind, and one for strays.
    fn leftover_lines(&self) -> Vec<String> {
        let pids = |pids: &[u32]| {
            let list: Vec<String> = pids.iter().map(u32::to_string).collect();
            let noun = if pids.len() == 1 {
                "process"
            } else {
                "processes"
            };
            format!("{} {noun} (pid {})", pids.len(), list.join(", "))
        };
        let mut lines: Vec<String> = self
            .ranks
            .iter()
            .enumerate()
            .filter(|(_, r)| !r.leftovers.is_empty())
            .map(|(rank, r)| {
                format!(
                    "rank {rank} left {} running in its process group; the launcher stopped them",
                    pids(&r.leftovers)
                )
            })
            .collect();
        if !self.strays.is_empty() {
            lines.push(format!(
                "the ranks left {} running outside their process groups; the launcher stopped them",
                pids(&self.strays)
            ));
        }
        if let Some(why) = &self.sweep_error {
            lines.push(format!(
                "could not look for processes the ranks left running ({why}); sent SIGTERM, then SIGKILL, to every rank's process group instead; processes that left their group may still run"
            ));
        }
        lines
    }
}
