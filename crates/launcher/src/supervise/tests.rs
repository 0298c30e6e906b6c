//! Unit tests of the report: exit codes, messages, summary lines, and the
//! signals the ranks get.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use nix::sys::signal::Signal;
use signal_hook::consts::SIGUSR1;

use super::signals::{FORWARDED_SIGNALS, STOPPED_AS_SIGTERM, signal_for_ranks};
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
