// (Over 700 lines, 799: one end-to-end case per launcher behaviour, each
// short; splitting them would only spread the shared rank scripts.)

//! End-to-end tests of the `intranode-run` binary with `sh` as the rank.
//!
//! No test asserts tight timings: the bounds only keep a broken launcher
//! from hanging the suite, so they hold on a loaded two-core machine.

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use nix::unistd::Pid;

use common::LAUNCHER;

/// Upper bound on any one launcher run before the test calls it hung.
const HANG: Duration = Duration::from_secs(60);

struct Run {
    status: ExitStatus,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

impl Run {
    fn code(&self) -> Option<i32> {
        self.status.code()
    }
}

fn launcher(args: &[&str]) -> Command {
    let mut cmd = Command::new(LAUNCHER.as_str());
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn read_all(mut pipe: impl Read + Send + 'static) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut text = String::new();
        pipe.read_to_string(&mut text).unwrap();
        text
    })
}

/// Waits for `child` with the [`HANG`] bound, killing it when it hangs.
fn finish(mut child: Child, started: Instant) -> Run {
    let stdout = read_all(child.stdout.take().unwrap());
    let stderr = read_all(child.stderr.take().unwrap());
    finish_waiting(child, started, stdout, stderr)
}

fn run(args: &[&str]) -> Run {
    let started = Instant::now();
    finish(launcher(args).spawn().unwrap(), started)
}

/// Runs `script` with `sh -c` on `nproc` ranks, with extra launcher options.
fn run_sh(nproc: usize, options: &[&str], script: &str) -> Run {
    let nproc = nproc.to_string();
    let mut args = vec!["--nproc-per-node", &nproc];
    args.extend_from_slice(options);
    args.extend_from_slice(&["--", "sh", "-c", script]);
    run(&args)
}

#[test]
fn all_ranks_succeed_and_every_line_is_prefixed() {
    let run = run_sh(
        3,
        &[],
        "echo out $RANK; echo second $RANK; echo err $RANK >&2; printf 'tail %s' $RANK",
    );
    assert_eq!(run.code(), Some(0));
    for line in run.stdout.lines() {
        let rank = line
            .strip_prefix('[')
            .and_then(|rest| rest.split_once("] "));
        let (rank, text) = rank.unwrap_or_else(|| panic!("unprefixed line {line:?}"));
        assert!(text.ends_with(&format!(" {rank}")), "{line:?}");
    }
    let lines: BTreeSet<&str> = run.stdout.lines().collect();
    for rank in 0..3 {
        assert!(lines.contains(format!("[{rank}] out {rank}").as_str()));
        assert!(lines.contains(format!("[{rank}] second {rank}").as_str()));
        assert!(lines.contains(format!("[{rank}] tail {rank}").as_str()));
        assert!(run.stderr.contains(&format!("[{rank}] err {rank}\n")));
    }
    assert_eq!(run.stdout.lines().count(), 9);
    assert!(
        !run.stderr.contains("intranode-run:"),
        "no summary on success"
    );
}

#[test]
fn ranks_get_the_torchrun_environment() {
    let script = "echo $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT \
                  $INTRANODE_DEVICE $NCCL_NVLS_ENABLE $INTRANODE_STORE_TOKEN ${SLURM_PROCID:-unset}";
    let started = Instant::now();
    let child = launcher(&[
        "--nproc-per-node",
        "2",
        "--gpus",
        "5,3",
        "--",
        "sh",
        "-c",
        script,
    ])
    .env("SLURM_PROCID", "9")
    .env("NCCL_NVLS_ENABLE", "1")
    .spawn()
    .unwrap();
    let run = finish(child, started);
    assert_eq!(run.code(), Some(0));
    let mut ports = BTreeSet::new();
    let mut tokens = BTreeSet::new();
    for (rank, device) in [(0, 5), (1, 3)] {
        let prefix = format!("[{rank}] ");
        let line = run
            .stdout
            .lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no line from rank {rank}"));
        let fields: Vec<&str> = line.split(' ').collect();
        assert_eq!(fields.len(), 10, "{line:?}");
        assert_eq!(fields[0], rank.to_string());
        assert_eq!(fields[1], "2");
        assert_eq!(fields[2], rank.to_string());
        assert_eq!(fields[3], "2");
        assert_eq!(fields[4], "127.0.0.1");
        let port: u16 = fields[5].parse().unwrap();
        assert_ne!(port, 0);
        ports.insert(port);
        assert_eq!(fields[6], device.to_string());
        assert_eq!(fields[7], "0", "NVLink multicast must stay off");
        assert_eq!(fields[8].len(), 32);
        assert!(fields[8].bytes().all(|b| b.is_ascii_hexdigit()));
        tokens.insert(fields[8].to_owned());
        assert_eq!(fields[9], "unset", "foreign rank variables are removed");
    }
    assert_eq!(ports.len(), 1, "one store port for all ranks");
    assert_eq!(tokens.len(), 1, "one token for all ranks");
}

