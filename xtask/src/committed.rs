//! The committed kernels (`host/ptx/`: the PTX, xz-compressed for the
//! production set, and the production cubins, xz-compressed): `build-ptx --write`
//! regenerates them, `build-ptx --check` (part of `ci`) fails when the
//! PTX differs from what the kernel source emits now, and `check-ptx`
//! when a committed cubin differs from what the pinned ptxas makes of
//! that PTX. The host crate embeds them, so users build it without a
//! nightly tool chain or ptxas (`host/build.rs`).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use intranode_ptx_builder::KernelSet;

/// The command that brings the committed PTX up to date.
pub const REGENERATE: &str = "cargo xtask build-ptx --write";

/// Builds both kernel sets for every committed architecture and writes
/// their PTX (the production PTX xz-compressed), the production cubins
/// (`intranode_ptx_builder::CUBIN_ARCHS`, assembled by the pinned ptxas,
/// xz-compressed)
/// and the source stamp under `host/ptx/`; returns the paths written.
pub fn write(root: &Path) -> Result<Vec<PathBuf>> {
    let dir = root.join(intranode_ptx_builder::COMMITTED_DIR);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut written = Vec::new();
    for arch in intranode_ptx_builder::COMMITTED_ARCHS {
        for set in KernelSet::ALL {
            let built = crate::ptx_build::build_ptx_for(root, arch, set, None)?;
            let dest = dir.join(set.committed_file_name(arch));
            let text =
                std::fs::read(&built).with_context(|| format!("reading {}", built.display()))?;
            let bytes = if is_xz_name(&dest) { xz(&text)? } else { text };
            std::fs::write(&dest, bytes).with_context(|| format!("writing {}", dest.display()))?;
            written.push(dest);
            if set == KernelSet::Production && intranode_ptx_builder::CUBIN_ARCHS.contains(arch) {
                let cubin = crate::ptxas::assemble(root, &built, arch)?;
                let dest = dir.join(intranode_ptx_builder::cubin_file_name(arch));
                std::fs::write(&dest, xz(&cubin)?)
                    .with_context(|| format!("writing {}", dest.display()))?;
                written.push(dest);
            }
        }
    }
    if let Some(arch) = intranode_ptx_builder::CUBIN_ARCHS
        .iter()
        .find(|a| !intranode_ptx_builder::COMMITTED_ARCHS.contains(a))
    {
        bail!(
            "a cubin for {arch} needs its PTX committed (intranode_ptx_builder::COMMITTED_ARCHS)"
        );
    }
    let stamp = dir.join(intranode_ptx_builder::STAMP_FILE);
    std::fs::write(&stamp, format!("{}\n", current_stamp(root)?))
        .with_context(|| format!("writing {}", stamp.display()))?;
    written.push(stamp);
    Ok(written)
}

/// Fails, naming the file and [`REGENERATE`], when the committed cubin of
/// `arch` differs from `fresh_cubin` (what the pinned ptxas made of the
/// current production PTX), or is missing while `arch` is one of
/// `intranode_ptx_builder::CUBIN_ARCHS`. Nothing to check for other architectures.
pub fn check_cubin(root: &Path, arch: &str, fresh_cubin: &Path) -> Result<()> {
    if !intranode_ptx_builder::CUBIN_ARCHS.contains(&arch) {
        return Ok(());
    }
    let path = root
        .join(intranode_ptx_builder::COMMITTED_DIR)
        .join(intranode_ptx_builder::cubin_file_name(arch));
    let committed = std::fs::read(&path)
        .with_context(|| format!("reading {} (run `{REGENERATE}`)", path.display()))
        .and_then(|packed| {
            unxz(&packed).with_context(|| format!("unpacking {}", path.display()))
        })?;
    let fresh =
        std::fs::read(fresh_cubin).with_context(|| format!("reading {}", fresh_cubin.display()))?;
    if committed != fresh {
        bail!(
            "{} ({} bytes unpacked) differs from what the pinned ptxas makes of the current \
             PTX ({}, {} bytes); run `{REGENERATE}` and commit {}/",
            path.display(),
            committed.len(),
            fresh_cubin.display(),
            fresh.len(),
            intranode_ptx_builder::COMMITTED_DIR
        );
    }
    eprintln!(
        "xtask: committed cubin {} equals what ptxas makes of the current PTX",
        path.display()
    );
    Ok(())
}

