//! `symm_check` on a machine without GPUs: started as two ranks with
//! torchrun-style variables and a store server in this process, each rank
//! must connect to the store, print `SKIPPED` and exit 0; with
//! `INTRANODE_REQUIRE_GPUS` set it must fail instead. On a machine with
//! GPUs these tests step aside (the GPU run goes through `intranode-run`).

use std::process::{Command, Output, Stdio};

use intranode_store::{ServerConfig, TOKEN_ENV, TcpStoreServer};

const SYMM_CHECK: &str = env!("CARGO_BIN_EXE_symm_check");

/// Rank variables of other launchers, which would contradict ours
/// (`intranode::dist_env` refuses disagreeing sources).
const FOREIGN_VARS: &[&str] = &[
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_NTASKS_PER_NODE",
    "PMI_RANK",
    "PMI_SIZE",
    "INTRANODE_DEVICE",
];

fn has_gpus() -> bool {
    intranode::gpu::device_count().is_ok_and(|n| n > 0)
}

/// Runs `world` ranks of `symm_check` with `extra` variables and `args`;
/// returns each rank's output, rank order.
fn run_ranks(world: usize, extra: &[(&str, &str)], args: &[&str]) -> Vec<Output> {
    let server = TcpStoreServer::bind(ServerConfig::default()).expect("store server");
    let port = server.local_addr().port().to_string();
    let children: Vec<_> = (0..world)
        .map(|rank| {
            let mut cmd = Command::new(SYMM_CHECK);
            for var in FOREIGN_VARS
                .iter()
                .chain(&[TOKEN_ENV, intranode::gpu::REQUIRE_GPUS_ENV])
            {
                cmd.env_remove(var);
            }
            cmd.args(args)
                .env("RANK", rank.to_string())
                .env("LOCAL_RANK", rank.to_string())
                .env("WORLD_SIZE", world.to_string())
                .env("LOCAL_WORLD_SIZE", world.to_string())
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", &port)
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

#[test]
fn bad_arguments_fail_with_usage() {
    let out = Command::new(SYMM_CHECK)
        .args(["--backend", "nvshmem"])
        .output()
        .expect("run symm_check");
    let all = text(&out);
    assert_eq!(out.status.code(), Some(1), "{all}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("usage: symm_check"),
        "{all}"
    );
}

#[test]
fn missing_launcher_environment_is_an_error() {
    let mut cmd = Command::new(SYMM_CHECK);
    for var in FOREIGN_VARS
        .iter()
        .chain(&["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"])
    {
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
