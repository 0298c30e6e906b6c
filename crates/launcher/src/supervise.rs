// (Over 700 lines, 1035: the waiter, reader and stopper threads share one
// state machine; a fifth of the file is its tests.)

//! Starting the ranks, watching them, and stopping them all when one fails.
//!
//! Every rank gets a waiter thread (blocked in `wait`) and two output
//! threads (see [`crate::output`]); waiters and the signal thread send
//! `Event`s down one channel, and the launcher's main thread is the only
//! one that decides anything. The job ends in one of three ways:
//!
//! - every rank exits 0: [`Outcome::Success`];
//! - something goes wrong first (a rank fails or cannot start, the timeout
//!   passes, the launcher gets SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1,
//!   SIGUSR2 or SIGALRM, during start-up too, which then stops starting
//!   ranks): every rank still running gets SIGTERM (after a rank failure,
//!   only once `--failure-wait-secs` has passed without them all exiting
//!   by themselves: NOTE [failure wait]) (or the launcher's own SIGINT,
//!   SIGHUP or SIGQUIT, forwarded: `signal_for_ranks`) to its process
//!   group, and SIGKILL when it is still there after the grace period;
//! - a second such signal during that grace period sends SIGKILL at once.
//!
//! When the job is over, however it ended, whatever the ranks left running
//! in their process groups (or orphaned) is stopped and reported: NOTE
//! [leftover processes] in `leftovers.rs`.
//!
//! NOTE [pid reuse]: on Linux a rank is reaped only once the job is over
//! and its group swept (NOTE [leftover processes]), so its pid and group id
//! cannot be reused while the launcher may still signal them. Elsewhere
//! the waiter reaps it, and its group is signalled only while its exit has
//! not been recorded: a new group could take the id only if every member
//! had gone and the kernel had cycled through the whole pid space in
//! between, which we accept.

