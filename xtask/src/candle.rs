//! `cuda-toolkit` and `candle-example`: the CUDA 13.0 compiler from PyPI
//! wheels (no toolkit is installed here; candle compiles its kernels with
//! nvcc and cudarc asks nvcc for the CUDA version), and the release build
//! of `examples/candle-tp` on stable Rust with it.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The wheels that make a toolkit candle's build accepts: nvcc, ptxas and
/// the front end (`nvcc`, `crt`), `cicc` (`nvvm`), the runtime's headers
/// and `libcudart` (`runtime`), and thrust/cub (`cccl`). CUDA 13.0, as the
/// GPU machines' driver and the host crate's `cuda-13000`.
const WHEELS: &[&str] = &[
    "nvidia-cuda-nvcc==13.0.88",
    "nvidia-cuda-runtime==13.0.96",
    "nvidia-cuda-cccl==13.0.85",
    "nvidia-cuda-crt==13.0.88",
    "nvidia-nvvm==13.0.88",
];

/// Where the wheels put the toolkit, below the cache directory.
const TOOLKIT_IN_WHEELS: &str = "nvidia/cu13";

/// Written last, with the wheel list: a toolkit cache without it (an
/// interrupted unpack, other wheels) is unpacked again.
const MARKER: &str = ".complete";

/// The tool chain the example is built with (its `rust-toolchain.toml`).
const TOOLCHAIN: &str = "1.95.0";

const CANDLE_CORE: &str = "candle-core";
const CANDLE_VERSION: &str = "0.11.1";

/// The toolkit's root (`CUDA_ROOT`), unpacked into `.cache/cuda-13.0`
/// first if needed.
pub fn toolkit(root: &Path) -> Result<PathBuf> {
    let cache = root.join(".cache").join("cuda-13.0");
    let cuda_root = cache.join(TOOLKIT_IN_WHEELS);
    let want = WHEELS.join("\n");
    if std::fs::read_to_string(cache.join(MARKER)).is_ok_and(|m| m == want) {
        return Ok(cuda_root);
    }
    if cache.exists() {
        std::fs::remove_dir_all(&cache).with_context(|| format!("clearing {}", cache.display()))?;
    }
    let wheels = cache.join("wheels");
    std::fs::create_dir_all(&wheels)?;
    eprintln!(
        "xtask: fetching the CUDA 13.0 compiler wheels into {}",
        cache.display()
    );
    let status = Command::new("python3")
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--quiet",
            "--only-binary=:all:",
        ])
        .args(WHEELS)
        .arg("-d")
        .arg(&wheels)
        .status()
        .context("running python3 -m pip download")?;
    if !status.success() {
        bail!("pip download of {} failed ({status})", WHEELS.join(" "));
    }
    // Python's zipfile, as for ptxas: `unzip` is not everywhere. zipfile
    // drops the modes, so the programs are made executable again; the
    // linker wants `libcudart.so` (candle-kernels links `cudart`), the
    // wheel has only `libcudart.so.13`.
    let script = format!(
        "import glob,os,zipfile,sys\n\
         cache=sys.argv[1]\n\
         for w in sorted(glob.glob(os.path.join(cache,'wheels','*.whl'))):\n\
         \x20   zipfile.ZipFile(w).extractall(cache)\n\
         \x20   os.remove(w)\n\
         top=os.path.join(cache,'{TOOLKIT_IN_WHEELS}')\n\
         for d,_,fs in os.walk(top):\n\
         \x20   if os.path.basename(d)=='bin' or os.path.dirname(d).endswith('bin'):\n\
         \x20       for f in fs: os.chmod(os.path.join(d,f),0o755)\n\
         os.symlink('libcudart.so.13',os.path.join(top,'lib','libcudart.so'))\n"
    );
    let status = Command::new("python3")
        .args(["-c", &script])
        .arg(&cache)
        .status()
        .context("unpacking the wheels")?;
    if !status.success() {
        bail!("unpacking the CUDA wheels failed ({status})");
    }
    for tool in ["bin/nvcc", "bin/ptxas", "nvvm/bin/cicc", "lib/libcudart.so"] {
        if !cuda_root.join(tool).exists() {
            bail!("the unpacked wheels lack {TOOLKIT_IN_WHEELS}/{tool}");
        }
    }
    std::fs::write(cache.join(MARKER), want)?;
    Ok(cuda_root)
}

