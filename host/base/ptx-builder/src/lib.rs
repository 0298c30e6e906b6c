//! Builds the kernel crates to PTX: `intranode-kernels-gpu` (folder
//! `kernels-gpu/`) and `intranode-test-kernels-gpu` (folder
//! `crates/test-kernels-gpu/`).
//!
//! One place knows how Rust kernels become PTX here (see DESIGN.md section
//! 2): rustc's NVPTX back end, `core` built from source (`-Zbuild-std`,
//! since no prebuilt nvptx64 std can be downloaded), and `--emit=asm`
//! instead of a link step (the bitcode linker is not available either).
//! Both the host crate's build script and `cargo xtask build-ptx` call
//! [`build_ptx`], so the PTX a binary embeds and the PTX the checks read
//! come from the same command.
//!
//! Two PTX files come from them ([`KernelSet`]): the production kernels
//! (`intranode-kernels-gpu`), which the host crate ships, and the test and
//! probe kernels (`intranode-test-kernels-gpu`, which stands on the
//! production crate's modules), which only the test suites and the
//! benchmark load (feature `test-kernels` of the host crate). Each PTX
//! holds the entry points of its own crate only: those of a dependency
//! are compiled into the dependency's object, never into the PTX of the
//! crate built.
//!
//! The PTX users build against is committed (`host/ptx/kernels-<arch>.ptx.xz`
//! and `host/ptx/test-kernels-<arch>.ptx`, one pair per
//! [`COMMITTED_ARCHS`], and the production cubin per [`CUBIN_ARCHS`],
//! written by `cargo xtask build-ptx --write`), so
//! depending on the host crate needs no nightly tool chain.
//! [`source_stamp`] fingerprints what the PTX is built from; the host's
//! build script rebuilds only when the stamp committed with the PTX
//! (`host/ptx/source-stamp`) differs, that is after an edit of the kernels
//! inside this workspace. CI checks the committed files byte for byte.
#![deny(missing_docs)]

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// GPU architecture the PTX targets unless asked otherwise (H100/H200).
pub const DEFAULT_ARCH: &str = "sm_90";

/// Target triple of the kernels.
pub const TARGET: &str = "nvptx64-nvidia-cuda";

/// Architectures whose PTX is committed under `host/ptx/` and embedded
/// without a nightly tool chain. Only the default: its production PTX is
/// about 34 MB (2.1 MB xz-compressed). Any other (`INTRANODE_PTX_ARCH=sm_80`) is
/// built from source by the host's build script, which needs the
/// workspace's nightly.
pub const COMMITTED_ARCHS: &[&str] = &[DEFAULT_ARCH];

/// Architectures whose machine code (a cubin assembled by the pinned
/// `ptxas` from the committed production PTX of the same architecture) is
/// committed beside the PTX and embedded, so a device of that
/// architecture loads kernels without the driver's JIT compile (about 50 s
/// for the production PTX on an H200). A cubin for `sm_90` runs
/// on every device of compute capability 9.x.
pub const CUBIN_ARCHS: &[&str] = &[DEFAULT_ARCH];

/// Most threads per block of any launch of the kernels (the host's
/// `config::MAX_THREADS_PER_BLOCK`, checked equal by a host test).
pub const MAX_THREADS_PER_BLOCK: u32 = 512;

/// Registers a thread may use so that a block of
/// [`MAX_THREADS_PER_BLOCK`] threads fits the 64 Ki registers a block has
/// on every architecture from sm_80 to sm_120; a kernel over it fails to
/// launch (`CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES`).
pub const MAX_REGISTERS_PER_THREAD: u32 = 65536 / MAX_THREADS_PER_BLOCK;