/// Fails, naming the file, the first differing line and [`REGENERATE`],
/// when a committed PTX file (of either kernel set) or the stamp differs
/// from what the kernel source gives now. `built(arch, set)` returns the
/// freshly built PTX's path.
pub fn check(root: &Path, mut built: impl FnMut(&str, KernelSet) -> Result<PathBuf>) -> Result<()> {
    let dir = root.join(intranode_ptx_builder::COMMITTED_DIR);
    let mut stale = Vec::new();
    for arch in intranode_ptx_builder::COMMITTED_ARCHS {
        for set in KernelSet::ALL {
            let fresh_path = built(arch, set)?;
            let fresh = std::fs::read_to_string(&fresh_path)
                .with_context(|| format!("reading {}", fresh_path.display()))?;
            let committed_path = dir.join(set.committed_file_name(arch));
            match read_committed_text(&committed_path) {
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
    let stamp_path = dir.join(intranode_ptx_builder::STAMP_FILE);
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
            intranode_ptx_builder::COMMITTED_DIR
        );
    }
    eprintln!(
        "xtask: committed PTX (production and test kernels, {}) equals what the kernel source emits",
        intranode_ptx_builder::COMMITTED_ARCHS.join(", ")
    );
    Ok(())
}

/// Whether a committed file is stored xz-compressed (by its name).
fn is_xz_name(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "xz")
}

/// A committed PTX file's text, unpacked where it is stored xz-compressed.
fn read_committed_text(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path)?;
    let bytes = if is_xz_name(path) {
        unxz(&bytes)?
    } else {
        bytes
    };
    String::from_utf8(bytes).context("not UTF-8")
}

/// Largest dictionary [`xz`] uses (`xz -9`'s): the decoder allocates the
/// dictionary the stream names.
const XZ_DICT_MAX_BYTES: u32 = 64 << 20;

/// `bytes` xz-compressed as `xz -9e` does (its longest match length and
/// search depth), with a dictionary no larger than the input (up to
/// [`XZ_DICT_MAX_BYTES`]) and a CRC64 check. One thread, so the same input
/// gives the same file.
pub fn xz(bytes: &[u8]) -> Result<Vec<u8>> {
    let mut options = lzma_rust2::XzOptions::with_preset(9);
    options.lzma_options.nice_len = lzma_rust2::LzmaOptions::NICE_LEN_MAX;
    options.lzma_options.depth_limit = 512;
    let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    options.lzma_options.dict_size = len.clamp(lzma_rust2::DICT_SIZE_MIN, XZ_DICT_MAX_BYTES);
    options.check_type = lzma_rust2::CheckType::Crc64;
    let mut writer = lzma_rust2::XzWriter::new(Vec::new(), options)?;
    writer.write_all(bytes)?;
    Ok(writer.finish()?)
}

/// The contents of an xz stream (its check verified).
pub fn unxz(packed: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    lzma_rust2::XzReader::new(packed, false).read_to_end(&mut out)?;
    Ok(out)
}

/// `bytes` gzipped at the best compression, with no name and time in the
/// header, so the same input gives the same file.
pub fn gzip(bytes: &[u8]) -> Result<Vec<u8>> {
    let mut encoder = flate2::GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), flate2::Compression::best());
    encoder.write_all(bytes)?;
    Ok(encoder.finish()?)
}

fn current_stamp(root: &Path) -> Result<String> {
    intranode_ptx_builder::source_stamp(root).context("fingerprinting the kernel sources")
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

    /// The contents of a gzip stream.
    fn gunzip(gz: &[u8]) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(gz).read_to_end(&mut out)?;
        Ok(out)
    }

    #[test]
    fn xz_round_trip_is_deterministic() {
        let text = b"//\n.version 8.7\n.target sm_90\n".repeat(1000);
        let a = xz(&text).unwrap();
        assert_eq!(a, xz(&text).unwrap());
        assert!(a.len() < text.len() / 10);
        assert!(a.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0]));
        assert_eq!(unxz(&a).unwrap(), text);
        assert!(unxz(b"not xz").is_err());
        // A flipped byte inside the stream fails its check or its
        // decoding, never unpacks to other bytes.
        let mut damaged = a.clone();
        let mid = damaged.len() / 2;
        damaged[mid] ^= 0x55;
        assert!(unxz(&damaged).is_err());
    }

    #[test]
    fn gzip_round_trip_is_deterministic() {
        let text = b"//\n.version 8.7\n.target sm_90\n".repeat(1000);
        let a = gzip(&text).unwrap();
        assert_eq!(a, gzip(&text).unwrap());
        assert!(a.len() < text.len() / 10);
        assert_eq!(gunzip(&a).unwrap(), text);
        assert!(gunzip(b"not gzip").is_err());
    }

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