/// The variables candle's build needs to find and use the toolkit.
fn toolkit_env(cmd: &mut Command, cuda_root: &Path) -> Result<()> {
    let bin = cuda_root.join("bin");
    let path = std::env::var_os("PATH").unwrap_or_default();
    let path = std::env::join_paths(std::iter::once(bin).chain(std::env::split_paths(&path)))?;
    let lib = cuda_root.join("lib");
    let library_path = std::env::var_os("LIBRARY_PATH").unwrap_or_default();
    let library_path =
        std::env::join_paths(std::iter::once(lib).chain(std::env::split_paths(&library_path)))?;
    cmd.env("PATH", path)
        .env("CUDA_ROOT", cuda_root)
        .env("LIBRARY_PATH", library_path);
    // No GPU to ask here: Hopper unless the caller says otherwise.
    if std::env::var_os("CUDA_COMPUTE_CAP").is_none() {
        cmd.env("CUDA_COMPUTE_CAP", "90");
    }
    Ok(())
}

/// `.cache/candle-core-0.11.1-dynamic-loading`: candle-core as published,
/// with cudarc's `dynamic-linking` feature turned into `dynamic-loading`.
///
/// Why: cudarc refuses both features at once (its build script panics),
/// and the host crate uses `dynamic-loading` so that building needs no
/// CUDA libraries (libcuda, NCCL are opened at run time). candle-core asks
/// for `dynamic-linking`, which would also need libcuda, cuBLAS, cuRAND
/// and NCCL at link time. One cudarc means one set of features; the
/// example's `[patch.crates-io]` points at this copy.
pub fn patched_candle_core(root: &Path) -> Result<PathBuf> {
    let dest = root
        .join(".cache")
        .join(format!("{CANDLE_CORE}-{CANDLE_VERSION}-dynamic-loading"));
    let manifest = dest.join("Cargo.toml");
    if std::fs::read_to_string(&manifest).is_ok_and(|m| m.contains(PATCH_NOTE)) {
        return Ok(dest);
    }
    let source = fetch_crate(root, CANDLE_CORE, CANDLE_VERSION)?;
    if dest.exists() {
        std::fs::remove_dir_all(&dest).with_context(|| format!("clearing {}", dest.display()))?;
    }
    copy_dir(&source, &dest)?;
    let text = std::fs::read_to_string(&manifest)
        .with_context(|| format!("reading {}", manifest.display()))?;
    let text = patch_manifest(&text).with_context(|| format!("{}", manifest.display()))?;
    std::fs::write(&manifest, text).with_context(|| format!("writing {}", manifest.display()))?;
    Ok(dest)
}

/// candle-core's manifest with cudarc's one `"dynamic-linking",` turned
/// into `"dynamic-loading",`, and a first line that says so.
fn patch_manifest(text: &str) -> Result<String> {
    let from = "\"dynamic-linking\",";
    let found = text.matches(from).count();
    if found != 1 {
        bail!(
            "expected one {from} in candle-core's cudarc features, found {found}: the patch no longer fits"
        );
    }
    Ok(format!(
        "{PATCH_NOTE}\n{}",
        text.replace(from, "\"dynamic-loading\",")
    ))
}

const PATCH_NOTE: &str = "# Patched by `cargo xtask candle-example`: cudarc's \"dynamic-linking\" \
                          became \"dynamic-loading\" (xtask/src/candle.rs).";

