//! A rank SIGKILLed during rendezvous and during a barrier, over the real
//! TCP store under the real `intranode-run`: every survivor must get an
//! error naming the dead rank within the store timeout, and the launcher
//! must report the victim's death as the first failure while leaving the
//! survivors time to report theirs (`--failure-wait-secs`).
//!
//! The ranks are this test executable started again in child mode
//! ([`fault_rank_child`]); they run the GPU-free steps of the library's
//! rendezvous (`intranode::internals::exchange_requests`, the store
//! barrier of `StoreExchange`). The GPU phases (barrier and all-reduce
//! kernels) are `intranode-suite faults`.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use intranode::dist_env::DistEnv;
use intranode::internals::{RendezvousRequest, exchange_requests};
use intranode_store::{ClientConfig, Store, StoreError, StoreExchange, TcpStore};

use common::LAUNCHER;

/// `phase:victim` in the child ranks.
const CHILD_ENV: &str = "INTRANODE_LAUNCHER_FAULT_CHILD";

/// Store timeout of the ranks: the bound survivors must meet.
const STORE_TIMEOUT_MS: u64 = 1500;

fn request(rank: usize, world: usize) -> RendezvousRequest {
    RendezvousRequest {
        protocol_version: intranode::internals::PROTOCOL_VERSION,
        hostname: intranode::internals::hostname(),
        rank,
        world,
        device: rank,
        pci_bus_id: format!("0000:{:02x}:00.0", 0x10 + rank),
        uuid: [rank as u8 + 1; 16],
        pid: std::process::id(),
        buffer_bytes: 1 << 20,
        backend: intranode::config::Backend::Vmm,
        debug: intranode::config::DebugLevel::Off,
        push_shape: intranode::config::PushShape::default(),
        sms: 132,
    }
}

/// The missing ranks an error names, if it is the store's verdict.
fn missing_ranks(e: &intranode::Error) -> Option<&[usize]> {
    match e {
        intranode::Error::Store {
            source: StoreError::MissingRanks { missing, .. },
            ..
        } => Some(missing),
        _ => None,
    }
}

/// One rank. The victim SIGKILLs itself at its phase; a survivor prints
/// `rank R: ok: ...` and returns when it got an error naming the victim
/// within the bound, and panics (exit 101) otherwise.
#[test]
fn fault_rank_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (phase, victim) = spec.split_once(':').expect("phase:victim");
    let victim: usize = victim.parse().expect("victim rank");
    let env = DistEnv::from_env().expect("rank environment");
    let (rank, world) = (env.rank, env.world_size);
    let config = ClientConfig::try_from_env().expect("store settings");
    let store = TcpStore::connect(env.store_addr().expect("store address"), config)
        .expect("connect to the store");
    let die = || {
        println!("rank {rank}: SIGKILL myself at {phase}");
        nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL).expect("raise");
    };
    let mut exchange = StoreExchange::new("intranode/comm/0");
    let published = Ok(request(rank, world));
    let start;
    let outcome = match phase {
        "rendezvous" => {
            if rank == victim {
                die();
            }
            start = Instant::now();
            exchange_requests(&store, &mut exchange, rank, world, &published).map(drop)
        }
        "barrier" => {
            // The group is up: every rank's request arrived.
            let all = exchange_requests(&store, &mut exchange, rank, world, &published)
                .expect("rendezvous of the whole group");
            assert_eq!(all.len(), world);
            if rank == victim {
                die();
            }
            start = Instant::now();
            exchange
                .barrier(&store, rank, world)
                .map_err(|source| intranode::Error::Store {
                    op: "barrier",
                    rank,
                    source,
                })
        }
        other => panic!("unknown phase {other}"),
    };
    let waited = start.elapsed();
    let err = outcome.expect_err("the victim never arrives");
    assert_eq!(
        missing_ranks(&err),
        Some(&[victim][..]),
        "rank {rank}: {err}"
    );
    let bound = Duration::from_millis(STORE_TIMEOUT_MS);
    assert!(
        waited >= bound && waited < bound + Duration::from_secs(20),
        "rank {rank}: error after {waited:?}"
    );
    println!("rank {rank}: ok: after {} ms: {err}", waited.as_millis());
    let _ = store.num_keys();
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

fn run_job(phase: &str, victim: usize, world: usize) -> Run {
    let exe = std::env::current_exe().expect("current exe");
    let world_text = world.to_string();
    let started = Instant::now();
    let out = Command::new(LAUNCHER.as_str())
        .args(["--nproc-per-node", &world_text, "--failure-wait-secs", "60"])
        .args(["--timeout", "120", "--"])
        .arg(exe)
        .args([
            "--exact",
            "fault_rank_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, format!("{phase}:{victim}"))
        .env(
            intranode_store::STORE_TIMEOUT_ENV,
            STORE_TIMEOUT_MS.to_string(),
        )
        .stdin(Stdio::null())
        .output()
        .expect("run intranode-run");
    let run = Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        elapsed: started.elapsed(),
    };
    eprintln!("--- stdout\n{}--- stderr\n{}---", run.stdout, run.stderr);
    run
}

fn check_job(phase: &str, victim: usize, world: usize) {
    let run = run_job(phase, victim, world);
    // The victim's SIGKILL is the first failure and decides the status.
    assert_eq!(run.code, Some(128 + 9));
    assert!(
        run.stderr.contains(&format!(
            "job failed: rank {victim} was killed by SIGKILL (9)"
        )),
        "{}",
        run.stderr
    );
    for rank in (0..world).filter(|&r| r != victim) {
        // Each survivor saw the error naming the victim and exited 0 by
        // itself, inside the launcher's failure wait.
        // The harness may print `test fault_rank_child ... ` first.
        let (prefix, ok) = (format!("[{rank}] "), format!("rank {rank}: ok: after "));
        let line = run
            .stdout
            .lines()
            .find(|l| l.starts_with(&prefix) && l.contains(&ok))
            .unwrap_or_else(|| panic!("rank {rank} printed no verdict"));
        assert!(line.contains(&format!("rank(s) [{victim}]")), "{line}");
        assert!(
            run.stderr
                .contains(&format!("  rank {rank}: exited with code 0\n")),
            "rank {rank} did not exit 0 by itself"
        );
    }
    assert!(run.elapsed < Duration::from_secs(100), "{:?}", run.elapsed);
}

#[test]
fn rank_killed_during_rendezvous_is_named_by_every_survivor() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    check_job("rendezvous", 2, 4);
}

#[test]
fn rank_killed_before_a_barrier_is_named_by_every_survivor() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    check_job("barrier", 0, 3);
}
