//! Chooses the PTX the crate embeds (`src/kernels/mod.rs` includes the file
//! this script names in `INTRANODE_EMBEDDED_PTX`; under the feature
//! `test-kernels`, `src/kernels/test_kernels.rs` also the test kernels'
//! PTX named in `INTRANODE_EMBEDDED_TEST_PTX`).
//!
//! Normally that is the committed `ptx/kernels-<arch>.ptx.xz` (and
//! `ptx/test-kernels-<arch>.ptx`), and beside it the machine code
//! assembled from it, `ptx/kernels-<arch>.cubin.xz`, named in
//! `INTRANODE_EMBEDDED_CUBIN` (an empty file where there is none): no
//! nightly tool chain and no ptxas are needed, so the crate builds on
//! stable Rust. The kernels are
//! built from source (nightly, `-Zbuild-std`, through `intranode-ptx-builder`) only
//! when
//! - the kernel sources differ from what the committed PTX was built from
//!   (`ptx/source-stamp` against `intranode_ptx_builder::source_stamp`): an edit of
//!   `kernels-gpu` or `crates/test-kernels-gpu` inside the workspace, before `cargo xtask build-ptx
//!   --write`; a warning says so;
//! - `INTRANODE_PTX_ARCH` names an architecture that is not committed;
//! - `INTRANODE_PTX_REBUILD=1` asks for it.
//!
//! Where the kernel sources are absent (a packaged crate), the committed
//! PTX is used as it is. The PTX built from source is embedded as text and
//! without a cubin.

use std::path::{Path, PathBuf};

use intranode_ptx_builder::KernelSet;

/// Env switch: the architecture to embed (default `sm_90`).
const ARCH_ENV: &str = "INTRANODE_PTX_ARCH";
/// Env switch: `1` builds the kernels from source even when the committed
/// PTX is current.
const REBUILD_ENV: &str = "INTRANODE_PTX_REBUILD";
/// Env switch: `0` leaves the PTX fallback out where machine code for the
/// architecture is embedded (the xz-compressed PTX, 2.1 MB less per binary; devices the
/// machine code does not run on then get an error instead of a JIT). The
/// device bundle builds this way to fit what a device run carries.
const EMBED_PTX_ENV: &str = "INTRANODE_EMBED_PTX";
/// Env switch: `1` compiles the module `intranode::internals` (`--cfg
/// intranode_internals`): the crate's machinery for the project's own
/// suites and benchmark, not a stable API. The workspace's
/// `.cargo/config.toml` sets it; a user's build does not read that file.
/// A cfg rather than a feature: a feature would be published, and any
/// crate in a user's graph could turn it on.
const INTERNALS_ENV: &str = "INTRANODE_INTERNALS";
/// Env switch: `1` embeds the production kernels built from source with
/// the schedule fuzzer (`KernelSet::ScheduleFuzz`: random delays where
/// blocks meet their peers), for the suite's fuzz runs; never a build to
/// ship. Needs the nightly tool chain, as any build from source.
const SCHEDULE_FUZZ_ENV: &str = "INTRANODE_SCHEDULE_FUZZ";