/// NOTE [register bound]: every kernel must fit
/// [`MAX_REGISTERS_PER_THREAD`] on every architecture it may run on.
/// - PTX of an architecture whose machine code is committed
///   ([`CUBIN_ARCHS`], sm_90) is left as rustc wrote it: its cubin is the
///   measured machine code, and `check-ptx` fails if any kernel of it is
///   over the bound. A `.maxnreg` or `.maxntid` there would change the
///   sm_90 code of about 190 of 202 kernels (ptxas then allocates
///   differently, and `.maxntid 512` even spills), unmeasured on GPUs.
///   The driver's JIT compile of that PTX (Blackwell and later, or a
///   cubin that fails to load) gets the bound as `CU_JIT_MAX_REGISTERS`
///   from the host's loader.
/// - PTX of any other architecture (`INTRANODE_PTX_ARCH=sm_80`), which
///   only ever runs through the JIT, carries the bound in the PTX itself:
///   `.maxnreg` on every entry ([`bound_registers`]), whatever loads it.
///   `.maxnreg` rather than `.maxntid`: a plain cap, where `.maxntid`
///   also steers ptxas towards more blocks per SM and made it spill.
pub fn embeds_register_bound(arch: &str) -> bool {
    !CUBIN_ARCHS.contains(&arch)
}

/// `ptx` with `.maxnreg` [`MAX_REGISTERS_PER_THREAD`] after the parameter
/// list of every `.entry` (NOTE [register bound]). Entries that already
/// carry a `.maxnreg` are left as they are.
pub fn bound_registers(ptx: &str) -> String {
    let mut out = String::with_capacity(ptx.len() + 4096);
    let mut in_entry_params = false;
    let mut lines = ptx.lines().peekable();
    while let Some(line) = lines.next() {
        out.push_str(line);
        out.push('\n');
        if line.trim_start().starts_with(".visible .entry ")
            || line.trim_start().starts_with(".entry ")
        {
            in_entry_params = !line.trim_end().ends_with(')');
            if !in_entry_params {
                push_bound(&mut out, lines.peek().copied());
            }
        } else if in_entry_params && line.trim() == ")" {
            in_entry_params = false;
            push_bound(&mut out, lines.peek().copied());
        }
    }
    out
}

/// The `.maxnreg` line, unless the next line already is one.
fn push_bound(out: &mut String, next: Option<&str>) {
    if !next.is_some_and(|n| n.trim_start().starts_with(".maxnreg")) {
        out.push_str(&format!(".maxnreg {MAX_REGISTERS_PER_THREAD}\n"));
    }
}

/// File name of the committed production cubin for `arch`
/// (xz-compressed), in [`COMMITTED_DIR`].
pub fn cubin_file_name(arch: &str) -> String {
    format!("kernels-{arch}.cubin.xz")
}

/// Directory of the committed PTX, relative to the workspace root.
pub const COMMITTED_DIR: &str = "host/ptx";

/// File name of the committed source stamp, in [`COMMITTED_DIR`].
pub const STAMP_FILE: &str = "source-stamp";

/// Which kernels a PTX holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelSet {
    /// The library's kernels: the PTX the host crate always embeds.
    Production,
    /// The test and probe kernels (the crate `intranode-test-kernels-gpu`,
    /// folder `crates/test-kernels-gpu/`), and nothing else: a small PTX
    /// the host crate embeds only under its feature `test-kernels`.
    Test,
    /// The library's kernels with the schedule fuzzer's random delays
    /// (feature `schedule-fuzz` of `intranode-kernels-gpu`): embedded in
    /// place of [`Production`](Self::Production) only by a host build with
    /// `INTRANODE_SCHEDULE_FUZZ=1`, never committed.
    ScheduleFuzz,
}

impl KernelSet {
    /// Both sets, in the order `build-ptx --write` writes them.
    pub const ALL: [KernelSet; 2] = [KernelSet::Production, KernelSet::Test];

    /// File name of the set's PTX for `arch`, in [`COMMITTED_DIR`] (and in
    /// the build directories).
    pub fn file_name(self, arch: &str) -> String {
        match self {
            KernelSet::Production => format!("kernels-{arch}.ptx"),
            KernelSet::Test => format!("test-kernels-{arch}.ptx"),
            KernelSet::ScheduleFuzz => format!("kernels-schedule-fuzz-{arch}.ptx"),
        }
    }

