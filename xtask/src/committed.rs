//! The committed PTX (`host/ptx/`): `build-ptx --write` regenerates it,
//! `check-committed-ptx` (part of `ci`) fails when it differs from what
//! the kernel source emits now. The host crate embeds it, so users build
//! it without a nightly tool chain (`host/build.rs`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use ptx_builder::KernelSet;

/// The command that brings the committed PTX up to date.
pub const REGENERATE: &str = "cargo xtask build-ptx --write";

/// Builds both kernel sets for every committed architecture and writes
/// their PTX and the source stamp under `host/ptx/`; returns the paths
/// written.
pub fn write(root: &Path) -> Result<Vec<PathBuf>> {
    let dir = root.join(ptx_builder::COMMITTED_DIR);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut written = Vec::new();
    for arch in ptx_builder::COMMITTED_ARCHS {
        for set in KernelSet::ALL {
            let built = crate::build_ptx_for(root, arch, set, None)?;
            let dest = dir.join(set.file_name(arch));
            std::fs::copy(&built, &dest)
                .with_context(|| format!("copying {} to {}", built.display(), dest.display()))?;
            written.push(dest);
        }
    }
    let stamp = dir.join(ptx_builder::STAMP_FILE);
    std::fs::write(&stamp, format!("{}\n", current_stamp(root)?))
        .with_context(|| format!("writing {}", stamp.display()))?;
    written.push(stamp);
    Ok(written)
}

/// Fails, naming the file, the first differing line and [`REGENERATE`],
/// when a committed PTX file (of either kernel set) or the stamp differs
/// from what the kernel source gives now. `built(arch, set)` returns the
/// freshly built PTX's path.
pub fn check(root: &Path, mut built: impl FnMut(&str, KernelSet) -> Result<PathBuf>) -> Result<()> {
    let dir = root.join(ptx_builder::COMMITTED_DIR);
    let mut stale = Vec::new();
    for arch in ptx_builder::COMMITTED_ARCHS {
        for set in KernelSet::ALL {
            let fresh_path = built(arch, set)?;
            let fresh = std::fs::read_to_string(&fresh_path)
                .with_context(|| format!("reading {}", fresh_path.display()))?;
            let committed_path = dir.join(set.file_name(arch));
            match std::fs::read_to_string(&committed_path) {
                Ok(committed) if committed == fresh => {}
                Ok(committed) => stale.push(format!(
                    "{} differs from what the kernel source emits now ({})",
                    committed_path.display(),
                    first_difference(&committed, &fresh)
                )),
                Err(e) => stale.push(format!("{}: {e}", committed_path.display())),
            }
        }
    }
    let stamp_path = dir.join(ptx_builder::STAMP_FILE);
    let stamp = current_stamp(root)?;
    let committed_stamp = std::fs::read_to_string(&stamp_path).unwrap_or_default();
    if committed_stamp.trim() != stamp {
        stale.push(format!(
            "{} holds {:?}, the sources give {stamp:?}",
            stamp_path.display(),
            committed_stamp.trim()
        ));
    }
    if !stale.is_empty() {
        bail!(
            "the committed PTX is stale:\n  {}\nrun `{REGENERATE}` and commit {}/",
            stale.join("\n  "),
            ptx_builder::COMMITTED_DIR
        );
    }
    eprintln!(
        "xtask: committed PTX (production and test kernels, {}) equals what the kernel source emits",
        ptx_builder::COMMITTED_ARCHS.join(", ")
    );
    Ok(())
}

fn current_stamp(root: &Path) -> Result<String> {
    ptx_builder::source_stamp(root).context("fingerprinting the kernel sources")
}

/// Where two texts first differ, as "line N: committed `..`, built `..`".
fn first_difference(committed: &str, fresh: &str) -> String {
    let mut a = committed.lines();
    let mut b = fresh.lines();
    let mut n = 1;
    loop {
        match (a.next(), b.next()) {
            (Some(x), Some(y)) if x == y => n += 1,
            (x, y) => {
                let show = |l: Option<&str>| l.map_or("<end>".to_owned(), |l| format!("`{l}`"));
                return format!("line {n}: committed {}, built {}", show(x), show(y));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_first_differing_line() {
        assert_eq!(
            first_difference("a\nb\nc\n", "a\nx\nc\n"),
            "line 2: committed `b`, built `x`"
        );
        assert_eq!(
            first_difference("a\n", "a\nb\n"),
            "line 2: committed <end>, built `b`"
        );
    }
}
