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
    let status = cargo_run_on_stable(manifest, target_dir, &[], &rustc)?;
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

/// The crates a user's build needs, in the order `cargo package` may
/// take them (dependencies first).
pub const PACKAGED: &[&str] = &[
    "intranode-ptx-builder",
    "intranode-kernels-gpu",
    "intranode-store",
    "intranode-dist-env",
    "intranode-ipc",
    "intranode",
];

/// crates.io refuses a `.crate` file over 10 MiB.
const CRATES_IO_LIMIT_BYTES: u64 = 10 << 20;

/// `cargo xtask package`: packages [`PACKAGED`] (`cargo package
/// --no-verify`: they are not on a registry yet, so cargo's own verify
/// build could not resolve them), fails on a `.crate` over the crates.io
/// limit, unpacks them, and builds and runs `tests/stable-embed`'s program
/// with the stable tool chain as a crate that depends on `intranode =
/// "0.1.0"`, patched to the unpacked packages: the build users get from a
/// registry, with no workspace, kernel sources, nightly or ptxas around.
pub fn run_packaged(root: &Path) -> Result<()> {
    let cargo = intranode_ptx_builder::cargo_binary();
    let cargo = cargo.to_str().context("cargo path is not UTF-8")?;
    let mut args = vec![
        "package",
        "--no-verify",
        "--allow-dirty",
        "--locked",
        "--offline",
    ];
    for p in PACKAGED {
        args.extend(["-p", p]);
    }
    crate::run(root, cargo, &args)?;
    let work = root.join("target").join("stable-packaged");
    if work.exists() {
        std::fs::remove_dir_all(&work).with_context(|| format!("clearing {}", work.display()))?;
    }
    let unpacked = work.join("crates");
    std::fs::create_dir_all(&unpacked)?;
    let mut patch = String::from("[patch.crates-io]\n");
    for p in PACKAGED {
        let file = root
            .join("target")
            .join("package")
            .join(format!("{p}-0.1.0.crate"));
        let bytes = std::fs::metadata(&file)
            .with_context(|| format!("{} (packaged?)", file.display()))?
            .len();
        eprintln!(
            "xtask: {}: {:.2} MiB",
            file.display(),
            bytes as f64 / f64::from(1u32 << 20)
        );
        if bytes > CRATES_IO_LIMIT_BYTES {
            bail!(
                "{} is {bytes} bytes, over crates.io's 10 MiB limit",
                file.display()
            );
        }
        let status = Command::new("tar")
            .arg("-xzf")
            .arg(&file)
            .arg("-C")
            .arg(&unpacked)
            .status()
            .context("starting tar")?;
        if !status.success() {
            bail!("unpacking {} failed ({status})", file.display());
        }
        let dir = unpacked.join(format!("{p}-0.1.0"));
        let dir = dir.to_str().context("path is not UTF-8")?;
        patch.push_str(&format!("{p} = {{ path = {dir:?} }}\n"));
    }
    // The user's crate: stable-embed's program against `intranode =
    // "0.1.0"` from the packages.
    let app = work.join("app");
    std::fs::create_dir_all(app.join("src"))?;
    std::fs::copy(
        root.join("tests/stable-embed/src/main.rs"),
        app.join("src/main.rs"),
    )
    .context("copying stable-embed's program")?;
    std::fs::write(
        app.join("Cargo.toml"),
        format!(
            "[package]\nname = \"stable-packaged\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\
             publish = false\n\n[dependencies]\nintranode = \"0.1.0\"\n\n{patch}\n[workspace]\n"
        ),
    )?;
    std::fs::copy(root.join("Cargo.lock"), app.join("Cargo.lock")).context("seeding the lock")?;
    let manifest = app.join("Cargo.toml");
    let manifest = manifest.to_str().context("path is not UTF-8")?;
    let target_dir = work.join("target");
    let target_dir = target_dir.to_str().context("path is not UTF-8")?;
    let status = cargo_run_on_stable(manifest, target_dir, &["--offline"], "packaged crates")?;
    if !status.success() {
        bail!(
            "the stable build against the packaged crates failed ({status}): a user's build \
             from the registry would fail"
        );
    }
    eprintln!("xtask: a stable crate builds and runs against the packaged crates");
    Ok(())
}

/// `rustup run TOOLCHAIN cargo run [extra] --manifest-path MANIFEST
/// --target-dir TARGET_DIR` from outside the workspace (so its
/// `rust-toolchain.toml` does not apply) with the workspace's cargo
/// variables scrubbed, as a user's build would run; `what` labels the
/// command line it prints.
fn cargo_run_on_stable(
    manifest: &str,
    target_dir: &str,
    extra: &[&str],
    what: &str,
) -> Result<std::process::ExitStatus> {
    let mut args = vec!["run", TOOLCHAIN, "cargo", "run"];
    args.extend_from_slice(extra);
    args.extend(["--manifest-path", manifest, "--target-dir", target_dir]);
    let outside = std::env::temp_dir();
    eprintln!(
        "xtask: ({what}, in {}) $ rustup {}",
        outside.display(),
        args.join(" ")
    );
    let mut cmd = Command::new("rustup");
    cmd.args(&args).current_dir(&outside);
    scrub(&mut cmd);
    cmd.status().context("starting rustup")
}