#[test]
fn master_port_option_is_used() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let port = port.to_string();
    let run = run_sh(1, &["--master-port", &port], "echo $MASTER_PORT");
    assert_eq!(run.code(), Some(0));
    assert_eq!(run.stdout, format!("[0] {port}\n"));
}

/// A scratch directory where ranks mark that they started; removed on
/// drop.
struct Marks(std::path::PathBuf);

impl Marks {
    fn new(test: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("intranode-run-test-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    /// NOTE [failing after the peers started]: a script in which rank
    /// `failing` exits with `code` only once all `world` ranks have
    /// started, the others sleep. Exiting at once raced the launcher: on a
    /// loaded machine the failure came before the last rank was started,
    /// start-up stopped (as it should) and that rank was "not started",
    /// not stopped, so the assertions failed. The wait is
    /// bounded (30 s) so a launcher that never starts a rank still ends.
    fn fail_after_peers_started(&self, world: usize, failing: usize, code: i32) -> String {
        format!(
            "{} if [ $RANK = {failing} ]; then {} exit {code}; fi; exec sleep 60",
            self.mark(),
            self.wait_for(world)
        )
    }

    /// Shell: this rank marks that it started.
    fn mark(&self) -> String {
        format!("touch {}/$RANK;", self.0.display())
    }

    /// Shell: waits (30 s at most) until `world` ranks have marked.
    fn wait_for(&self, world: usize) -> String {
        let dir = self.0.display();
        format!(
            "n=0; while [ $(ls {dir} | wc -l) -lt {world} ] && [ $n -lt 600 ]; \
             do sleep 0.05; n=$((n+1)); done;"
        )
    }
}

impl Drop for Marks {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn failing_rank_stops_the_others() {
    let marks = Marks::new("stops-the-others");
    let run = run_sh(
        3,
        &["--grace-secs", "20"],
        &marks.fail_after_peers_started(3, 1, 3),
    );
    assert_eq!(run.code(), Some(3));
    assert!(run.stderr.contains("job failed: rank 1 exited with code 3"));
    assert!(
        run.stderr
            .contains("rank 0: was killed by SIGTERM (15) (stopped by the launcher)")
    );
    assert!(
        run.stderr
            .contains("rank 2: was killed by SIGTERM (15) (stopped by the launcher)")
    );
    // SIGTERM stopped them, not the 20 s grace period nor their 60 s sleep.
    assert!(run.elapsed < Duration::from_secs(15), "{:?}", run.elapsed);
}

#[test]
fn rank_killed_by_signal_is_named() {
    let run = run_sh(
        2,
        &[],
        "if [ $RANK = 0 ]; then kill -9 $$; fi; exec sleep 60",
    );
    assert_eq!(run.code(), Some(128 + 9));
    assert!(
        run.stderr
            .contains("job failed: rank 0 was killed by SIGKILL (9)")
    );
    assert!(run.elapsed < Duration::from_secs(30), "{:?}", run.elapsed);
}

#[test]
fn failure_wait_lets_survivors_report_and_exit() {
    // Rank 2 is SIGKILLed; the others notice a moment later, say so and
    // exit 0 by themselves inside the wait.
    let run = run_sh(
        3,
        &["--failure-wait-secs", "30"],
        "if [ $RANK = 2 ]; then kill -9 $$; fi; sleep 0.5; echo saw rank 2 die; exit 0",
    );
    assert_eq!(run.code(), Some(128 + 9), "the first failure decides");
    assert!(
        run.stderr
            .contains("job failed: rank 2 was killed by SIGKILL (9)")
    );
    assert!(
        run.stderr
            .contains("waiting up to 30 s for the 2 other ranks")
    );
    for rank in 0..2 {
        assert!(run.stdout.contains(&format!("[{rank}] saw rank 2 die")));
        assert!(
            run.stderr
                .contains(&format!("  rank {rank}: exited with code 0\n")),
            "rank {rank} must not be stopped by the launcher"
        );
    }
    // They were not kept for the whole wait.
    assert!(run.elapsed < Duration::from_secs(25), "{:?}", run.elapsed);
}

#[test]
fn failure_wait_is_bounded() {
    let marks = Marks::new("failure-wait-bounded");
    let run = run_sh(
        2,
        &["--failure-wait-secs", "1", "--grace-secs", "20"],
        &marks.fail_after_peers_started(2, 0, 4),
    );
    assert_eq!(run.code(), Some(4));
    assert!(run.stderr.contains("job failed: rank 0 exited with code 4"));
    assert!(
        run.stderr
            .contains("rank 1: was killed by SIGTERM (15) (stopped by the launcher)")
    );
    assert!(
        run.elapsed >= Duration::from_secs(1),
        "the wait was skipped"
    );
    assert!(run.elapsed < Duration::from_secs(30), "{:?}", run.elapsed);
}

#[test]
fn timeout_stops_the_job() {
    let run = run_sh(2, &["--timeout", "1"], "exec sleep 60");
    assert_eq!(run.code(), Some(124));
    assert!(run.stderr.contains("job failed: timeout after 1 s"));
    assert!(run.elapsed >= Duration::from_secs(1));
    assert!(run.elapsed < Duration::from_secs(30), "{:?}", run.elapsed);
}

#[test]
fn rank_ignoring_sigterm_is_killed_after_grace() {
    let dir = std::env::temp_dir().join(format!(
        "intranode-run-test-{}-ignoring-sigterm",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let ready = dir.join("ready");
    let _ = std::fs::remove_file(&ready);
    // Rank 1 fails only once rank 0 ignores SIGTERM, so the SIGTERM cannot
    // arrive before the trap is set.
    let script = format!(
        "if [ $RANK = 0 ]; then trap '' TERM; touch {ready}; sleep 60; exit 0; fi; \
         while [ ! -e {ready} ]; do sleep 0.05; done; exit 5",
        ready = ready.display()
    );
    let run = run_sh(2, &["--grace-secs", "1"], &script);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(run.code(), Some(5));
    assert!(run.stderr.contains("job failed: rank 1 exited with code 5"));
    assert!(
        run.stderr
            .contains("rank 0: was killed by SIGKILL (9) (did not stop within the grace period)")
    );
    assert!(
        run.elapsed >= Duration::from_secs(1),
        "grace period was skipped"
    );
    assert!(run.elapsed < Duration::from_secs(30), "{:?}", run.elapsed);
}

/// Starts `script` on `nproc` ranks and returns once every rank has printed
/// `ready`: the launcher, the thread reading all its stdout, and the stdout
/// read up to then.
fn start_until_ready(nproc: usize, script: &str) -> (Child, thread::JoinHandle<String>, String) {
    let nproc_text = nproc.to_string();
    let mut child = launcher(&["--nproc-per-node", &nproc_text, "--", "sh", "-c", script])
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = thread::spawn(move || {
        let mut seen = String::new();
        let mut ready = 0;
        for line in BufReader::new(stdout).lines() {
            let line = line.unwrap();
            seen.push_str(&line);
            seen.push('\n');
            if line.ends_with("] ready") {
                ready += 1;
                if ready == nproc {
                    tx.send(seen.clone()).unwrap();
                }
            }
        }
        seen
    });
    let seen = rx.recv_timeout(HANG).expect("ranks never got ready");
    (child, reader, seen)
}

fn signal(child: &Child, signal: Signal) {
    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(pid, signal).unwrap();
}

fn forwarded(sent: Signal) {
    let started = Instant::now();
    let (mut child, reader, _) = start_until_ready(
        2,
        "trap 'echo got-int; exit 7' INT; trap 'echo got-term; exit 8' TERM; \
         echo ready; sleep 60 & wait",
    );
    signal(&child, sent);
    let stderr = read_all(child.stderr.take().unwrap());
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(started.elapsed() < HANG, "launcher hung after {sent}");
        thread::sleep(Duration::from_millis(10));
    };
    let stdout = reader.join().unwrap();
    let stderr = stderr.join().unwrap();
    eprintln!("--- stdout\n{stdout}--- stderr\n{stderr}---");
    let (number, word, code) = match sent {
        Signal::SIGINT => (2, "got-int", 7),
        _ => (15, "got-term", 8),
    };
    assert_eq!(status.code(), Some(128 + number));
    assert!(stdout.contains(&format!("[0] {word}\n")));
    assert!(stdout.contains(&format!("[1] {word}\n")));
    assert!(stderr.contains(&format!(
        "job failed: the launcher was interrupted by {sent} ({number})"
    )));
    assert!(stderr.contains(&format!(
        "rank 0: exited with code {code} (stopped by the launcher)"
    )));
}

#[test]
fn sigint_is_forwarded_to_the_ranks() {
    forwarded(Signal::SIGINT);
}

#[test]
fn sigterm_is_forwarded_to_the_ranks() {
    forwarded(Signal::SIGTERM);
}

/// Whether `pid` is gone or a zombie nobody has reaped yet.
fn is_dead(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
        Err(_) => true,
    }
}

#[cfg(target_os = "linux")]
#[test]
fn ranks_die_with_a_killed_launcher() {
    let (mut child, reader, _) = start_until_ready(2, "echo pid $$; echo ready; exec sleep 60");
    signal(&child, Signal::SIGKILL);
    child.wait().unwrap();
    let stdout = reader.join().unwrap();
    let pids: Vec<i32> = stdout
        .lines()
        .filter_map(|line| {
            line.split_once("] pid ")
                .map(|(_, pid)| pid.parse().unwrap())
        })
        .collect();
    assert_eq!(pids.len(), 2, "{stdout}");
    let started = Instant::now();
    while !pids.iter().all(|&pid| is_dead(pid)) {
        assert!(
            started.elapsed() < HANG,
            "ranks {pids:?} outlived the launcher"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn missing_program_is_reported() {
    let run = run(&[
        "--nproc-per-node",
        "2",
        "--",
        "/nonexistent/intranode-test-program",
    ]);
    assert_eq!(run.code(), Some(127));
    assert!(run.stderr.contains("rank 0 could not be started"));
    assert!(run.stderr.contains("/nonexistent/intranode-test-program"));
}

#[test]
fn bad_arguments_are_rejected() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["--nproc-per-node", "0", "--", "true"],
            "--nproc-per-node must be at least 1",
        ),
        (
            &["--nproc-per-node", "2", "--gpus", "0", "--", "true"],
            "--gpus lists 1 GPUs but --nproc-per-node is 2",
        ),
        (
            &["--nproc-per-node", "1", "--timeout", "soon", "--", "true"],
            "--timeout",
        ),
        (&["--nproc-per-node", "1"], "CMD"),
        (&["--", "true"], "--nproc-per-node"),
        (&["--nproc-per-node", "two", "--", "true"], "two"),
        // Values that used to panic on an `Instant` overflow or abort on
        // an allocation: now errors naming the flag.
        (
            &["--nproc-per-node", "1", "--timeout", "1e19", "--", "true"],
            "--timeout 1e19 is more than a year",
        ),
        (
            &[
                "--nproc-per-node",
                "1",
                "--grace-secs",
                "1e19",
                "--",
                "true",
            ],
            "--grace-secs 1e19 is more than a year",
        ),
        (
            &[
                "--nproc-per-node",
                "1",
                "--failure-wait-secs",
                "1e19",
                "--",
                "true",
            ],
            "--failure-wait-secs 1e19 is more than a year",
        ),
        (
            &["--nproc-per-node", "100000000000", "--", "true"],
            "--nproc-per-node 100000000000 is over the limit of 1024",
        ),
        (
            &["--nproc-per-node", "1e11", "--", "true"],
            "--nproc-per-node",
        ),
    ];
    for (args, message) in cases {
        let run = run(args);
        assert_eq!(run.code(), Some(2), "{args:?}");
        assert!(run.stderr.contains(message), "{args:?}: {}", run.stderr);
        assert!(!run.stderr.contains("panicked"), "{args:?}: {}", run.stderr);
        assert!(run.stdout.is_empty(), "{args:?}");
    }
}

/// The pids a rank printed as `child <pid>`.
fn child_pids(stdout: &str) -> Vec<i32> {
    stdout
        .lines()
        .filter_map(|line| line.split_once("] child "))
        .map(|(_, pid)| pid.trim().parse().unwrap())
        .collect()
}

fn assert_all_dead(pids: &[i32]) {
    // The launcher has returned, so they must already be gone: it reaps
    // them (subreaper) or their group is empty. A short wait covers the
    // kernel finishing an exit already under way.
    let started = Instant::now();
    while !pids.iter().all(|&pid| is_dead(pid)) {
        assert!(started.elapsed() < HANG, "{pids:?} outlived the launcher");
        thread::sleep(Duration::from_millis(20));
    }
}

/// A rank that exits leaving a background child in its group: the job
/// still succeeds, but the child is stopped and named (it was orphaned
/// before).
#[cfg(target_os = "linux")]
#[test]
fn children_left_by_a_successful_rank_are_stopped_and_reported() {
    let run = run_sh(
        2,
        &["--grace-secs", "5"],
        "sleep 300 & echo child $!; exit 0",
    );
    assert_eq!(run.code(), Some(0), "{}", run.stderr);
    let pids = child_pids(&run.stdout);
    assert_eq!(pids.len(), 2, "{}", run.stdout);
    for rank in 0..2 {
        assert!(
            run.stderr
                .contains(&format!("rank {rank} left 1 process (pid ")),
            "{}",
            run.stderr
        );
    }
    for pid in &pids {
        assert!(run.stderr.contains(&pid.to_string()), "{}", run.stderr);
    }
    assert_all_dead(&pids);
}

/// Grandchildren that escaped the rank's group (`setsid`) and were
/// orphaned come back to the launcher (subreaper) and are stopped too,
/// after a failure as after success.
#[cfg(target_os = "linux")]
#[test]
fn escaped_grandchildren_are_stopped_and_reported() {
    let has_setsid = Command::new("sh")
        .args(["-c", "command -v setsid"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_setsid {
        eprintln!("no setsid on this machine; skipping");
        return;
    }
    let run = run_sh(
        1,
        &["--grace-secs", "5"],
        "setsid sleep 300 & echo child $!; sleep 300 & echo child $!; sleep 0.2; exit 3",
    );
    assert_eq!(run.code(), Some(3), "{}", run.stderr);
    let pids = child_pids(&run.stdout);
    assert_eq!(pids.len(), 2, "{}", run.stdout);
    assert!(
        run.stderr.contains("rank 0 left 1 process (pid "),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("left 1 process (pid ")
            && run.stderr.contains("outside their process groups"),
        "{}",
        run.stderr
    );
    assert_all_dead(&pids);
}

/// A child that ignores SIGTERM is killed after the grace period.
#[cfg(target_os = "linux")]
#[test]
fn leftovers_ignoring_sigterm_are_killed() {
    let run = run_sh(
        1,
        &["--grace-secs", "0.5"],
        "sh -c 'trap \"\" TERM; echo child $$; exec sleep 300' & sleep 0.5; exit 0",
    );
    assert_eq!(run.code(), Some(0), "{}", run.stderr);
    let pids = child_pids(&run.stdout);
    assert_eq!(pids.len(), 1, "{}", run.stdout);
    assert!(
        run.stderr.contains("rank 0 left 1 process"),
        "{}",
        run.stderr
    );
    assert_all_dead(&pids);
}

#[test]
fn ranks_reach_the_store_with_their_token() {
    use intranode_store::{ClientConfig, Store, TcpStore};

    let (mut child, reader, seen) = start_until_ready(
        1,
        "echo store $MASTER_ADDR $MASTER_PORT $INTRANODE_STORE_TOKEN; echo ready; exec sleep 60",
    );
    let line = seen
        .lines()
        .find_map(|line| line.strip_prefix("[0] store "))
        .unwrap_or_else(|| panic!("no store line in {seen:?}"));
    let fields: Vec<&str> = line.split(' ').collect();
    let [addr, port, token] = fields[..] else {
        panic!("bad store line {line:?}")
    };
    let addr = format!("{addr}:{port}");
    let config = |token: &str| ClientConfig {
        timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(10),
        handshake_timeout: intranode_store::DEFAULT_HANDSHAKE_TIMEOUT,
        token: Some(token.to_owned()),
    };
    let store = TcpStore::connect(addr.as_str(), config(token)).unwrap();
    store.set("launcher-test", b"hello").unwrap();
    assert_eq!(store.get("launcher-test").unwrap(), b"hello");
    let wrong = TcpStore::connect(addr.as_str(), config("not-the-token"))
        .and_then(|store| store.get("launcher-test"));
    assert!(wrong.is_err(), "a wrong token must not reach the store");

    signal(&child, Signal::SIGTERM);
    child.wait().unwrap();
    reader.join().unwrap();
}

#[test]
fn busy_store_port_is_an_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let run = run(&[
        "--nproc-per-node",
        "1",
        "--master-port",
        &port,
        "--",
        "true",
    ]);
    assert_eq!(run.code(), Some(2));
    assert!(
        run.stderr.contains("cannot start the rendezvous store"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains(&port));
    drop(listener);
}

#[test]
fn a_signal_during_the_failure_wait_is_forwarded() {
    // Rank 0 fails; rank 1 would sit out the whole wait, but the launcher
    // gets SIGINT during it: rank 1 must get SIGINT (not SIGTERM), and the
    // first failure still decides the exit status.
    // Rank 0 fails only once rank 1 has started (NOTE [failing after the
    // peers started]): failing at once, it could stop start-up before
    // rank 1, which then never printed `ready` (seen on a loaded
    // machine).
    let marks = Marks::new("signal-during-wait");
    let script = format!(
        "{} if [ $RANK = 0 ]; then {} exit 3; fi; \
         trap 'echo got-int; exit 7' INT; trap 'echo got-term; exit 8' TERM; \
         echo ready; sleep 60 & wait",
        marks.mark(),
        marks.wait_for(2)
    );
    let started = Instant::now();
    let mut child = launcher(&[
        "--nproc-per-node",
        "2",
        "--failure-wait-secs",
        "50",
        "--",
        "sh",
        "-c",
        &script,
    ])
    .spawn()
    .unwrap();
    // Both events must have happened before the signal: rank 1 set its
    // traps (it printed `ready`) and the launcher is inside its wait.
    let stdout_pipe = child.stdout.take().unwrap();
    let (ready_tx, ready_rx) = mpsc::channel();
    let stdout = thread::spawn(move || {
        let mut seen = String::new();
        for line in BufReader::new(stdout_pipe).lines() {
            let line = line.unwrap();
            if line.ends_with("] ready") {
                ready_tx.send(()).unwrap();
            }
            seen.push_str(&line);
            seen.push('\n');
        }
        seen
    });
    let stderr_pipe = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let stderr = thread::spawn(move || {
        let mut seen = String::new();
        for line in BufReader::new(stderr_pipe).lines() {
            let line = line.unwrap();
            if line.contains("waiting up to 50 s") {
                tx.send(()).unwrap();
            }
            seen.push_str(&line);
            seen.push('\n');
        }
        seen
    });
    ready_rx.recv_timeout(HANG).expect("rank 1 never got ready");
    rx.recv_timeout(HANG)
        .expect("the launcher never started its failure wait");
    signal(&child, Signal::SIGINT);
    let run = finish_waiting(child, started, stdout, stderr);
    assert_eq!(run.code(), Some(3), "the first failure decides");
    assert!(
        run.stdout.contains("[1] got-int\n"),
        "SIGINT was not forwarded"
    );
    assert!(run.stderr.contains("got SIGINT (2) while waiting"));
    assert!(run.stderr.contains("sending SIGINT to the 1 running rank"));
    assert!(run.elapsed < Duration::from_secs(40), "{:?}", run.elapsed);
}

/// [`finish`] for a child whose pipes are already being read.
fn finish_waiting(
    mut child: Child,
    started: Instant,
    stdout: thread::JoinHandle<String>,
    stderr: thread::JoinHandle<String>,
) -> Run {
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > HANG {
            child.kill().unwrap();
            panic!("launcher still running after {HANG:?}");
        }
        thread::sleep(Duration::from_millis(10));
    };
    let run = Run {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
        elapsed: started.elapsed(),
    };
    eprintln!("--- stdout\n{}--- stderr\n{}---", run.stdout, run.stderr);
    run
}