/// The unpacked source of a crates.io crate, downloaded by cargo (which
/// checks it against the index's checksum) for a throw-away manifest.
fn fetch_crate(root: &Path, name: &str, version: &str) -> Result<PathBuf> {
    let dir = root.join(".cache").join("candle-fetch");
    std::fs::create_dir_all(dir.join("src"))?;
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"candle-fetch\"\nversion = \"0.0.0\"\nedition = \"2024\"\n\
             publish = false\n\n[dependencies]\n{name} = {{ version = \"={version}\", \
             default-features = false }}\n\n[workspace]\n"
        ),
    )?;
    std::fs::write(dir.join("src").join("lib.rs"), "")?;
    let manifest = dir.join("Cargo.toml");
    let mut cmd = Command::new("rustup");
    cmd.args([
        "run",
        TOOLCHAIN,
        "cargo",
        "metadata",
        "--format-version",
        "1",
    ])
    .arg("--manifest-path")
    .arg(&manifest)
    .current_dir(&dir);
    crate::stable::scrub(&mut cmd);
    let out = cmd.output().context("running cargo metadata")?;
    if !out.status.success() {
        bail!(
            "cargo metadata for {name} {version} failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let meta: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("parsing cargo metadata")?;
    let packages = meta
        .get("packages")
        .and_then(|p| p.as_array())
        .context("cargo metadata has no packages")?;
    let manifest_path = packages
        .iter()
        .find(|p| {
            p.get("name").and_then(|n| n.as_str()) == Some(name)
                && p.get("version").and_then(|v| v.as_str()) == Some(version)
        })
        .and_then(|p| p.get("manifest_path"))
        .and_then(|m| m.as_str())
        .with_context(|| format!("cargo metadata does not list {name} {version}"))?;
    Path::new(manifest_path)
        .parent()
        .map(Path::to_owned)
        .context("the manifest has no directory")
}

fn copy_dir(src: &Path, dst: &Path) -> Result<()> {
    std::fs::create_dir_all(dst)?;
    for entry in std::fs::read_dir(src).with_context(|| format!("reading {}", src.display()))? {
        let entry = entry?;
        let to = dst.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &to)?;
        } else {
            std::fs::copy(entry.path(), &to)
                .with_context(|| format!("copying {}", entry.path().display()))?;
        }
    }
    Ok(())
}

/// How to install the example's tool chain.
const TOOLCHAIN_HINT: &str = "`rustup toolchain install 1.95.0 --profile minimal`";