fn main() {
    if let Err(e) = try_main() {
        // A build script reports failure through its exit status; the
        // message goes to cargo's error output.
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn try_main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let workspace_root = manifest_dir
        .parent()
        .ok_or("host crate has no parent directory")?
        .to_owned();
    // `ptx/` beside this manifest: `host/ptx` in the workspace, and the
    // same directory inside a packaged crate.
    let committed_dir = manifest_dir.join("ptx");
    println!("cargo:rerun-if-env-changed={ARCH_ENV}");
    println!("cargo:rerun-if-env-changed={REBUILD_ENV}");
    println!("cargo:rerun-if-env-changed={EMBED_PTX_ENV}");
    println!("cargo:rerun-if-env-changed={INTERNALS_ENV}");
    println!("cargo:rerun-if-env-changed={SCHEDULE_FUZZ_ENV}");
    println!("cargo::rustc-check-cfg=cfg(intranode_internals)");
    if std::env::var(INTERNALS_ENV).is_ok_and(|v| v.trim() == "1") {
        println!("cargo:rustc-cfg=intranode_internals");
    }
    // Only paths that exist: cargo reruns the script on every build for a
    // missing one.
    for watched in [
        committed_dir.clone(),
        workspace_root.join("kernels-gpu/src"),
        workspace_root.join("kernels-gpu/Cargo.toml"),
        workspace_root.join("crates/test-kernels-gpu/src"),
        workspace_root.join("crates/test-kernels-gpu/Cargo.toml"),
        workspace_root.join("rust-toolchain.toml"),
    ] {
        if watched.exists() {
            println!("cargo:rerun-if-changed={}", watched.display());
        }
    }

    let arch =
        std::env::var(ARCH_ENV).unwrap_or_else(|_| intranode_ptx_builder::DEFAULT_ARCH.into());
    intranode_ptx_builder::validate_arch(&arch)?;
    let fuzz = std::env::var(SCHEDULE_FUZZ_ENV).is_ok_and(|v| v.trim() == "1");
    let forced = fuzz || std::env::var(REBUILD_ENV).is_ok_and(|v| v == "1");
    let stale = stale_reason(&workspace_root, &committed_dir);
    let mut warned = false;
    let mut sets = vec![(KernelSet::Production, "INTRANODE_EMBEDDED_PTX")];
    if std::env::var_os("CARGO_FEATURE_TEST_KERNELS").is_some() {
        sets.push((KernelSet::Test, "INTRANODE_EMBEDDED_TEST_PTX"));
    }
    let mut from_source = false;
    let mut production_ptx = None;
    for (set, env) in sets {
        let committed = committed_dir.join(set.committed_file_name(&arch));
        let embedded = if fuzz && set == KernelSet::Production {
            from_source = true;
            println!(
                "cargo:warning={SCHEDULE_FUZZ_ENV}=1: the kernels carry the schedule fuzzer's delays; not a build to ship"
            );
            build_from_source(
                &workspace_root,
                &arch,
                KernelSet::ScheduleFuzz,
                &format!("{SCHEDULE_FUZZ_ENV}=1"),
            )?
        } else if forced {
            from_source |= set == KernelSet::Production;
            build_from_source(&workspace_root, &arch, set, &format!("{REBUILD_ENV}=1"))?
        } else if !committed.exists() {
            let why = if intranode_ptx_builder::COMMITTED_ARCHS.contains(&arch.as_str()) {
                format!(
                    "{} is missing (a checkout or package without the committed kernels)",
                    committed.display()
                )
            } else {
                format!(
                    "no kernels are committed for {arch}, only for {}",
                    intranode_ptx_builder::COMMITTED_ARCHS.join(", ")
                )
            };
            from_source |= set == KernelSet::Production;
            build_from_source(&workspace_root, &arch, set, &why)?
        } else if let Some(why) = &stale {
            from_source |= set == KernelSet::Production;
            if !warned {
                println!(
                    "cargo:warning=built the kernels from source: {why}; \
                     run `cargo xtask build-ptx --write` and commit host/ptx/"
                );
                warned = true;
            }
            build_from_source(&workspace_root, &arch, set, why)?
        } else {
            committed
        };
        if set == KernelSet::Production {
            production_ptx = Some((env, embedded));
        } else {
            println!("cargo:rustc-env={env}={}", embedded.display());
        }
    }
    println!("cargo:rustc-env=INTRANODE_EMBEDDED_PTX_ARCH={arch}");
    println!(
        "cargo:rustc-env=INTRANODE_EMBEDDED_SCHEDULE_FUZZ={}",
        u8::from(fuzz)
    );

    // The machine code of the embedded PTX, where it is committed and is
    // that PTX's (not when the PTX came from source: the cubin would hold
    // the old kernels); otherwise an empty file, and every device JIT
    // compiles the PTX.
    let cubin = committed_dir.join(intranode_ptx_builder::cubin_file_name(&arch));
    let fuzz_cubin = match (&production_ptx, fuzz) {
        (Some((_, ptx)), true) => assemble_fuzz_cubin(&workspace_root, ptx, &arch)?,
        _ => None,
    };
    let (cubin, cubin_arch) = if let Some(fuzz_cubin) = fuzz_cubin {
        (fuzz_cubin, arch.as_str())
    } else if !from_source
        && intranode_ptx_builder::CUBIN_ARCHS.contains(&arch.as_str())
        && cubin.exists()
    {
        (cubin, arch.as_str())
    } else {
        let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
        let empty = out_dir.join("no-cubin");
        std::fs::write(&empty, b"")?;
        (empty, "")
    };
    println!(
        "cargo:rustc-env=INTRANODE_EMBEDDED_CUBIN={}",
        cubin.display()
    );
    println!("cargo:rustc-env=INTRANODE_EMBEDDED_CUBIN_ARCH={cubin_arch}");

    // The production PTX, or an empty file where `INTRANODE_EMBED_PTX=0`
    // asks to leave it out and machine code stands in for it (never
    // where there is none: then the PTX is all there is).
    let (env, ptx) = production_ptx.ok_or("no production kernel set")?;
    let leave_out = std::env::var(EMBED_PTX_ENV).is_ok_and(|v| v.trim() == "0");
    let ptx = if leave_out && !cubin_arch.is_empty() {
        let empty = PathBuf::from(std::env::var("OUT_DIR")?).join("no-ptx");
        std::fs::write(&empty, b"")?;
        empty
    } else {
        if leave_out {
            println!(
                "cargo:warning={EMBED_PTX_ENV}=0 ignored: no machine code is embedded for {arch}, \
                 so the PTX is"
            );
        }
        ptx
    };
    println!("cargo:rustc-env={env}={}", ptx.display());
    Ok(())
}

/// The schedule fuzzer's PTX (`ptx`) assembled for `arch` by the pinned
/// ptxas (`$PTXAS`, else `.cache/ptxas/ptxas`, which `cargo xtask
/// build-ptx` fetches), or `None` with a warning where there is none: the
/// device then JIT compiles about 20 MB of PTX at every rank's start,
/// minutes.
fn assemble_fuzz_cubin(
    workspace_root: &Path,
    ptx: &Path,
    arch: &str,
) -> Result<Option<PathBuf>, Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-env-changed=PTXAS");
    let ptxas = std::env::var_os("PTXAS")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root.join(".cache/ptxas/ptxas"));
    if !ptxas.is_file() {
        println!(
            "cargo:warning={SCHEDULE_FUZZ_ENV}=1 without ptxas ({}; `cargo xtask build-ptx` fetches it): the device will JIT compile the PTX, minutes per rank",
            ptxas.display()
        );
        return Ok(None);
    }
    let cubin =
        PathBuf::from(std::env::var("OUT_DIR")?).join(format!("schedule-fuzz-{arch}.cubin"));
    let status = std::process::Command::new(&ptxas)
        .arg(format!("-arch={arch}"))
        .arg(ptx)
        .arg("-o")
        .arg(&cubin)
        .status()?;
    if !status.success() {
        return Err(format!(
            "{} failed on the schedule fuzzer's PTX ({status})",
            ptxas.display()
        )
        .into());
    }
    Ok(Some(cubin))
}

