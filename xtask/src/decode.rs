//! `decode`: the tensor-parallel decode benchmark (`intranode-bench
//! decode`) on every local GPU, one process each under `intranode-run`,
//! results (JSON and a markdown table) in one directory.

use std::path::Path;

use anyhow::{Context, Result, bail};

/// Whole-job limit under the launcher: generous, only there to stop a job
/// that hangs somewhere no GPU wait bound covers.
const JOB_TIMEOUT_SECS: &str = "3600";

pub fn run(root: &Path, out: Option<&Path>, decode_args: &[String]) -> Result<()> {
    if decode_args
        .iter()
        .any(|a| a == "--out" || a.starts_with("--out="))
    {
        bail!("give the output directory as `cargo xtask decode --out DIR`, before `--`");
    }
    let Some(gpus) = crate::gpus::for_task("decode", 1)? else {
        return Ok(());
    };
    let out = crate::jobs::job_out_dir(root, out, "decode-out")?;
    let out_str = out.to_str().context("output path is not UTF-8")?;
    crate::jobs::build_launcher_and_bench(root)?;
    let n = gpus.to_string();
    let mut args = vec![
        "--nproc-per-node",
        &n,
        "--timeout",
        JOB_TIMEOUT_SECS,
        "--",
        "target/release/intranode-bench",
        "decode",
        "--out",
        out_str,
    ];
    args.extend(decode_args.iter().map(String::as_str));
    crate::process::run(root, "target/release/intranode-run", &args)?;
    println!(
        "intranode decode: results in {} (decode_w{gpus}.json, .md)",
        out.display()
    );
    Ok(())
}
