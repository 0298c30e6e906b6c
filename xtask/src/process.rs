//! Running the commands the tasks are made of, from the workspace root.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The workspace root, from this crate's manifest directory.
pub(crate) fn root() -> Result<PathBuf> {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_owned)
        .context("xtask has no parent directory")
}

/// Runs a command in the workspace root, failing with its command line.
pub(crate) fn run(root: &Path, program: &str, args: &[&str]) -> Result<()> {
    run_env(root, &[], program, args)
}

/// [`run`] with environment variables set for the command.
pub(crate) fn run_env(
    root: &Path,
    env: &[(&str, &str)],
    program: &str,
    args: &[&str],
) -> Result<()> {
    let shown: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v} ")).collect();
    eprintln!("xtask: $ {}{program} {}", shown.concat(), args.join(" "));
    let status = Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .current_dir(root)
        .status()
        .with_context(|| format!("starting {program}"))?;
    if !status.success() {
        bail!("`{program} {}` failed ({status})", args.join(" "));
    }
    Ok(())
}

/// What turns `intranode::internals` off: the crate as users build it
/// (the workspace's `.cargo/config.toml` turns it on for the suites).
pub(crate) const AS_USERS_BUILD: &[(&str, &str)] = &[("INTRANODE_INTERNALS", "0")];
