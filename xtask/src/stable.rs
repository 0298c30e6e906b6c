//! `stable-embed`: builds and runs `tests/stable-embed`, a crate outside
//! the workspace that depends on the host crate by path, with the stable
//! tool chain, from a directory outside the repository, so neither
//! `rust-toolchain.toml` nor `.cargo/config.toml` is in effect. It fails
//! if any part of the build the users get needs nightly.

use std::path::{Path, PathBuf};
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
    let target_dir = stable_target_dir(root);
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

/// The target folder of every stable build of a user's crate: the one by
/// path (`stable-embed`) and the one against the packaged crates
/// (`package`) build the same dependencies with the same tool chain and
/// profile, so the second finds them built. The crates that differ (ours,
/// by path from the workspace or from this run's unpacked packages) are
/// packages of their own to cargo, built apart.
fn stable_target_dir(root: &Path) -> PathBuf {
    root.join("target").join("stable-embed")
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

/// Every crate the workspace publishes, dependencies first: what a
/// user's build needs, and the launcher (`cargo install
/// intranode-launcher` gives users `intranode-run`).
pub const PUBLISHED: &[&str] = &[
    "intranode-ptx-builder",
    "intranode-kernels-gpu",
    "intranode-store",
    "intranode-dist-env",
    "intranode-ipc",
    "intranode",
    "intranode-launcher",
];

/// crates.io refuses a `.crate` file over 10 MiB.
const CRATES_IO_LIMIT_BYTES: u64 = 10 << 20;

/// The workspace's packages whose manifest allows publishing, from `cargo
/// metadata`, checked against [`PUBLISHED`] and against the names that
/// are ours on crates.io: `intranode` and `intranode-*` (docs/RELEASE.md
/// records that each was free when checked). A new publishable crate, or
/// one under another name, fails here.
fn check_published_names(root: &Path, cargo: &str) -> Result<()> {
    let out = Command::new(cargo)
        .args(["metadata", "--no-deps", "--format-version", "1", "--locked"])
        .current_dir(root)
        .output()
        .context("starting cargo metadata")?;
    if !out.status.success() {
        bail!(
            "cargo metadata failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let meta: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("parsing cargo metadata")?;
    let mut published: Vec<String> = meta["packages"]
        .as_array()
        .context("cargo metadata has no packages")?
        .iter()
        // `publish`: null where any registry may have it, [] for `false`.
        .filter(|p| p["publish"].as_array().is_none_or(|r| !r.is_empty()))
        .filter_map(|p| p["name"].as_str().map(str::to_owned))
        .collect();
    published.sort();
    let mut expected: Vec<String> = PUBLISHED.iter().map(|s| (*s).to_owned()).collect();
    expected.sort();
    if published != expected {
        bail!(
            "the workspace publishes {published:?}, xtask's PUBLISHED lists {expected:?}: \
             update PUBLISHED and docs/RELEASE.md (check the name with `cargo info NAME`)"
        );
    }
    if let Some(bad) = published
        .iter()
        .find(|n| *n != "intranode" && !n.starts_with("intranode-"))
    {
        bail!("published crate {bad:?} is not named intranode or intranode-*");
    }
    Ok(())
}

/// The workspace's `rust-version` (`1.88` in `[workspace.package]`) as the
/// tool chain that builds exactly it (`1.88.0`).
pub fn msrv_toolchain(root: &Path) -> Result<String> {
    let manifest =
        std::fs::read_to_string(root.join("Cargo.toml")).context("reading Cargo.toml")?;
    let version = manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("rust-version = \""))
        .and_then(|rest| rest.strip_suffix('"'))
        .context("no rust-version in the workspace's Cargo.toml")?;
    Ok(match version.split('.').count() {
        2 => format!("{version}.0"),
        _ => version.to_owned(),
    })
}

/// A `.crate` over this size gets a warning: room is left for kernel
/// families to come before [`CRATE_FAIL_BYTES`].
const CRATE_WARN_BYTES: u64 = 6 << 20;

/// A `.crate` over this size fails the run, a margin under
/// [`CRATES_IO_LIMIT_BYTES`], so that publishing never meets the limit.
const CRATE_FAIL_BYTES: u64 = 9 << 20;

/// A folder of this run's own under the system's temporary folder,
/// removed with everything in it when dropped: two runs on one machine
/// (two CI clones, say) never meet in it.
#[derive(Debug)]
pub(crate) struct RunDir(PathBuf);

impl RunDir {
    pub(crate) fn new(what: &str) -> Result<Self> {
        let base = std::env::temp_dir();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        for attempt in 0..100u32 {
            let dir = base.join(format!(
                "intranode-{what}-{}-{nanos}-{attempt}",
                std::process::id()
            ));
            // `create_dir`, not `create_dir_all`: it fails where the
            // folder exists, so no two runs share one.
            match std::fs::create_dir(&dir) {
                Ok(()) => return Ok(Self(dir)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e).with_context(|| format!("creating {}", dir.display())),
            }
        }
        bail!("no fresh folder for {what} under {}", base.display())
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0) {
            eprintln!("xtask: leaving {} ({e})", self.0.display());
        }
    }
}

/// The `CARGO_HOME` a plain cargo command uses.
fn shared_cargo_home() -> Result<PathBuf> {
    if let Some(home) = std::env::var_os("CARGO_HOME") {
        return Ok(PathBuf::from(home));
    }
    let home = std::env::var_os("HOME").context("neither CARGO_HOME nor HOME is set")?;
    Ok(Path::new(&home).join(".cargo"))
}

/// A `CARGO_HOME` of this run's own inside `run_dir` for the dry run,
/// with the shared home's downloaded packages (`registry/cache`, and
/// `git/`) as links and its configuration copied; the index it reads
/// afresh (the dry run asks the registry about the packages' versions, so
/// it cannot run offline).
///
/// `cargo publish --workspace --dry-run` serves the workspace's packages
/// from a registry of its own and unpacks each into
/// `$CARGO_HOME/registry/src/`, in a folder named after a hash of that
/// registry's path, and cargo unpacks a package only once: a run at the
/// same path with the same `CARGO_HOME` as an earlier one would build the
/// earlier run's `intranode-* 0.1.0` sources. Unpacked into a home of its
/// own, each run builds its own sources and touches nothing another run
/// reads. Every package is fetched into the shared home first (under its
/// lock), so nothing is written through the links.
fn private_cargo_home(run_dir: &Path) -> Result<PathBuf> {
    let shared = shared_cargo_home()?;
    let home = run_dir.join("cargo-home");
    let registry = home.join("registry");
    std::fs::create_dir_all(&registry)
        .with_context(|| format!("creating {}", registry.display()))?;
    for (from, to) in [
        (
            shared.join("registry").join("cache"),
            registry.join("cache"),
        ),
        (shared.join("git"), home.join("git")),
    ] {
        if from.exists() {
            std::os::unix::fs::symlink(&from, &to)
                .with_context(|| format!("linking {} to {}", to.display(), from.display()))?;
        }
    }
    for name in ["config.toml", "config"] {
        let from = shared.join(name);
        if from.is_file() {
            std::fs::copy(&from, home.join(name))
                .with_context(|| format!("copying {}", from.display()))?;
        }
    }
    Ok(home)
}

/// `cargo xtask package`:
/// 1. the published names ([`check_published_names`]);
/// 2. `cargo publish --workspace --dry-run --no-verify`: cargo packages
///    every published crate as crates.io would receive it and runs the
///    registry's checks, without building (the builds are 4 and 5);
/// 3. each `.crate` under the crates.io limit, unpacked;
/// 4. with exactly the `rust-version` tool chain ([`msrv_toolchain`]):
///    the doc tests inside the packaged `intranode` (its README's
///    example among them), and `cargo install` of `intranode-run` from
///    the packaged launcher (unoptimised, in the same target folder, so
///    it finds the dependencies built); between them they build every
///    published crate from its package alone, against the others'
///    packages: what the dry run's verification would build;
/// 5. with stable, `tests/stable-embed`'s program as a crate that depends
///    on `intranode = "0.1.0"`: the build users get from a registry, with
///    no workspace, kernel sources, nightly or ptxas around;
/// 6. the unpacked packages unchanged by those builds (cargo's own
///    verification fails a build script that writes outside `OUT_DIR`).
///
/// The unpacked crates depend on each other by version, as on crates.io;
/// `[patch.crates-io]` points them at one another until they are published.
pub fn run_packaged(root: &Path) -> Result<()> {
    let cargo = intranode_ptx_builder::cargo_binary();
    let cargo = cargo.to_str().context("cargo path is not UTF-8")?;
    check_published_names(root, cargo)?;
    let msrv = msrv_toolchain(root)?;
    // Checked before the long steps, with the fix: on machines with
    // `RUSTUP_AUTO_INSTALL=0` the tool chain must be installed by hand.
    let installed = Command::new("rustup")
        .args(["run", msrv.as_str(), "rustc", "-V"])
        .output()
        .is_ok_and(|out| out.status.success());
    if !installed {
        bail!(
            "the tool chain {msrv} (the published crates' rust-version) is not installed: \
             rustup toolchain install {msrv} --profile minimal (.ci/run does)"
        );
    }
    // A target folder of its own, emptied first: cargo takes a registry
    // package of a name and version as immutable, so anything of an
    // earlier `intranode-kernels-gpu 0.1.0` left there would stand in for
    // today's (a layout field added since then once went missing).
    let dry_run_dir = root.join("target").join("publish-dry-run");
    if dry_run_dir.exists() {
        std::fs::remove_dir_all(&dry_run_dir)
            .with_context(|| format!("clearing {}", dry_run_dir.display()))?;
    }
    let dry_run_dir = dry_run_dir
        .to_str()
        .context("the target folder's path is not UTF-8")?;
    let run_dir = RunDir::new("package")?;
    // Every dependency's package into the shared home, under its lock:
    // the packaging below, in a home of its own, finds them there.
    crate::process::run(root, cargo, &["fetch", "--locked"])?;
    let cargo_home = private_cargo_home(run_dir.path())?;
    let cargo_home = cargo_home.to_str().context("path is not UTF-8")?;
    timed("the dry run", || {
        crate::process::run_env(
            root,
            &[
                ("CARGO_TARGET_DIR", dry_run_dir),
                ("CARGO_HOME", cargo_home),
            ],
            cargo,
            &[
                "publish",
                "--workspace",
                "--dry-run",
                "--no-verify",
                "--locked",
                "--allow-dirty",
            ],
        )
    })?;
    // The same packages again where cargo documents them
    // (`target/package/NAME-VERSION.crate`; the dry run keeps its own in
    // internal folders): packaging alone, the builds were verified above.
    let mut args = vec![
        "package",
        "--no-verify",
        "--allow-dirty",
        "--locked",
        "--offline",
    ];
    for p in PUBLISHED {
        args.extend(["-p", p]);
    }
    crate::process::run_env(root, &[("CARGO_HOME", cargo_home)], cargo, &args)?;
    let work = root.join("target").join("stable-packaged");
    if work.exists() {
        std::fs::remove_dir_all(&work).with_context(|| format!("clearing {}", work.display()))?;
    }
    // The packages unpacked outside the repository: cargo run inside one
    // must find neither the workspace's manifest (it would take the
    // package for a stray member) nor its `.cargo/config.toml`.
    let unpacked = run_dir.path().join("crates");
    std::fs::create_dir_all(&unpacked)
        .with_context(|| format!("creating {}", unpacked.display()))?;
    let mut patch = String::from("[patch.crates-io]\n");
    let mut patch_args = Vec::new();
    for p in PUBLISHED {
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
        check_crate_size(&file, bytes)?;
        let crate_file =
            std::fs::File::open(&file).with_context(|| format!("opening {}", file.display()))?;
        tar::Archive::new(flate2::read::GzDecoder::new(crate_file))
            .unpack(&unpacked)
            .with_context(|| format!("unpacking {}", file.display()))?;
        let dir = unpacked.join(format!("{p}-0.1.0"));
        let dir = dir.to_str().context("path is not UTF-8")?;
        patch.push_str(&format!("{p} = {{ path = {dir:?} }}\n"));
        patch_args.push("--config".to_owned());
        patch_args.push(format!("patch.crates-io.{p}.path={dir:?}"));
    }
    let patch_args: Vec<&str> = patch_args.iter().map(String::as_str).collect();
    let host = unpacked.join("intranode-0.1.0");
    std::fs::copy(root.join("Cargo.lock"), host.join("Cargo.lock"))
        .context("seeding the packaged intranode's lock")?;
    let before = fingerprint(&unpacked)?;

    // The doc tests inside the packaged `intranode`, on the oldest Rust
    // the crates promise.
    let msrv_target = work.join("target-msrv");
    let msrv_target = msrv_target.to_str().context("path is not UTF-8")?;
    let mut args = vec!["run", msrv.as_str(), "cargo", "test", "--doc", "--offline"];
    args.extend_from_slice(&patch_args);
    args.extend(["--target-dir", msrv_target]);
    timed("the doc tests on the rust-version", || {
        rustup_outside(&host, &args, "doc tests of the packaged intranode")
    })?;
    // `cargo install` of the launcher from its package.
    let launcher = unpacked.join("intranode-launcher-0.1.0");
    let install_root = work.join("install");
    let install_root = install_root.to_str().context("path is not UTF-8")?;
    let launcher_dir = launcher.to_str().context("path is not UTF-8")?;
    let mut args = vec![
        "run",
        msrv.as_str(),
        "cargo",
        "install",
        "--offline",
        // The doc tests' profile: their dependencies are built already.
        "--debug",
        "--path",
        launcher_dir,
        "--root",
        install_root,
        "--target-dir",
        msrv_target,
    ];
    args.extend_from_slice(&patch_args);
    timed("the launcher's install on the rust-version", || {
        rustup_outside(&launcher, &args, "cargo install of the packaged launcher")
    })?;
    let run = Path::new(install_root).join("bin").join("intranode-run");
    let help = Command::new(&run)
        .arg("--help")
        .output()
        .with_context(|| format!("starting {}", run.display()))?;
    if !help.status.success() {
        bail!("{} --help failed ({})", run.display(), help.status);
    }
    eprintln!(
        "xtask: the published crates build with {msrv}; intranode-run installs from its package"
    );

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
    let target_dir = stable_target_dir(root);
    let target_dir = target_dir.to_str().context("path is not UTF-8")?;
    let status = timed("the stable build against the packages", || {
        cargo_run_on_stable(manifest, target_dir, &["--offline"], "packaged crates")
    })?;
    if !status.success() {
        bail!(
            "the stable build against the packaged crates failed ({status}): a user's build \
             from the registry would fail"
        );
    }
    eprintln!("xtask: a stable crate builds and runs against the packaged crates");
    let after = fingerprint(&unpacked)?;
    if let Some(changed) = first_change(&before, &after) {
        bail!(
            "building the packaged crates changed {changed} in {}: a build script may write \
             only under OUT_DIR",
            unpacked.display()
        );
    }
    Ok(())
}

/// Runs `step`, then says how long `what` took.
fn timed<T>(what: &str, step: impl FnOnce() -> Result<T>) -> Result<T> {
    let started = std::time::Instant::now();
    let result = step();
    eprintln!("xtask: {what}: {:.1} s", started.elapsed().as_secs_f64());
    result
}

/// Every file under `dir` but the lock files (cargo prunes the seeded
/// ones to what each package uses), by path relative to `dir`, with its
/// contents.
fn fingerprint(dir: &Path) -> Result<std::collections::BTreeMap<PathBuf, Vec<u8>>> {
    let mut files = std::collections::BTreeMap::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let path = entry?.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.file_name().is_some_and(|n| n != "Cargo.lock") {
                let bytes =
                    std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
                let rel = path.strip_prefix(dir).unwrap_or(&path).to_owned();
                files.insert(rel, bytes);
            }
        }
    }
    Ok(files)
}