use std::fmt;
use std::io::{self, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::exit::signal_exit_code;
pub use crate::exit::{RankExit, signal_name};

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use signal_hook::consts::{SIGALRM, SIGCHLD, SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};
use signal_hook::iterator::Signals;

use crate::leftovers::{self, Scan};
use crate::output::{self, forward_lines};
use crate::rank_env::{foreign_rank_vars, rank_vars};
use crate::{JobConfig, LaunchError};

/// How long ranks may take to go away after SIGKILL before the launcher
/// gives up on them. Killing a process that holds a GPU context waits for
/// the driver to tear the context down, which can take seconds.
const KILL_WAIT: Duration = Duration::from_secs(30);

/// How long the output threads may take to drain the pipes once every rank
/// has exited. Only a rank that handed its stdout to a daemon outside its
/// process group keeps a pipe open past that.
const OUTPUT_DRAIN: Duration = Duration::from_secs(2);

/// How often the sweep of leftover processes looks again.
const SWEEP_POLL: Duration = Duration::from_millis(20);

/// When `/proc` cannot be read, how long the sweep goes on after sending
/// SIGKILL to every rank's group: long enough for `/proc` to become
/// readable again (descriptors freed), short because it cannot see
/// whether the groups are empty.
const BLIND_KILL_WAIT: Duration = Duration::from_secs(1);

/// `now + after`, capped at a year from now: options are validated to at
/// most a year, but a [`JobConfig`] built by hand may hold anything, and
/// `Instant` arithmetic must not overflow.
fn deadline_in(after: Duration) -> Instant {
    let now = Instant::now();
    let cap = Duration::from_secs(crate::cli::MAX_SECS);
    now.checked_add(after.min(cap)).unwrap_or(now)
}

/// The signals that end a job and are forwarded to the ranks as they came:
/// each means "stop" to any program (SIGHUP: the terminal went away;
/// SIGQUIT: Ctrl-\\).
const FORWARDED_SIGNALS: [i32; 4] = [SIGINT, SIGTERM, SIGHUP, SIGQUIT];

/// The signals that end a job, the ranks getting SIGTERM instead: their
/// default action ends a process, so left unhandled they would end the
/// launcher with no sweep, but a rank may give them another meaning (a
/// checkpoint on SIGUSR1, which Slurm's `--signal` sends before a time
/// limit; its own timer on SIGALRM) and keep running, to be SIGKILLed
/// after the grace period with no chance to clean up.
const STOPPED_AS_SIGTERM: [i32; 3] = [SIGUSR1, SIGUSR2, SIGALRM];

/// Every signal that ends a job: the launcher stops the ranks, sweeps
/// their groups and exits with 128 + the signal's number.
fn stop_signals() -> impl Iterator<Item = i32> {
    FORWARDED_SIGNALS.into_iter().chain(STOPPED_AS_SIGTERM)
}

/// What the ranks get first when the launcher got `signal` (or `None`: the
/// job ends for another reason): the signal itself when it is one of
/// [`FORWARDED_SIGNALS`], SIGTERM otherwise.
fn signal_for_ranks(signal: Option<i32>) -> Signal {
    signal
        .filter(|s| FORWARDED_SIGNALS.contains(s))
        .and_then(|s| Signal::try_from(s).ok())
        .unwrap_or(Signal::SIGTERM)
}

/// Pids of the ranks started so far. Held while a rank is being started,
/// so the orphan reaper never takes a rank that exits at once for an
/// orphan (NOTE [leftover processes]).
#[derive(Debug, Default, Clone)]
struct RankPids(Arc<Mutex<Vec<u32>>>);

impl RankPids {
    fn lock(&self) -> MutexGuard<'_, Vec<u32>> {
        // A list of pids cannot be left half-updated.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

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
    /// Processes it left running in its process group when the job ended,
    /// which the launcher stopped (NOTE [leftover processes]).
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

/// Something the main thread has to react to.
#[derive(Debug)]
enum Event {
    Exited { rank: usize, exit: RankExit },
    Signal(i32),
}

/// What waiting for the next [`Event`] gave.
enum Next {
    Event(Event),
    Deadline,
    Disconnected,
}

/// Writes one launcher message to stderr, marked as the launcher's.
fn log(message: &str) {
    // Nothing sensible is left to do when stderr itself is gone.
    let _ = writeln!(io::stderr().lock(), "intranode-run: {message}");
}

/// Starts `job.nproc` ranks with the store at `master_port` and `token`,
/// supervises them to the end and reports what happened.
pub fn run_ranks(job: &JobConfig, master_port: u16, token: &str) -> Result<Report, LaunchError> {
    // NOTE [leftover processes]: orphans of the ranks come to us, not init.
    if let Err(err) = leftovers::become_subreaper() {
        log(&format!(
            "cannot become a child subreaper ({err}): processes that leave their rank's group will not be stopped"
        ));
    }
    let (tx, events) = mpsc::channel();
    let rank_pids = RankPids::default();
    // Installed before the first rank starts, so a Ctrl-C at any time
    // reaches the ranks that exist. SIGCHLD reaps orphans while the job
    // runs (NOTE [leftover processes]).
    let mut signals =
        Signals::new(stop_signals().chain([SIGCHLD])).map_err(LaunchError::Signals)?;
    let signal_handle = signals.handle();
    let signal_tx = tx.clone();
    let reaper_pids = rank_pids.clone();
    let signal_thread = thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                if signal == SIGCHLD {
                    leftovers::reap_orphans(&reaper_pids.lock());
                    continue;
                }
                // After the job, when nobody listens, keep reaping.
                let _ = signal_tx.send(Event::Signal(signal));
            }
        })
        .map_err(LaunchError::SignalThread)?;
    let mut supervisor = Supervisor {
        job,
        master_port,
        token,
        tx: Some(tx),
        events,
        ranks: vec![RankRecord::default(); job.nproc],
        children: (0..job.nproc).map(|_| None).collect(),
        rank_pids,
        running: 0,
        output_threads: Vec::new(),
    };
    let report = supervisor.run();
    signal_handle.close();
    // The signal thread ends once the handle is closed; a join error would
    // mean it panicked, which changes nothing about the job.
    let _ = signal_thread.join();
    report
}

