//! `doc`: the published crates' documentation, warnings denied.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::stable;

/// `cargo doc -p intranode --no-deps` (and the CUDA-free crates it
/// re-exports, the kernels' crate and PTX builder it is built from, and
/// the launcher: every published crate),
/// every rustdoc warning an error: the public API as users see it, then
/// with `internals` (the suites' and benchmark's API, whose links into
/// crate-private modules break otherwise unseen). The kernels' crate is
/// documented as docs.rs builds it, for the host: its shared modules
/// (`layout`, `entries`, ...), not the nvptx64-only kernels.
pub(crate) fn doc(root: &Path) -> Result<()> {
    let cargo = intranode_ptx_builder::cargo_binary();
    let cargo = cargo.to_str().context("cargo path is not UTF-8")?;
    for internals in ["0", "1"] {
        let mut args = vec!["doc"];
        for p in stable::PUBLISHED {
            args.extend(["-p", p]);
        }
        args.extend(["--no-deps", "--locked"]);
        eprintln!(
            "xtask: $ INTRANODE_INTERNALS={internals} RUSTDOCFLAGS=\"-D warnings\" {cargo} {}",
            args.join(" ")
        );
        let status = Command::new(cargo)
            .args(&args)
            .env("RUSTDOCFLAGS", "-D warnings")
            .env("INTRANODE_INTERNALS", internals)
            .current_dir(root)
            .status()
            .with_context(|| format!("starting {cargo}"))?;
        if !status.success() {
            bail!(
                "`INTRANODE_INTERNALS={internals} cargo doc` of the published crates has \
                 warnings or errors ({status})"
            );
        }
    }
    Ok(())
}