/// Why the committed PTX does not match the kernel sources, or `None` when
/// it does or when the sources are absent (nothing to compare with).
fn stale_reason(workspace_root: &Path, committed_dir: &Path) -> Option<String> {
    let current = intranode_ptx_builder::source_stamp(workspace_root).ok()?;
    let stamp_path = committed_dir.join(intranode_ptx_builder::STAMP_FILE);
    let committed = std::fs::read_to_string(&stamp_path).unwrap_or_default();
    (committed.trim() != current).then(|| {
        format!(
            "the kernel sources ({current}) differ from those of the committed PTX ({})",
            committed.trim()
        )
    })
}

/// Builds the kernels of `set` for `arch` into `OUT_DIR` (needs the
/// nightly tool chain) and returns the PTX file's path; `why` goes into
/// the error.
fn build_from_source(
    workspace_root: &Path,
    arch: &str,
    set: KernelSet,
    why: &str,
) -> Result<PathBuf, Box<dyn std::error::Error>> {
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let ptx = intranode_ptx_builder::build_ptx(&intranode_ptx_builder::PtxBuild {
        workspace_root: workspace_root.to_owned(),
        arch: arch.to_owned(),
        kernels: set,
        // Its own target directory: the outer cargo holds the lock of ours.
        target_dir: out_dir.join("ptx-target"),
        cargo: intranode_ptx_builder::cargo_binary(),
    })
    .map_err(|e| {
        format!(
            "building the {} from source ({why}) needs the workspace's nightly tool chain \
             (rust-toolchain.toml); the committed PTX needs none: {e}",
            set.describe()
        )
    })?;
    let path = out_dir.join(set.file_name(arch));
    std::fs::write(&path, ptx)?;
    Ok(path)
}