/// The first file added, removed or changed between two [`fingerprint`]s.
fn first_change(
    before: &std::collections::BTreeMap<PathBuf, Vec<u8>>,
    after: &std::collections::BTreeMap<PathBuf, Vec<u8>>,
) -> Option<String> {
    let changed = before
        .iter()
        .find(|(path, bytes)| after.get(*path) != Some(*bytes))
        .map(|(path, _)| path)
        .or_else(|| after.keys().find(|path| !before.contains_key(*path)))?;
    Some(changed.display().to_string())
}

/// Fails above [`CRATE_FAIL_BYTES`] and warns above [`CRATE_WARN_BYTES`]
/// for the `.crate` `file` of `bytes` bytes.
fn check_crate_size(file: &Path, bytes: u64) -> Result<()> {
    let mib = |b: u64| b as f64 / f64::from(1u32 << 20);
    if bytes > CRATE_FAIL_BYTES {
        bail!(
            "{} is {:.2} MiB, over the {:.0} MiB this task allows (crates.io refuses {:.0} MiB): \
             shrink the embedded kernels (docs/USING.md, \"What a binary carries\")",
            file.display(),
            mib(bytes),
            mib(CRATE_FAIL_BYTES),
            mib(CRATES_IO_LIMIT_BYTES)
        );
    }
    if bytes > CRATE_WARN_BYTES {
        eprintln!(
            "xtask: warning: {} is {:.2} MiB, over {:.0} MiB; the run fails above {:.0} MiB",
            file.display(),
            mib(bytes),
            mib(CRATE_WARN_BYTES),
            mib(CRATE_FAIL_BYTES)
        );
    }
    Ok(())
}

