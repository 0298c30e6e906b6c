//! `stable-embed`: builds and runs `tests/stable-embed`, a crate outside
//! the workspace that depends on the host crate by path, with the stable
//! tool chain, from a directory outside the repository, so neither
//! `rust-toolchain.toml` nor `.cargo/config.toml` is in effect. It fails
//! if any part of the build the users get needs nightly.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The tool chain users have; `.ci/run` installs it.
const TOOLCHAIN: &str = "stable";

/// Variables a parent cargo or rustup sets that would leak our build's
/// tool chain, flags or target directory into the user's build, and the
/// switches that make the host crate build its kernels from source.
const SCRUBBED_ENV: &[&str] = &[
    "CARGO",
    "RUSTC",
    "RUSTDOC",
    "RUSTUP_TOOLCHAIN",
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "RUSTFLAGS",
    "CARGO_ENCODED_RUSTFLAGS",
    "CARGO_BUILD_RUSTFLAGS",
    "CARGO_TARGET_DIR",
    "CARGO_BUILD_TARGET_DIR",
    "CARGO_MAKEFLAGS",
    "MAKEFLAGS",
    "MFLAGS",
    "INTRANODE_PTX_ARCH",
    "INTRANODE_PTX_REBUILD",
];

pub fn run(root: &Path) -> Result<()> {
    let rustc = output(&["run", TOOLCHAIN, "rustc", "-V"])?;
    if rustc.contains("nightly") || rustc.contains("-dev") {
        bail!("`rustup run {TOOLCHAIN} rustc -V` says {rustc:?}: not a stable tool chain");
    }
    let crate_dir = root.join("tests").join("stable-embed");
    // The workspace's lock file as the seed (not committed there): the
    // same dependency versions as every other build, and nothing to keep
    // in step by hand; cargo drops what the crate does not use.
    let lock = crate_dir.join("Cargo.lock");
    std::fs::copy(root.join("Cargo.lock"), &lock)
        .with_context(|| format!("seeding {}", lock.display()))?;
    let manifest = crate_dir.join("Cargo.toml");
    let target_dir = root.join("target").join("stable-embed");
    let manifest = manifest.to_str().context("path is not UTF-8")?;
    let target_dir = target_dir.to_str().context("path is not UTF-8")?;
    let args = [
        "run",
        TOOLCHAIN,
        "cargo",
        "run",
        "--manifest-path",
        manifest,
        "--target-dir",
        target_dir,
    ];
    let outside = std::env::temp_dir();
    eprintln!(
        "xtask: ({rustc}, in {}) $ rustup {}",
        outside.display(),
        args.join(" ")
    );
    let mut cmd = Command::new("rustup");
    cmd.args(args).current_dir(&outside);
    scrub(&mut cmd);
    let status = cmd.status().context("starting rustup")?;
    if !status.success() {
        bail!(
            "the stable build of tests/stable-embed failed ({status}): the crate users get \
             must build without nightly"
        );
    }
    eprintln!("xtask: tests/stable-embed builds and runs on {rustc}");
    Ok(())
}

/// Removes what would leak this build's tool chain, flags or target
/// directory into a build outside the workspace.
pub(crate) fn scrub(cmd: &mut Command) {
    for var in SCRUBBED_ENV {
        cmd.env_remove(var);
    }
}

/// Runs `rustup ARGS` and returns its trimmed standard output.
fn output(args: &[&str]) -> Result<String> {
    let out = Command::new("rustup")
        .args(args)
        .current_dir(std::env::temp_dir())
        .env_remove("RUSTUP_TOOLCHAIN")
        .output()
        .with_context(|| format!("starting rustup {}", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "`rustup {}` failed ({}); install it with `rustup toolchain install {TOOLCHAIN} \
             --profile minimal`:\n{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}