struct Supervisor<'a> {
    job: &'a JobConfig,
    master_port: u16,
    token: &'a str,
    /// Dropped once every rank is started, so that the channel reports
    /// `Disconnected` instead of blocking forever if every sender is gone.
    tx: Option<Sender<Event>>,
    events: Receiver<Event>,
    ranks: Vec<RankRecord>,
    /// Each started rank, reaped once the job is over (NOTE [pid reuse]).
    children: Vec<Option<Child>>,
    /// The same ranks' pids, shared with the orphan reaper.
    rank_pids: RankPids,
    /// Ranks started whose exit is not recorded yet.
    running: usize,
    output_threads: Vec<JoinHandle<()>>,
}

impl Supervisor<'_> {
    fn run(&mut self) -> Result<Report, LaunchError> {
        let deadline = self.job.timeout.map(deadline_in);
        let mut outcome = None;
        for rank in 0..self.job.nproc {
            // A signal or a failed rank ends start-up: a Ctrl-C was ignored
            // until all ranks had started before (11.7 s for 1024).
            outcome = self.startup_event();
            if outcome.is_some() {
                break;
            }
            if let Err(err) = self.start_rank(rank) {
                let program = self.job.command[0].to_string_lossy().into_owned();
                outcome = Some(Outcome::SpawnFailed {
                    rank,
                    kind: err.kind(),
                    error: format!("{program}: {err}"),
                });
                break;
            }
        }
        self.tx = None;

        while outcome.is_none() && self.running > 0 {
            match self.next_event(deadline) {
                Next::Event(Event::Exited { rank, exit }) => {
                    self.record(rank, exit.clone());
                    if !exit.success() {
                        outcome = Some(Outcome::RankFailed { rank, exit });
                    }
                }
                Next::Event(Event::Signal(signal)) => {
                    outcome = Some(Outcome::Interrupted { signal });
                }
                Next::Deadline => {
                    let after = self.job.timeout.unwrap_or_default();
                    outcome = Some(Outcome::Timeout { after });
                }
                Next::Disconnected => {
                    let running = self.running;
                    self.signal_running(Signal::SIGKILL);
                    let _ = self.sweep_leftovers();
                    self.reap();
                    return Err(LaunchError::WaitersGone { running });
                }
            }
        }
        let outcome = outcome.unwrap_or(Outcome::Success);
        let mut forwarded = None;
        if self.running > 0 && matches!(outcome, Outcome::RankFailed { .. }) {
            forwarded = self.wait_after_failure(&outcome, deadline);
        }
        if self.running > 0 {
            self.shut_down(&outcome, forwarded);
        }
        let (strays, sweep_error) = self.sweep_leftovers();
        self.reap();
        self.drain_output();
        Ok(Report {
            outcome,
            ranks: self.ranks.clone(),
            strays,
            sweep_error,
        })
    }

    /// Takes what has happened so far while ranks are being started: exits
    /// are recorded, and the first failure or stop signal is returned.
    fn startup_event(&mut self) -> Option<Outcome> {
        loop {
            match self.events.try_recv() {
                Ok(Event::Exited { rank, exit }) => {
                    self.record(rank, exit.clone());
                    if !exit.success() {
                        return Some(Outcome::RankFailed { rank, exit });
                    }
                }
                Ok(Event::Signal(signal)) => return Some(Outcome::Interrupted { signal }),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => return None,
            }
        }
    }

    /// NOTE [failure wait]: when a rank dies, the others usually find out
    /// through a collective that fails (a store timeout, a GPU wait that
    /// runs out) and can say which peer is missing. Stopping them at once
    /// would lose that report, so after a rank failure the launcher can
    /// leave them `--failure-wait-secs` to exit by themselves; exits in
    /// that window are recorded, the first failure stays the outcome, and
    /// the job timeout or a signal to the launcher ends the wait early; that
    /// signal is returned, to be passed on to the ranks ([`signal_for_ranks`]).
    fn wait_after_failure(
        &mut self,
        outcome: &Outcome,
        job_deadline: Option<Instant>,
    ) -> Option<i32> {
        if self.job.failure_wait.is_zero() {
            return None;
        }
        let ranks = if self.running == 1 { "rank" } else { "ranks" };
        log(&format!(
            "{outcome}; waiting up to {} s for the {} other {ranks} to exit",
            self.job.failure_wait.as_secs_f64(),
            self.running
        ));
        let wait_deadline = deadline_in(self.job.failure_wait);
        let deadline = job_deadline.map_or(wait_deadline, |d| d.min(wait_deadline));
        while self.running > 0 {
            match self.next_event(Some(deadline)) {
                Next::Event(Event::Exited { rank, exit }) => self.record(rank, exit),
                Next::Event(Event::Signal(signal)) => {
                    log(&format!(
                        "got {} while waiting: stopping the ranks",
                        signal_name(signal)
                    ));
                    return Some(signal);
                }
                Next::Deadline | Next::Disconnected => break,
            }
        }
        None
    }

    /// Stops every running rank: the first signal (SIGTERM, or the one the
    /// launcher got, as the outcome or during the failure wait, where
    /// [`signal_for_ranks`] forwards it), then SIGKILL after the grace
    /// period.
    fn shut_down(&mut self, outcome: &Outcome, forwarded: Option<i32>) {
        let got = match outcome {
            Outcome::Interrupted { signal } => Some(*signal),
            _ => forwarded,
        };
        let first = signal_for_ranks(got);
        let ranks = if self.running == 1 { "rank" } else { "ranks" };
        log(&format!(
            "{outcome}; sending {} to the {} running {ranks}, SIGKILL after {} s",
            first.as_str(),
            self.running,
            self.job.grace.as_secs_f64()
        ));
        self.signal_running(first);
        let grace_deadline = deadline_in(self.job.grace);
        while self.running > 0 {
            match self.next_event(Some(grace_deadline)) {
                Next::Event(Event::Exited { rank, exit }) => self.record(rank, exit),
                Next::Event(Event::Signal(signal)) => {
                    log(&format!(
                        "got {} again: killing the ranks now",
                        signal_name(signal)
                    ));
                    break;
                }
                Next::Deadline | Next::Disconnected => break,
            }
        }
        if self.running == 0 {
            return;
        }
        self.signal_running(Signal::SIGKILL);
        let kill_deadline = deadline_in(KILL_WAIT);
        while self.running > 0 {
            match self.next_event(Some(kill_deadline)) {
                Next::Event(Event::Exited { rank, exit }) => self.record(rank, exit),
                Next::Event(Event::Signal(_)) => {}
                Next::Deadline | Next::Disconnected => break,
            }
        }
    }

    fn next_event(&self, deadline: Option<Instant>) -> Next {
        let received = match deadline {
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                self.events.recv_timeout(left)
            }
            None => self
                .events
                .recv()
                .map_err(|_| RecvTimeoutError::Disconnected),
        };
        match received {
            Ok(event) => Next::Event(event),
            Err(RecvTimeoutError::Timeout) => Next::Deadline,
            Err(RecvTimeoutError::Disconnected) => Next::Disconnected,
        }
    }

    fn record(&mut self, rank: usize, exit: RankExit) {
        if let Some(record) = self.ranks.get_mut(rank)
            && record.exit.is_none()
        {
            record.exit = Some(exit);
            self.running -= 1;
        }
    }

    /// Sends `signal` to the process group of every rank still running
    /// (see NOTE [pid reuse]).
    fn signal_running(&mut self, signal: Signal) {
        for (rank, record) in self.ranks.iter_mut().enumerate() {
            let Some(pid) = record.pid else { continue };
            if record.exit.is_some() {
                continue;
            }
            if signal == Signal::SIGKILL {
                record.killed = true;
            } else {
                record.stopped = true;
            }
            signal_group(rank, pid, signal);
        }
    }

    /// Starts one rank with its own process group, its environment and its
    /// waiter and output threads.
    fn start_rank(&mut self, rank: usize) -> io::Result<()> {
        let job = self.job;
        let Some(tx) = self.tx.clone() else {
            return Err(io::Error::other(
                "ranks are started only before supervision",
            ));
        };
        let mut cmd = Command::new(&job.command[0]);
        cmd.args(&job.command[1..])
            // A rank in a background process group that reads the terminal
            // would be stopped by SIGTTIN, so ranks get no stdin.
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Own process group: see the Architecture Invariant in lib.rs.
            .process_group(0);
        for var in foreign_rank_vars() {
            cmd.env_remove(var);
        }
        for (name, value) in rank_vars(job, rank, self.master_port, self.token) {
            cmd.env(name, value);
        }
        die_with_launcher(&mut cmd);
        let rank_pids = self.rank_pids.clone();
        let mut pids = rank_pids.lock();
        let mut child = cmd.spawn()?;
        let pid = child.id();
        pids.push(pid);
        drop(pids);
        if let Some(record) = self.ranks.get_mut(rank) {
            record.pid = Some(pid);
        }
        self.running += 1;
        let pipes = (child.stdout.take(), child.stderr.take());
        if let Some(slot) = self.children.get_mut(rank) {
            *slot = Some(child);
        }
        if let Err(err) = spawn_waiter(rank, pid, tx) {
            signal_group(rank, pid, Signal::SIGKILL);
            self.record(
                rank,
                RankExit::Unknown(format!("killed: no waiter thread: {err}")),
            );
            return Err(err);
        }
        let (stdout, stderr) = pipes;
        let prefix = output::prefix(rank);
        let mut readers: Vec<(Box<dyn io::Read + Send>, output::Sink)> = Vec::new();
        if let Some(stdout) = stdout {
            readers.push((Box::new(stdout), output::stdout_sink));
        }
        if let Some(stderr) = stderr {
            readers.push((Box::new(stderr), output::stderr_sink));
        }
        for (reader, sink) in readers {
            let prefix = prefix.clone();
            let spawned = thread::Builder::new()
                .name(format!("rank{rank}-output"))
                .spawn(move || {
                    // A read error ends forwarding for this pipe; a write
                    // error (our stdout closed) only stops the writing.
                    // Neither affects the rank, so both are dropped here.
                    let _ = forward_lines(reader, &prefix, sink);
                });
            match spawned {
                Ok(handle) => self.output_threads.push(handle),
                Err(err) => {
                    // The waiter reports the killed rank as usual.
                    signal_group(rank, pid, Signal::SIGKILL);
                    return Err(err);
                }
            }
        }
        Ok(())
    }

    /// NOTE [leftover processes]: stops whatever the ranks left running,
    /// in their groups or orphaned to the launcher: SIGTERM, then SIGKILL
    /// after the grace period. Records the pids per rank; returns the
    /// strays, and why the process table could not be read if it could
    /// not (then every rank's group is signalled blind, and that is
    /// reported rather than taken for a clean sweep).
    fn sweep_leftovers(&mut self) -> (Vec<u32>, Option<String>) {
        let launcher = std::process::id();
        let leaders: Vec<u32> = self.ranks.iter().filter_map(|r| r.pid).collect();
        let mut strays: Vec<u32> = Vec::new();
        let mut announced = false;
        let mut unreadable: Option<String> = None;
        let term_deadline = deadline_in(self.job.grace);
        let kill_deadline = deadline_in(self.job.grace.saturating_add(KILL_WAIT));
        // Blind, a group's emptiness cannot be seen: SIGKILL it once, then
        // stop after this long.
        let mut blind_kill_sent: Option<Instant> = None;
        loop {
            let now = Instant::now();
            let signal = if now < term_deadline {
                Signal::SIGTERM
            } else {
                Signal::SIGKILL
            };
            let found = match leftovers::scan(launcher, &leaders, &leaders) {
                Ok(found) => found,
                Err(err) => {
                    if unreadable.is_none() {
                        log(&format!(
                            "cannot read /proc to look for processes the ranks left running ({err}); \
                             sending SIGTERM to every rank's process group, SIGKILL after {} s",
                            self.job.grace.as_secs_f64()
                        ));
                    }
                    unreadable = Some(format!("cannot read /proc: {err}"));
                    if let Some(sent) = blind_kill_sent {
                        if sent.elapsed() >= BLIND_KILL_WAIT {
                            break;
                        }
                    } else {
                        self.signal_all_groups(signal);
                        if signal == Signal::SIGKILL {
                            blind_kill_sent = Some(now);
                        }
                    }
                    thread::sleep(SWEEP_POLL);
                    continue;
                }
            };
            // Readable again: what the scan shows is the truth.
            if unreadable.take().is_some() {
                log("/proc is readable again; looking for what the ranks left running");
            }
            if found.is_empty() {
                break;
            }
            if now >= kill_deadline {
                log(&format!(
                    "processes left by the ranks survive SIGKILL: {found:?}"
                ));
                break;
            }
            let fresh = self.note_leftovers(&found, &mut strays);
            if fresh && !announced {
                announced = true;
                log(&format!(
                    "the ranks left processes running; sending SIGTERM, SIGKILL after {} s",
                    self.job.grace.as_secs_f64()
                ));
            }
            // Signal fresh finds at once, and everything once a phase
            // starts; repeating SIGTERM to the same process is harmless.
            self.signal_leftovers(&found, signal);
            thread::sleep(SWEEP_POLL);
        }
        strays.sort_unstable();
        (strays, unreadable)
    }

    /// Sends `signal` to every rank's process group, exited ranks included
    /// (their zombies hold the group ids: NOTE [pid reuse]).
    fn signal_all_groups(&self, signal: Signal) {
        for (rank, record) in self.ranks.iter().enumerate() {
            if let Some(pid) = record.pid {
                signal_group(rank, pid, signal);
            }
        }
    }

    /// Adds what `found` names to the records; whether anything was new.
    fn note_leftovers(&mut self, found: &Scan, strays: &mut Vec<u32>) -> bool {
        let mut fresh = false;
        for &(group, pid) in &found.members {
            if let Some(record) = self.ranks.iter_mut().find(|r| r.pid == Some(group))
                && !record.leftovers.contains(&pid)
            {
                record.leftovers.push(pid);
                fresh = true;
            }
        }
        for &pid in &found.strays {
            if !strays.contains(&pid) {
                strays.push(pid);
                fresh = true;
            }
        }
        fresh
    }

    fn signal_leftovers(&self, found: &Scan, signal: Signal) {
        let mut groups: Vec<u32> = found.members.iter().map(|&(g, _)| g).collect();
        groups.dedup();
        for group in groups {
            if let Some(rank) = self.ranks.iter().position(|r| r.pid == Some(group)) {
                // The rank's zombie holds the group id (NOTE [pid reuse]).
                signal_group(rank, group, signal);
            }
        }
        for &pid in &found.strays {
            // Our own children (re-parented to the subreaper), so the pid
            // cannot have been reused while we have not reaped them.
            if let Ok(raw) = i32::try_from(pid) {
                let _ = nix::sys::signal::kill(Pid::from_raw(raw), signal);
            }
        }
    }

    /// Reaps every rank that has exited (NOTE [pid reuse]).
    fn reap(&mut self) {
        for child in self.children.iter_mut().flatten() {
            // A rank that survived SIGKILL stays unreaped; nothing more
            // can be done for it.
            let _ = child.try_wait();
        }
    }

    /// Waits a little for the output threads, so that the ranks' last lines
    /// come out before the summary.
    fn drain_output(&mut self) {
        let deadline = Instant::now() + OUTPUT_DRAIN;
        while Instant::now() < deadline && self.output_threads.iter().any(|t| !t.is_finished()) {
            thread::sleep(Duration::from_millis(5));
        }
        for handle in self.output_threads.drain(..) {
            if handle.is_finished() {
                // A panicked output thread has nothing more to tell.
                let _ = handle.join();
            }
        }
    }
}