/// Checks that `examples/candle-tp/Cargo.lock` resolves the example's
/// manifests as they are (`cargo metadata --locked`), without building
/// candle: a lock that lacks a crate the workspace added fails here, in
/// CI, rather than at the start of a 10-minute build. The first run
/// fetches candle-core (the patched copy the manifest points at) into
/// `.cache/`; later runs need no network. Then runs the timing
/// statistics' unit tests ([`stats_tests`]).
pub fn check_lock(root: &Path) -> Result<()> {
    patched_candle_core(root)?;
    let manifest = root.join("examples").join("candle-tp").join("Cargo.toml");
    let mut cmd = Command::new("rustup");
    cmd.args(["run", TOOLCHAIN, "cargo", "metadata", "--locked"])
        .args(["--format-version", "1", "--manifest-path"])
        .arg(&manifest)
        .current_dir(root);
    crate::stable::scrub(&mut cmd);
    eprintln!(
        "xtask: $ rustup run {TOOLCHAIN} cargo metadata --locked --format-version 1 \
         --manifest-path {}",
        manifest.display()
    );
    let out = cmd
        .output()
        .with_context(|| format!("starting rustup (the tool chain: {TOOLCHAIN_HINT})"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        // rustup's own refusal (RUSTUP_AUTO_INSTALL=0): say so, rather
        // than blame the lock file.
        if stderr.contains("is not installed") {
            bail!(
                "the tool chain {TOOLCHAIN} is not installed: {TOOLCHAIN_HINT} (.ci/run does)\n{}",
                stderr.trim_end()
            );
        }
        bail!(
            "examples/candle-tp/Cargo.lock does not resolve the example's manifests ({}): \
             refresh it with `cargo update --workspace` in examples/candle-tp\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim_end()
        );
    }
    eprintln!("xtask: examples/candle-tp/Cargo.lock resolves (--locked)");
    stats_tests(root)
}

/// The example's timing statistics (`src/stats.rs`, std only) compiled
/// alone with `rustc --test` on the example's tool chain and run: its
/// unit tests, without candle's 10-minute CUDA build (`cargo test` in the
/// example runs them too, where candle builds).
fn stats_tests(root: &Path) -> Result<()> {
    let source = root
        .join("examples")
        .join("candle-tp")
        .join("src")
        .join("stats.rs");
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
        .join("candle-stats");
    std::fs::create_dir_all(&dir)?;
    let bin = dir.join("stats-tests");
    let mut cmd = Command::new("rustup");
    cmd.args(["run", TOOLCHAIN, "rustc", "--edition", "2024", "--test"])
        .args(["-D", "warnings", "-o"])
        .arg(&bin)
        .arg(&source)
        .current_dir(root);
    crate::stable::scrub(&mut cmd);
    eprintln!(
        "xtask: $ rustup run {TOOLCHAIN} rustc --edition 2024 --test -D warnings -o {} {}",
        bin.display(),
        source.display()
    );
    let status = cmd
        .status()
        .with_context(|| format!("starting rustup (the tool chain: {TOOLCHAIN_HINT})"))?;
    if !status.success() {
        bail!(
            "compiling the tests of {} failed ({status})",
            source.display()
        );
    }
    let status = Command::new(&bin)
        .status()
        .with_context(|| format!("running {}", bin.display()))?;
    if !status.success() {
        bail!("the tests of {} failed ({status})", source.display());
    }
    Ok(())
}

/// Builds `examples/candle-tp` (release, stable Rust, the wheels'
/// toolkit) and prints the binary's path. With `out`, also copies the
/// stripped binary, `libcudart.so.13` it links against, and the launcher
/// (`intranode-run`, built by the workspace) there, for a GPU machine.
pub fn example(root: &Path, out: Option<&Path>) -> Result<()> {
    let cuda_root = toolkit(root)?;
    patched_candle_core(root)?;
    let crate_dir = root.join("examples").join("candle-tp");
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
        .join("candle-tp");
    let mut cmd = Command::new("rustup");
    cmd.args(["run", TOOLCHAIN, "cargo", "build", "--release", "--locked"])
        .arg("--target-dir")
        .arg(&target_dir)
        .current_dir(&crate_dir);
    crate::stable::scrub(&mut cmd);
    toolkit_env(&mut cmd, &cuda_root)?;
    eprintln!(
        "xtask: (in {}, CUDA_ROOT={}) $ rustup run {TOOLCHAIN} cargo build --release --locked \
         --target-dir {}",
        crate_dir.display(),
        cuda_root.display(),
        target_dir.display()
    );
    let status = cmd
        .status()
        .with_context(|| format!("starting rustup (the tool chain: {TOOLCHAIN_HINT})"))?;
    if !status.success() {
        bail!(
            "`cargo build --release --locked` of examples/candle-tp failed ({status}): cargo's \
             message above says what (a lock file that no longer matches the manifests: \
             `cargo xtask ci --only candle-lock` checks it without building candle)"
        );
    }
    let bin = target_dir.join("release").join("candle-tp");
    println!("{}", bin.display());
    let Some(out) = out else {
        return Ok(());
    };
    let cargo = intranode_ptx_builder::cargo_binary();
    let cargo = cargo.to_str().context("cargo path is not UTF-8")?;
    crate::process::run(
        root,
        cargo,
        &["build", "--release", "--locked", "-p", "intranode-launcher"],
    )?;
    let workspace_target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    std::fs::create_dir_all(out)?;
    crate::bundle::copy_stripped(&bin, &out.join("candle-tp"))?;
    crate::bundle::copy_stripped(
        &workspace_target.join("release").join("intranode-run"),
        &out.join("intranode-run"),
    )?;
    let lib = out.join("lib");
    std::fs::create_dir_all(&lib)?;
    std::fs::copy(
        cuda_root.join("lib").join("libcudart.so.13"),
        lib.join("libcudart.so.13"),
    )
    .context("copying libcudart.so.13")?;
    println!("{}", out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_turns_the_one_linking_feature_into_loading() {
        let text =
            "[dependencies.cudarc]\nfeatures = [\n    \"driver\",\n    \"dynamic-linking\",\n]\n";
        let patched = patch_manifest(text).unwrap();
        assert!(patched.starts_with(PATCH_NOTE));
        assert!(patched.contains("\"dynamic-loading\","));
        assert!(!patched.contains("dynamic-linking\","));
        // A manifest that changed shape is refused, not half patched.
        assert!(patch_manifest("features = [\"driver\"]").is_err());
        let twice = format!("{text}{text}");
        assert!(patch_manifest(&twice).is_err());
    }
}
