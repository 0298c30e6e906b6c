//! The GPU jobs (`demo`, `bench`, `decode`): where they write, and the
//! release binaries they start.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::gpus;
use crate::process::run;

/// The demo: exits 0 without running anything only where the machine has
/// no GPU; GPUs that cannot be used, or fewer than 2 visible, fail it.
pub(crate) fn demo(root: &Path) -> Result<()> {
    let Some(gpus) = gpus::for_task("demo", 2)? else {
        return Ok(());
    };
    build_launcher_and_bench(root)?;
    let n = gpus.to_string();
    // The demo writes its results (`bench-out/`) where it runs: under
    // `target/`, not in the repository.
    let dir = job_out_dir(root, None, "demo-out")?;
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let release = root.join("target").join("release");
    let launcher = release.join("intranode-run");
    let bench = release.join("intranode-bench");
    run(
        &dir,
        launcher.to_str().context("path is not UTF-8")?,
        &[
            "--nproc-per-node",
            &n,
            "--timeout",
            "600",
            "--",
            bench.to_str().context("path is not UTF-8")?,
            "demo",
        ],
    )
}

/// Where a job run in the workspace root writes: `out` relative to the
/// caller's directory, else `target/<default>`.
pub(crate) fn job_out_dir(root: &Path, out: Option<&Path>, default: &str) -> Result<PathBuf> {
    Ok(match out {
        Some(p) => std::env::current_dir()
            .context("reading the current directory")?
            .join(p),
        None => root.join("target").join(default),
    })
}

/// Release builds of `intranode-run` and `intranode-bench`, the binaries
/// `demo`, `bench` and `decode` start.
pub(crate) fn build_launcher_and_bench(root: &Path) -> Result<()> {
    let cargo = intranode_ptx_builder::cargo_binary();
    let cargo = cargo.to_str().context("cargo path is not UTF-8")?;
    run(
        root,
        cargo,
        &[
            "build",
            "--release",
            "--locked",
            "-p",
            "intranode-launcher",
            "-p",
            "intranode-bench",
        ],
    )
}
