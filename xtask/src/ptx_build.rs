//! One kernel set built to PTX for one architecture.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use intranode_ptx_builder::KernelSet;

/// Builds the PTX of `set` for `arch` into `out` (default `target/ptx`)
/// and returns the file's path. A build whose sources have not changed
/// since the last one is cargo's no-op, so callers build again rather
/// than pass paths around.
pub(crate) fn build_ptx_for(
    root: &Path,
    arch: &str,
    set: KernelSet,
    out: Option<&Path>,
) -> Result<PathBuf> {
    let target_dir = root.join("target").join("ptx");
    let ptx = intranode_ptx_builder::build_ptx(&intranode_ptx_builder::PtxBuild {
        workspace_root: root.to_owned(),
        arch: arch.to_owned(),
        kernels: set,
        target_dir: target_dir.clone(),
        cargo: intranode_ptx_builder::cargo_binary(),
    })
    .with_context(|| format!("building the {} for {arch}", set.describe()))?;
    let out_dir = out.map(Path::to_owned).unwrap_or(target_dir);
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let path = out_dir.join(set.file_name(arch));
    std::fs::write(&path, ptx).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}