    /// What the set is, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            KernelSet::Production => "production kernels",
            KernelSet::Test => "test kernels",
            KernelSet::ScheduleFuzz => "production kernels with the schedule fuzzer",
        }
    }

    /// The manifest of the crate the set is built from, relative to the
    /// workspace root.
    fn manifest(self) -> &'static str {
        match self {
            KernelSet::Production | KernelSet::ScheduleFuzz => "kernels-gpu/Cargo.toml",
            KernelSet::Test => "crates/test-kernels-gpu/Cargo.toml",
        }
    }

    /// The crate's name as rustc writes it, the prefix of its `.s` file.
    fn crate_name(self) -> &'static str {
        match self {
            KernelSet::Production | KernelSet::ScheduleFuzz => "intranode_kernels_gpu",
            KernelSet::Test => "intranode_test_kernels_gpu",
        }
    }

    /// The `cargo rustc` arguments that select the set.
    fn cargo_args(self) -> &'static [&'static str] {
        match self {
            KernelSet::Production | KernelSet::Test => &[],
            KernelSet::ScheduleFuzz => &["--features", "schedule-fuzz"],
        }
    }

    /// File name of the set's committed PTX for `arch`, in
    /// [`COMMITTED_DIR`]: the production PTX xz-compressed (about 34 MB
    /// as text, embedded in every binary that uses the host crate), the
    /// test PTX as text (about 300 KB).
    pub fn committed_file_name(self, arch: &str) -> String {
        match self {
            KernelSet::Production => format!("kernels-{arch}.ptx.xz"),
            KernelSet::Test | KernelSet::ScheduleFuzz => self.file_name(arch),
        }
    }

    /// The set's directory under a build's target directory: one per
    /// architecture and set, since `newest_asm` takes the newest output
    /// of a directory.
    fn target_subdir(self, arch: &str) -> String {
        match self {
            KernelSet::Production => arch.to_owned(),
            KernelSet::Test => format!("{arch}-test-kernels"),
            KernelSet::ScheduleFuzz => format!("{arch}-schedule-fuzz"),
        }
    }
}

/// Files, relative to the workspace root, whose contents decide the PTX:
/// the kernel crates' manifests, the tool chain and this builder (the
/// kernel sources under [`STAMPED_DIRS`] come on top, see
/// [`source_stamp`]).
const STAMPED_FILES: &[&str] = &[
    "kernels-gpu/Cargo.toml",
    "crates/test-kernels-gpu/Cargo.toml",
    "rust-toolchain.toml",
    "host/base/ptx-builder/src/lib.rs",
];

/// The folders of kernel sources, relative to the workspace root: the
/// production crate's and the test kernels' crate's.
pub const STAMPED_DIRS: &[&str] = &["kernels-gpu/src", "crates/test-kernels-gpu/src"];

/// A fingerprint of everything the PTX is built from: 64-bit FNV-1a over
/// the relative path and contents of every file under [`STAMPED_DIRS`]
/// and of the files in `STAMPED_FILES`, in sorted order, as
/// `fnv1a64:<16 hex digits>`. An error when any of them cannot be read
/// (for example in a packaged crate, where the kernel sources are absent).
pub fn source_stamp(workspace_root: &Path) -> std::io::Result<String> {
    let mut files: Vec<String> = STAMPED_FILES.iter().map(|s| (*s).to_owned()).collect();
    for dir in STAMPED_DIRS {
        collect_files(workspace_root, dir, &mut files)?;
    }
    files.sort();
    let mut hash = Fnv1a::new();
    for rel in &files {
        let contents = std::fs::read(workspace_root.join(rel))?;
        hash.write(rel.as_bytes());
        hash.write(&[0]);
        hash.write(&(contents.len() as u64).to_le_bytes());
        hash.write(&contents);
    }
    Ok(format!("fnv1a64:{:016x}", hash.0))
}