/// Starts the thread that waits for the rank `pid` and reports its exit
/// (leaving it unreaped where it can: NOTE [leftover processes]).
fn spawn_waiter(rank: usize, pid: u32, tx: Sender<Event>) -> io::Result<()> {
    thread::Builder::new()
        .name(format!("rank{rank}-wait"))
        .spawn(move || {
            let exit = leftovers::wait_for_exit(pid);
            // The receiver is gone only when the launcher is done anyway.
            let _ = tx.send(Event::Exited { rank, exit });
        })
        .map(drop)
}

/// Signals the process group of a rank; a group that is already gone is
/// not an error.
fn signal_group(rank: usize, pid: u32, signal: Signal) {
    let Ok(pgid) = i32::try_from(pid) else { return };
    match killpg(Pid::from_raw(pgid), signal) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(err) => log(&format!(
            "cannot send {} to rank {rank} (process group {pgid}): {err}",
            signal.as_str()
        )),
    }
}

/// Makes the kernel SIGKILL the rank when the launcher dies, so that a
/// launcher killed with SIGKILL (a CI timeout, the OOM killer) leaves no
/// rank holding a GPU. Only the rank's first process gets the signal.
///
/// NOTE [parent death signal]: Linux sends it when the *thread* that
/// forked the child exits; ranks are started from the main thread, which
/// lives as long as the launcher.
#[cfg(target_os = "linux")]
fn die_with_launcher(cmd: &mut Command) {
    let launcher = nix::unistd::getpid();
    // SAFETY: the closure runs in the forked child before exec, where only
    // async-signal-safe work is allowed. It makes two system calls,
    // prctl(2) and getppid(2), through nix wrappers that neither allocate
    // nor lock, and builds its errors from raw errno values, which does
    // not allocate either.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
                .map_err(|errno| io::Error::from_raw_os_error(errno as i32))?;
            // The launcher died between fork and prctl: the signal will
            // never come, so do not start at all.
            if nix::unistd::getppid() != launcher {
                return Err(io::Error::from_raw_os_error(Errno::ESRCH as i32));
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_launcher(_cmd: &mut Command) {}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    use super::*;

    fn report(outcome: Outcome) -> Report {
        Report {
            outcome,
            ranks: vec![RankRecord::default()],
            strays: Vec::new(),
            sweep_error: None,
        }
    }

    #[test]
    fn exit_codes() {
        assert_eq!(report(Outcome::Success).exit_code(), 0);
        let failed = |exit| Outcome::RankFailed { rank: 0, exit };
        assert_eq!(report(failed(RankExit::Code(3))).exit_code(), 3);
        assert_eq!(report(failed(RankExit::Code(-1))).exit_code(), 1);
        assert_eq!(report(failed(RankExit::Signal(9))).exit_code(), 137);
        assert_eq!(report(failed(RankExit::Unknown("x".into()))).exit_code(), 1);
        let timeout = Outcome::Timeout {
            after: Duration::from_secs(2),
        };
        assert_eq!(report(timeout).exit_code(), 124);
        assert_eq!(report(Outcome::Interrupted { signal: 2 }).exit_code(), 130);
        let spawn = |kind| Outcome::SpawnFailed {
            rank: 0,
            kind,
            error: String::new(),
        };
        assert_eq!(report(spawn(io::ErrorKind::NotFound)).exit_code(), 127);
        assert_eq!(
            report(spawn(io::ErrorKind::PermissionDenied)).exit_code(),
            126
        );
    }

    #[test]
    fn what_the_ranks_get_for_each_stop_signal() {
        for signal in FORWARDED_SIGNALS {
            assert_eq!(signal_for_ranks(Some(signal)) as i32, signal);
        }
        for signal in STOPPED_AS_SIGTERM {
            assert_eq!(signal_for_ranks(Some(signal)), Signal::SIGTERM);
        }
        assert_eq!(signal_for_ranks(None), Signal::SIGTERM);
        let usr1 = Outcome::Interrupted { signal: SIGUSR1 };
        assert_eq!(i32::from(report(usr1.clone()).exit_code()), 128 + SIGUSR1);
        assert_eq!(
            usr1.to_string(),
            format!("the launcher was interrupted by SIGUSR1 ({SIGUSR1})")
        );
    }

    #[test]
    fn messages() {
        assert_eq!(RankExit::Code(3).to_string(), "exited with code 3");
        assert_eq!(RankExit::Signal(9).to_string(), "was killed by SIGKILL (9)");
        assert_eq!(signal_name(40), "signal 40");
        let timeout = Outcome::Timeout {
            after: Duration::from_millis(1500),
        };
        assert_eq!(timeout.to_string(), "timeout after 1.5 s");
        let timeout = Outcome::Timeout {
            after: Duration::from_secs(2),
        };
        assert_eq!(timeout.to_string(), "timeout after 2 s");
    }

    #[test]
    fn summary_lines() {
        let report = Report {
            outcome: Outcome::RankFailed {
                rank: 1,
                exit: RankExit::Code(3),
            },
            ranks: vec![
                RankRecord {
                    pid: Some(10),
                    exit: Some(RankExit::Signal(15)),
                    stopped: true,
                    killed: false,
                    leftovers: vec![20, 21],
                },
                RankRecord {
                    pid: Some(11),
                    exit: Some(RankExit::Code(3)),
                    ..Default::default()
                },
                RankRecord {
                    pid: Some(12),
                    exit: Some(RankExit::Signal(9)),
                    stopped: true,
                    killed: true,
                    leftovers: Vec::new(),
                },
                RankRecord {
                    pid: Some(13),
                    exit: None,
                    stopped: true,
                    killed: true,
                    leftovers: Vec::new(),
                },
                RankRecord::default(),
            ],
            strays: vec![30],
            sweep_error: None,
        };
        assert_eq!(
            report.summary(),
            [
                "job failed: rank 1 exited with code 3",
                "  rank 0: was killed by SIGTERM (15) (stopped by the launcher)",
                "  rank 1: exited with code 3",
                "  rank 2: was killed by SIGKILL (9) (did not stop within the grace period)",
                "  rank 3: still running after SIGKILL (pid 13)",
                "  rank 4: not started",
                "rank 0 left 2 processes (pid 20, 21) running in its process group; the launcher stopped them",
                "the ranks left 1 process (pid 30) running outside their process groups; the launcher stopped them",
            ]
        );
        assert!(self::report(Outcome::Success).summary().is_empty());
    }

    #[test]
    fn status_conversion() {
        assert_eq!(
            RankExit::from_status(ExitStatus::from_raw(3 << 8)),
            RankExit::Code(3)
        );
        assert_eq!(
            RankExit::from_status(ExitStatus::from_raw(9)),
            RankExit::Signal(9)
        );
        assert!(RankExit::from_status(ExitStatus::from_raw(0)).success());
    }
}