/// `rustup ARGS` in `dir` (an unpacked package, outside the workspace's
/// `.cargo/config.toml` and tool chain file) with the workspace's cargo
/// variables scrubbed; fails with `what`.
fn rustup_outside(dir: &Path, args: &[&str], what: &str) -> Result<()> {
    eprintln!(
        "xtask: ({what}, in {}) $ rustup {}",
        dir.display(),
        args.join(" ")
    );
    let mut cmd = Command::new("rustup");
    cmd.args(args).current_dir(dir);
    scrub(&mut cmd);
    let status = cmd.status().context("starting rustup")?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crate_sizes_warn_then_fail() {
        let file = Path::new("intranode-0.1.0.crate");
        assert!(check_crate_size(file, 4 << 20).is_ok());
        assert!(check_crate_size(file, CRATE_WARN_BYTES + 1).is_ok());
        assert!(check_crate_size(file, CRATE_FAIL_BYTES).is_ok());
        let err = check_crate_size(file, CRATE_FAIL_BYTES + 1).unwrap_err();
        assert!(err.to_string().contains("over the 9 MiB"), "{err}");
        const { assert!(CRATE_FAIL_BYTES < CRATES_IO_LIMIT_BYTES) };
    }

    #[test]
    fn a_changed_added_or_removed_file_is_named() {
        let dir = RunDir::new("xtask-test").unwrap();
        std::fs::create_dir_all(dir.path().join("a/src")).unwrap();
        std::fs::write(dir.path().join("a/src/lib.rs"), b"x").unwrap();
        std::fs::write(dir.path().join("a/Cargo.lock"), b"1").unwrap();
        let before = fingerprint(dir.path()).unwrap();
        // A lock file cargo rewrites is no change.
        std::fs::write(dir.path().join("a/Cargo.lock"), b"2").unwrap();
        assert_eq!(
            first_change(&before, &fingerprint(dir.path()).unwrap()),
            None
        );
        std::fs::write(dir.path().join("a/src/lib.rs"), b"y").unwrap();
        let changed = first_change(&before, &fingerprint(dir.path()).unwrap());
        assert_eq!(changed.as_deref(), Some("a/src/lib.rs"));
        std::fs::write(dir.path().join("a/src/lib.rs"), b"x").unwrap();
        std::fs::write(dir.path().join("a/src/gen.rs"), b"").unwrap();
        let added = first_change(&before, &fingerprint(dir.path()).unwrap());
        assert_eq!(added.as_deref(), Some("a/src/gen.rs"));
        std::fs::remove_file(dir.path().join("a/src/gen.rs")).unwrap();
        std::fs::remove_file(dir.path().join("a/src/lib.rs")).unwrap();
        let removed = first_change(&before, &fingerprint(dir.path()).unwrap());
        assert_eq!(removed.as_deref(), Some("a/src/lib.rs"));
    }

    #[test]
    fn run_dirs_are_distinct_and_removed() {
        let a = RunDir::new("xtask-test").unwrap();
        let b = RunDir::new("xtask-test").unwrap();
        assert_ne!(a.path(), b.path());
        std::fs::write(a.path().join("f"), b"x").unwrap();
        let kept = a.path().to_owned();
        drop(a);
        assert!(!kept.exists());
        assert!(b.path().is_dir());
    }
}