/// Appends the files under `root/rel` (recursively) to `out`, as relative
/// paths with `/` separators.
fn collect_files(root: &Path, rel: &str, out: &mut Vec<String>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(root.join(rel))? {
        let entry = entry?;
        let name = entry.file_name();
        let child = format!("{rel}/{}", name.to_string_lossy());
        if entry.file_type()?.is_dir() {
            collect_files(root, &child, out)?;
        } else {
            out.push(child);
        }
    }
    Ok(())
}

/// 64-bit FNV-1a: a stable hash with no dependency (std's hashers may
/// change between releases).
struct Fnv1a(u64);

impl Fnv1a {
    fn new() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

/// What to build and where.
#[derive(Debug, Clone)]
pub struct PtxBuild {
    /// Root of the workspace (holds `kernels-gpu/`).
    pub workspace_root: PathBuf,
    /// `sm_80`, `sm_90`, ...
    pub arch: String,
    /// Which kernels.
    pub kernels: KernelSet,
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
    /// `cargo rustc` failed.
    Cargo {
        /// Its exit status, as `ExitStatus` prints it.
        status: String,
        /// Everything it wrote to stderr: the compiler's errors.
        stderr: String,
    },
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
                    "building the kernels for {TARGET} failed ({status}):\n{stderr}"
                )
            }
            Self::MissingOutput(dir) => {
                write!(f, "no PTX (`<crate>-*.s`) under {}", dir.display())
            }
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
    // One target directory per architecture and set: extra `cargo rustc`
    // arguments do not enter cargo's fingerprint, so two architectures
    // sharing a directory would overwrite each other's output unnoticed.
    let target_dir = build
        .target_dir
        .join(build.kernels.target_subdir(&build.arch));
    let manifest = build.workspace_root.join(build.kernels.manifest());
    let mut cmd = Command::new(&build.cargo);
    for var in SCRUBBED_ENV {
        cmd.env_remove(var);
    }
    cmd.arg("rustc")
        .arg("--manifest-path")
        .arg(&manifest)
        .args(["--release", "--lib", "--target", TARGET, "-Zbuild-std=core"])
        .args(build.kernels.cargo_args())
        .arg("--target-dir")
        .arg(&target_dir)
        .args(["--", "--emit=asm"])
        .arg(format!("-Ctarget-cpu={}", build.arch))
        // `griddepcontrol` (launch overlap) exists from sm_90 on.
        .args(pdl_cfg(&build.arch))
        // One codegen unit: one `.s` file, and every generic helper
        // inlined into the kernel that uses it.
        .args(["-Ccodegen-units=1", "-Copt-level=3"]);
    if build.kernels == KernelSet::Test {
        // The test kernels' crate instantiates the production crate's
        // generic and inline functions (the Lamport forms, `ptx`, `sync`),
        // whose code is fixed when that crate is compiled: it gets the
        // flags that shape the kernels too (`--cfg intranode_pdl` above
        // all, else the probes would read the pre-sm_90 `ptx` functions).
        // Only here: in the production build the flags reach the kernel
        // crate alone, and `core` is built as it always was.
        let mut flags = vec![format!("-Ctarget-cpu={}", build.arch)];
        flags.extend(pdl_cfg(&build.arch).iter().map(|f| (*f).to_owned()));
        cmd.env("CARGO_ENCODED_RUSTFLAGS", flags.join("\x1f"));
    }
    let output = cmd.output().map_err(PtxBuildError::Spawn)?;
    if !output.status.success() {
        return Err(PtxBuildError::Cargo {
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        });
    }
    let deps = target_dir.join(TARGET).join("release").join("deps");
    let ptx_path = newest_asm(&deps, build.kernels.crate_name())?;
    let ptx = std::fs::read_to_string(&ptx_path).map_err(|e| PtxBuildError::Io(ptx_path, e))?;
    Ok(if embeds_register_bound(&build.arch) {
        bound_registers(&ptx)
    } else {
        ptx
    })
}

