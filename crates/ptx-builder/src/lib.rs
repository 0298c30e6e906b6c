//! Builds the `kernels-gpu` crate to PTX.
//!
//! One place knows how Rust kernels become PTX here (see DESIGN.md section
//! 2): rustc's NVPTX back end, `core` built from source (`-Zbuild-std`,
//! since no prebuilt nvptx64 std can be downloaded), and `--emit=asm`
//! instead of a link step (the bitcode linker is not available either).
//! Both the host crate's build script and `cargo xtask build-ptx` call
//! [`build_ptx`], so the PTX a binary embeds and the PTX the checks read
//! come from the same command.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// GPU architecture the PTX targets unless asked otherwise (H100/H200).
pub const DEFAULT_ARCH: &str = "sm_90";

/// Target triple of the kernels.
pub const TARGET: &str = "nvptx64-nvidia-cuda";

/// What to build and where.
#[derive(Debug, Clone)]
pub struct PtxBuild {
    /// Root of the workspace (holds `kernels-gpu/`).
    pub workspace_root: PathBuf,
    /// `sm_80`, `sm_90`, ...
    pub arch: String,
    /// A target directory of its own: the nested cargo must not share the
    /// outer build's directory (and its lock).
    pub target_dir: PathBuf,
    /// The `cargo` binary to run.
    pub cargo: PathBuf,
}

/// Why the PTX could not be built.
#[derive(Debug)]
pub enum PtxBuildError {
    /// The architecture string is not `sm_<digits>`.
    BadArch(String),
    /// `cargo` could not be started.
    Spawn(std::io::Error),
    /// `cargo rustc` failed; holds its exit status and stderr.
    Cargo { status: String, stderr: String },
    /// The build ran but left no PTX file where expected.
    MissingOutput(PathBuf),
    /// Reading the output directory failed.
    Io(PathBuf, std::io::Error),
}

impl fmt::Display for PtxBuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadArch(a) => write!(f, "architecture {a:?} is not of the form sm_<digits>"),
            Self::Spawn(e) => write!(f, "could not run cargo to build the kernels: {e}"),
            Self::Cargo { status, stderr } => {
                write!(
                    f,
                    "building kernels-gpu for {TARGET} failed ({status}):\n{stderr}"
                )
            }
            Self::MissingOutput(dir) => write!(f, "no kernels_gpu-*.s under {}", dir.display()),
            Self::Io(p, e) => write!(f, "reading {}: {e}", p.display()),
        }
    }
}

impl std::error::Error for PtxBuildError {}

/// Environment variables a parent cargo sets that must not leak into the
/// nested build: wrappers (clippy-driver would lint core), flags meant for
/// the host, and a target directory that would make the two builds share a
/// lock.
const SCRUBBED_ENV: &[&str] = &[
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "RUSTFLAGS",
    "CARGO_ENCODED_RUSTFLAGS",
    "CARGO_BUILD_RUSTFLAGS",
    "CARGO_TARGET_DIR",
    "CARGO_BUILD_TARGET",
    "CARGO_BUILD_TARGET_DIR",
    "CARGO_MAKEFLAGS",
    "MAKEFLAGS",
    "MFLAGS",
    "CARGO_PRIMARY_PACKAGE",
];

/// Checks an architecture name such as `sm_90` or `sm_90a`.
pub fn validate_arch(arch: &str) -> Result<(), PtxBuildError> {
    let digits = arch.strip_prefix("sm_").unwrap_or("");
    let digits = digits.strip_suffix('a').unwrap_or(digits);
    if !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()) {
        Ok(())
    } else {
        Err(PtxBuildError::BadArch(arch.to_owned()))
    }
}

/// Builds the kernels and returns the PTX text.
pub fn build_ptx(build: &PtxBuild) -> Result<String, PtxBuildError> {
    validate_arch(&build.arch)?;
    // One target directory per architecture: extra `cargo rustc` arguments
    // do not enter cargo's fingerprint, so two architectures sharing a
    // directory would overwrite each other's output unnoticed.
    let target_dir = build.target_dir.join(&build.arch);
    let manifest = build.workspace_root.join("kernels-gpu").join("Cargo.toml");
    let mut cmd = Command::new(&build.cargo);
    for var in SCRUBBED_ENV {
        cmd.env_remove(var);
    }
    cmd.arg("rustc")
        .arg("--manifest-path")
        .arg(&manifest)
        .args(["--release", "--lib", "--target", TARGET, "-Zbuild-std=core"])
        .arg("--target-dir")
        .arg(&target_dir)
        .args(["--", "--emit=asm"])
        .arg(format!("-Ctarget-cpu={}", build.arch))
        // One codegen unit: one `.s` file, and every generic helper
        // inlined into the kernel that uses it.
        .args(["-Ccodegen-units=1", "-Copt-level=3"]);
    let output = cmd.output().map_err(PtxBuildError::Spawn)?;
    if !output.status.success() {
        return Err(PtxBuildError::Cargo {
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        });
    }
    let deps = target_dir.join(TARGET).join("release").join("deps");
    let ptx_path = newest_asm(&deps)?;
    std::fs::read_to_string(&ptx_path).map_err(|e| PtxBuildError::Io(ptx_path, e))
}

/// The most recently written `kernels_gpu-*.s` in `deps`.
fn newest_asm(deps: &Path) -> Result<PathBuf, PtxBuildError> {
    let entries = std::fs::read_dir(deps).map_err(|e| PtxBuildError::Io(deps.to_owned(), e))?;
    let mut best: Option<(std::time::SystemTime, PathBuf)> = None;
    for entry in entries {
        let entry = entry.map_err(|e| PtxBuildError::Io(deps.to_owned(), e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !(name.starts_with("kernels_gpu-") && name.ends_with(".s")) {
            continue;
        }
        let modified = entry
            .metadata()
            .and_then(|m| m.modified())
            .map_err(|e| PtxBuildError::Io(entry.path(), e))?;
        if best.as_ref().is_none_or(|(t, _)| modified > *t) {
            best = Some((modified, entry.path()));
        }
    }
    best.map(|(_, p)| p)
        .ok_or_else(|| PtxBuildError::MissingOutput(deps.to_owned()))
}

/// The `cargo` to run: the one that runs us (`CARGO`), else from `PATH`.
pub fn cargo_binary() -> PathBuf {
    std::env::var_os("CARGO")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(OsString::from("cargo")))
}

/// Kernel entry points (`.entry NAME(`) declared in a PTX text.
pub fn entry_names(ptx: &str) -> Vec<&str> {
    ptx.lines()
        .filter_map(|l| l.trim_start().strip_prefix(".visible .entry "))
        .filter_map(|rest| rest.split('(').next())
        .map(str::trim)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arch_names() {
        assert!(validate_arch("sm_90").is_ok());
        assert!(validate_arch("sm_80").is_ok());
        assert!(validate_arch("sm_90a").is_ok());
        assert!(validate_arch("sm_").is_err());
        assert!(validate_arch("compute_90").is_err());
        assert!(validate_arch("sm_9x").is_err());
    }

    #[test]
    fn entries() {
        let ptx =
            ".visible .entry add_f32(\n.param .u64 a\n)\n{\n}\n.visible .entry probe_x()\n{\n}\n";
        assert_eq!(entry_names(ptx), ["add_f32", "probe_x"]);
    }
}
