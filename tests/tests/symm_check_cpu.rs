//! `symm_check` on a machine without GPUs: started as two ranks with the
//! variables `intranode-run` sets (its own `rank_vars`, so the names are
//! written once) and a store server in this process, each rank
//! must connect to the store, print `SKIPPED` and exit 0; with
//! `INTRANODE_REQUIRE_GPUS` set it must fail instead. On a machine with
//! GPUs these tests step aside (the GPU run goes through `intranode-run`).

use std::net::{IpAddr, Ipv4Addr};
use std::process::{Command, Output, Stdio};
use std::sync::LazyLock;
use std::time::Duration;

use intranode_launcher::JobConfig;
use intranode_launcher::rank_env::{foreign_rank_vars, rank_vars};
use intranode_store::{ServerConfig, TcpStoreServer};

/// The binary under test: cargo's build of it, or the device bundle's copy
/// where `run-tests.sh` names the bundle (`INTRANODE_TEST_BIN_DIR`).
static SYMM_CHECK: LazyLock<String> = LazyLock::new(|| {
    std::env::var("INTRANODE_TEST_BIN_DIR").map_or_else(
        |_| env!("CARGO_BIN_EXE_symm_check").to_owned(),
        |dir| format!("{dir}/symm_check"),
    )
});

/// The token the test's store asks for, as the launcher's would.
const TOKEN: &str = "symm-check-cpu";

/// The job `intranode-run --nproc-per-node N --gpus DEVICES -- symm_check`
/// would run, with its store on `port`.
fn job(devices: &[usize], port: u16) -> JobConfig {
    JobConfig {
        nproc: devices.len(),
        devices: devices.to_vec(),
        master_addr: "127.0.0.1".into(),
        bind_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
        master_port: port,
        timeout: None,
        grace: Duration::from_secs(5),
        failure_wait: Duration::ZERO,
        command: vec![SYMM_CHECK.as_str().into()],
    }
}

fn has_gpus() -> bool {
    intranode::gpu::device_count().is_ok_and(|n| n > 0)
}

/// Runs `world` ranks of `symm_check` with `extra` variables and `args`;
/// returns each rank's output, rank order.
fn run_ranks(world: usize, extra: &[(&str, &str)], args: &[&str]) -> Vec<Output> {
    let devices: Vec<usize> = (0..world).collect();
    run_ranks_on(&devices, extra, args)
}

/// As [`run_ranks`], rank `r` on device `devices[r]`.
fn run_ranks_on(devices: &[usize], extra: &[(&str, &str)], args: &[&str]) -> Vec<Output> {
    let world = devices.len();
    let server = TcpStoreServer::bind(ServerConfig {
        token: Some(TOKEN.into()),
        ..ServerConfig::default()
    })
    .expect("store server");
    let port = server.local_addr().port();
    let job = job(devices, port);
    let children: Vec<_> = (0..world)
        .map(|rank| {
            let mut cmd = Command::new(SYMM_CHECK.as_str());
            for var in foreign_rank_vars().chain([intranode::internals::REQUIRE_GPUS_ENV]) {
                cmd.env_remove(var);
            }
            // Exactly the variables intranode-run gives a rank.
            cmd.args(args)
                .envs(rank_vars(&job, rank, port, TOKEN))
                .envs(extra.iter().copied())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            cmd.spawn().expect("spawn symm_check")
        })
        .collect();
    let outputs = children
        .into_iter()
        .map(|c| c.wait_with_output().expect("wait for symm_check"))
        .collect();
    drop(server);
    outputs
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn skips_cleanly_without_gpus() {
    if has_gpus() {
        eprintln!("GPUs present: run symm_check under intranode-run instead");
        return;
    }
    for (rank, out) in run_ranks(2, &[], &[]).iter().enumerate() {
        let all = text(out);
        assert!(out.status.success(), "rank {rank}: {all}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains(&format!("SKIPPED symm_check rank {rank}/2")),
            "rank {rank}: {all}"
        );
    }
}

#[test]
fn required_gpus_turn_the_skip_into_a_failure() {
    if has_gpus() {
        eprintln!("GPUs present: nothing to check here");
        return;
    }
    for (rank, out) in run_ranks(
        2,
        &[("INTRANODE_REQUIRE_GPUS", "2")],
        &["--backend", "cuda-ipc"],
    )
    .iter()
    .enumerate()
    {
        let all = text(out);
        assert_eq!(out.status.code(), Some(1), "rank {rank}: {all}");
        assert!(
            String::from_utf8_lossy(&out.stderr)
                .contains(&format!("symm_check rank {rank}: FAILED")),
            "rank {rank}: {all}"
        );
    }
}

/// Every rank weighs the job's GPUs, not its own: rank 0 (device 0) must
/// fail as rank 1 (device 3) does, on 4 GPUs needed. Were it to weigh its
/// own device alone, on a 2-GPU machine it would go on into the
/// rendezvous and wait for a rank that had stopped.
#[test]
fn every_rank_weighs_the_jobs_gpus() {
    if has_gpus() {
        eprintln!("GPUs present: nothing to check here");
        return;
    }
    let outs = run_ranks_on(&[0, 3], &[("INTRANODE_REQUIRE_GPUS", "4")], &[]);
    for (rank, out) in outs.iter().enumerate() {
        let all = text(out);
        assert_eq!(out.status.code(), Some(1), "rank {rank}: {all}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("(the job uses 4 GPU(s))"),
            "rank {rank}: {all}"
        );
    }
}

#[test]
fn bad_arguments_fail_and_point_to_help() {
    let out = Command::new(SYMM_CHECK.as_str())
        .args(["--backend", "nvshmem"])
        .output()
        .expect("run symm_check");
    let all = text(&out);
    assert_eq!(out.status.code(), Some(1), "{all}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("'nvshmem' for '--backend") && stderr.contains("--help"),
        "{all}"
    );
}

#[test]
fn missing_launcher_environment_is_an_error() {
    let mut cmd = Command::new(SYMM_CHECK.as_str());
    // Neither another launcher's variables nor any intranode-run sets.
    let ours = rank_vars(&job(&[0, 1], 1), 0, 1, TOKEN);
    for var in foreign_rank_vars().chain(ours.iter().map(|(name, _)| *name)) {
        cmd.env_remove(var);
    }
    let out = cmd.output().expect("run symm_check");
    let all = text(&out);
    assert_eq!(out.status.code(), Some(1), "{all}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("launcher"),
        "{all}"
    );
}