/// `--cfg intranode_pdl` for architectures with `griddepcontrol` and the
/// bulk L2 prefetch (sm_90 and later), so the kernels wait on
/// programmatic dependencies and prefetch there.
fn pdl_cfg(arch: &str) -> &'static [&'static str] {
    let sm: u32 = arch
        .trim_start_matches("sm_")
        .trim_end_matches(|c: char| c.is_ascii_alphabetic())
        .parse()
        .unwrap_or(0);
    if sm >= 90 {
        // PTX ISA 8.0 for `cp.async.bulk.prefetch.L2` (the fused norm's
        // L2 prefetch); `griddepcontrol` needs 7.8, LLVM's default here.
        // Drivers of CUDA 12.0 and later take 8.0.
        &["--cfg", "intranode_pdl", "-Ctarget-feature=+ptx80"]
    } else {
        &[]
    }
}

/// The most recently written `<crate_name>-*.s` in `deps`.
fn newest_asm(deps: &Path, crate_name: &str) -> Result<PathBuf, PtxBuildError> {
    let entries = std::fs::read_dir(deps).map_err(|e| PtxBuildError::Io(deps.to_owned(), e))?;
    let mut best: Option<(std::time::SystemTime, PathBuf)> = None;
    for entry in entries {
        let entry = entry.map_err(|e| PtxBuildError::Io(deps.to_owned(), e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let of_crate = name
            .strip_prefix(crate_name)
            .is_some_and(|rest| rest.starts_with('-'));
        if !(of_crate && name.ends_with(".s")) {
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
    fn every_entry_gets_one_register_bound() {
        let ptx = ".version 8.7\n.target sm_80\n\
.visible .entry a(\n\t.param .u64 a_param_0\n)\n{\n\tret;\n}\n\
.visible .entry b()\n{\n\tret;\n}\n\
.visible .entry c(\n\t.param .u32 c_param_0\n)\n.maxnreg 64\n{\n\tret;\n}\n\
.func d(\n\t.param .u32 d_param_0\n)\n{\n\tret;\n}\n";
        let bounded = bound_registers(ptx);
        assert!(
            bounded.contains(")\n.maxnreg 128\n{\n\tret;\n}\n.visible .entry b()\n.maxnreg 128\n{")
        );
        // An entry's own bound stays; a `.func` gets none.
        assert_eq!(bounded.matches(".maxnreg").count(), 3, "{bounded}");
        assert!(bounded.contains(".maxnreg 64\n"));
        assert_eq!(bound_registers(&bounded), bounded);
        assert!(embeds_register_bound("sm_80"));
        assert!(!embeds_register_bound(DEFAULT_ARCH));
    }

    #[test]
    fn fnv1a_reference_values() {
        let hash = |b: &[u8]| {
            let mut h = Fnv1a::new();
            h.write(b);
            h.0
        };
        assert_eq!(hash(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(hash(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(hash(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn stamp_covers_the_kernel_sources() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..");
        if !root.join("kernels-gpu").is_dir() {
            // A test executable run away from its checkout (the device
            // bundle's run-tests.sh): there are no sources to stamp.
            eprintln!(
                "skipped: no source tree at {} (run outside the checkout)",
                root.display()
            );
            return;
        }
        let stamp = source_stamp(&root).expect("workspace sources readable");
        assert!(
            stamp.starts_with("fnv1a64:") && stamp.len() == 8 + 16,
            "{stamp}"
        );
        assert!(source_stamp(&root.join("no-such-dir")).is_err());
    }

    #[test]
    fn entries() {
        let ptx =
            ".visible .entry add_f32(\n.param .u64 a\n)\n{\n}\n.visible .entry probe_x()\n{\n}\n";
        assert_eq!(entry_names(ptx), ["add_f32", "probe_x"]);
    }
}
