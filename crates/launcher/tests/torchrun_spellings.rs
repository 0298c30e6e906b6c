//! `intranode-run` started the way torchrun users type it: underscores,
//! the program without `--`, `--nproc_per_node gpu`. The ranks are `sh`.
//!
//! Bounds on time only keep a broken launcher from hanging the suite.

mod common;

use std::process::{Command, Output, Stdio};

use common::LAUNCHER;

const SCRIPT: &str =
    "echo rank $RANK of $WORLD_SIZE device $INTRANODE_DEVICE store $INTRANODE_STORE_PROTOCOL";

fn launch(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(LAUNCHER.as_str());
    cmd.args(["--timeout", "60"])
        .args(args)
        .stdin(Stdio::null())
        .env_remove("CUDA_VISIBLE_DEVICES");
    for (name, value) in env {
        cmd.env(name, value);
    }
    let out = cmd.output().expect("run intranode-run");
    eprintln!(
        "--- stdout\n{}--- stderr\n{}---",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn lines(out: &Output) -> Vec<String> {
    let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}

fn two_ranks() -> Vec<String> {
    vec![
        "[0] rank 0 of 2 device 0 store intranode".to_owned(),
        "[1] rank 1 of 2 device 1 store intranode".to_owned(),
    ]
}

#[test]
fn a_program_without_double_dash_and_underscored_options() {
    // A torchrun variable left by an outer launcher does not change the
    // store protocol the ranks are told.
    let out = launch(
        &["--nproc_per_node", "2", "--standalone", "sh", "-c", SCRIPT],
        &[("TORCHELASTIC_RUN_ID", "outer")],
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(lines(&out), two_ranks());
}

#[test]
fn the_same_job_with_double_dash() {
    let out = launch(&["--nproc-per-node=2", "--", "sh", "-c", SCRIPT], &[]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(lines(&out), two_ranks());
}

#[test]
fn gpu_counts_the_visible_devices() {
    let out = launch(
        &["--nproc_per_node", "gpu", "sh", "-c", SCRIPT],
        &[("CUDA_VISIBLE_DEVICES", "5,7")],
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(lines(&out), two_ranks());
    let out = launch(
        &["--nproc_per_node", "auto", "sh", "-c", SCRIPT],
        &[("CUDA_VISIBLE_DEVICES", "")],
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no GPU is visible"), "{stderr}");
}

#[test]
fn multi_node_options_are_refused_with_the_reason() {
    let out = launch(&["--nproc_per_node", "1", "--nnodes", "2", "true"], &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--nnodes 2"), "{stderr}");
    assert!(stderr.contains("one node"), "{stderr}");
}
