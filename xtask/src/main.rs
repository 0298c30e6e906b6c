//! `cargo xtask`: the project's build tasks, in Rust rather than scripts.
//!
//! - `build-ptx [--arch sm_90] [--out DIR]`: builds the kernels to PTX, the
//!   production kernels and the test kernels (`intranode_ptx_builder::KernelSet`),
//!   and prints the files' paths. `build-ptx --write` regenerates the
//!   committed kernels the host crate embeds (`host/ptx/`: both PTX sets
//!   for every committed architecture, the production PTX xz-compressed, the
//!   production cubins assembled by the pinned ptxas, and the source
//!   stamp): run it after changing the kernels.
//! - `check-committed-ptx`: fails when `host/ptx/` differs from what the
//!   kernel source emits now.
//! - `stable-embed`: builds and runs `tests/stable-embed` (a user's crate
//!   outside the workspace) with the stable tool chain.
//! - `package`: the published crates
//!   (`stable::PUBLISHED`): names, `cargo publish --workspace --dry-run`,
//!   each under crates.io's 10 MiB, doc tests of the packaged `intranode`
//!   and `cargo install` of the packaged launcher with the `rust-version`
//!   tool chain, then a stable
//!   build and run of a crate that depends on `intranode = "0.1.0"`
//!   patched to the unpacked packages (`tests/stable-embed`'s program).
//! - `doc`: `cargo doc --no-deps` of the published crates (intranode, its
//!   store, dist-env and ipc, the kernels' crate, the PTX builder and the
//!   launcher) with warnings denied; each denies `missing_docs`.
//! - `check-ptx [--arch sm_90]`: assembles both PTX files with `ptxas -v`
//!   (fetched from PyPI into `.cache/` when absent) and fails on assembler
//!   errors, out-of-line calls (`.extern .func`), spills or stack frames
//!   (beyond the few `ptxas::ALLOWED_SPILLS` lists for sm_80), a kernel
//!   over 128 registers (a 512-thread block's share), a PTX for a JIT-only
//!   architecture without `.maxnreg` on every entry,
//!   or a committed production cubin (`host/ptx/kernels-<arch>.cubin.xz`)
//!   that differs from the machine code ptxas made; prints registers per
//!   kernel, and fails where the production kernels' spill table in
//!   docs/RELEASE.md (for sm_80) is not what ptxas reports (`--write`
//!   rewrites it).
//! - `long-files`: fails, naming them, when a `.rs` file git tracks is
//!   over 700 lines without a `// (Over 700 lines: ...)` reason among its
//!   first 60 lines (`ci` runs it too).
//! - `ci`: everything CI checks (fmt, the reason atop every tracked `.rs`
//!   file over 700 lines (`long_files`), committed PTX, clippy for host and
//!   kernel targets (both kernel sets), the examples alone, the candle
//!   example's lock, tests, doc, build-ptx, check-ptx, stable-embed,
//!   package).
//! - `device-bundle [--out DIR]`: release binaries and test executables,
//!   stripped, for a GPU machine that has no Rust tool chain.
//! - `demo`: the main job: one process per visible GPU (`nvidia-smi -L`
//!   narrowed by `CUDA_VISIBLE_DEVICES`) under `intranode-run`, a short
//!   all-reduce sweep of ours against NCCL, checked, as a table. Exits 0
//!   without running only where the machine has no GPU; GPUs that cannot
//!   be used, or fewer than 2 visible, are an error (so are they for
//!   `bench`, and fewer than 1 for `decode`).
//! - `bench [--out DIR] [-- BENCH ARGS]`: the full benchmark under
//!   `intranode-run` at every world size the local GPUs allow, results and
//!   one plot of all of them in `DIR` (default `target/bench-out`).
//! - `decode [--out DIR] [-- DECODE ARGS]`: the tensor-parallel decode
//!   benchmark on every local GPU under `intranode-run`, results in `DIR`
//!   (default `target/decode-out`).
//! - `cuda-toolkit`: the CUDA 13.0 compiler from PyPI wheels, unpacked
//!   into `.cache/cuda-13.0` when absent; prints the variables that make a
//!   build use it.
//! - `candle-lock`: checks that `examples/candle-tp/Cargo.lock` resolves
//!   the example's manifests with `--locked`, without building candle
//!   (fetches candle-core into `.cache/` once), and runs the unit tests of
//!   its timing statistics (`src/stats.rs`, std only, `rustc --test`).
//! - `candle-example [--out DIR]`: the release build of
//!   `examples/candle-tp` (candle 0.11 with CUDA, stable Rust) with that
//!   toolkit; with `--out`, the stripped binary, `libcudart.so.13` and
//!   `intranode-run` in `DIR`, for a GPU machine.
//! - `figures [DIR]`: README.md's figure tables made from one dated
//!   results folder (`docs/perf/results/...`; default: the one the README
//!   names).

mod bench;
mod bundle;
mod candle;
mod committed;
mod decode;
mod figures;
mod gpus;
mod long_files;
mod ptxas;
mod stable;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use clap::Parser;
use intranode_ptx_builder::KernelSet;

fn main() {
    if let Err(e) = try_main() {
        eprintln!("xtask: {e:#}");
        std::process::exit(1);
    }
}

fn try_main() -> Result<()> {
    // `figures [DIR]` takes a positional folder the other tasks do not:
    // it is dispatched before the common options are parsed.
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some((task, rest)) = args.split_first()
        && task == "figures"
    {
        return figures::run(&root()?, rest);
    }
    let opts = Opts::parse();
    let task = opts.task.as_str();
    if !opts.passthrough.is_empty() && task != "bench" && task != "decode" {
        bail!("only `bench` and `decode` take arguments after `--`\n{USAGE}");
    }
    if opts.write && (!["build-ptx", "check-ptx"].contains(&task) || opts.out.is_some()) {
        bail!(
            "--write belongs to `build-ptx` (it writes host/ptx/) and `check-ptx` (its spill \
             table in {})\n{USAGE}",
            ptxas::SPILL_DOC
        );
    }
    match task {
        "build-ptx" if opts.write => {
            for path in committed::write(&root()?)? {
                println!("{}", path.display());
            }
        }
        "build-ptx" => {
            for set in KernelSet::ALL {
                let path = build_ptx(&opts, set)?;
                println!("{}", path.display());
            }
        }
        "check-committed-ptx" => {
            let root = root()?;
            committed::check(&root, |arch, set| build_ptx_for(&root, arch, set, None))?;
        }
        "stable-embed" => stable::run(&root()?)?,
        "package" => stable::run_packaged(&root()?)?,
        "doc" => doc(&root()?)?,
        "long-files" => long_files::check(&root()?)?,
        "check-ptx" => {
            let root = root()?;
            for set in KernelSet::ALL {
                let path = build_ptx(&opts, set)?;
                let (cubin, kernels) = ptxas::check(&root, &path, &opts.arch)?;
                if set == KernelSet::Production {
                    committed::check_cubin(&root, &opts.arch, &cubin)?;
                    ptxas::check_spill_table(&root, &opts.arch, &kernels, opts.write)?;
                }
            }
        }
        "ci" => ci(&opts)?,
        "device-bundle" => bundle::build(&root()?, opts.out.as_deref())?,
        "demo" => demo()?,
        "bench" => bench::run(&root()?, opts.out.as_deref(), &opts.passthrough)?,
        "decode" => decode::run(&root()?, opts.out.as_deref(), &opts.passthrough)?,
        "cuda-toolkit" => {
            let cuda_root = candle::toolkit(&root()?)?;
            println!("export PATH={}:$PATH", cuda_root.join("bin").display());
            println!("export CUDA_ROOT={}", cuda_root.display());
            println!(
                "export LIBRARY_PATH={}${{LIBRARY_PATH:+:$LIBRARY_PATH}}",
                cuda_root.join("lib").display()
            );
            println!("export CUDA_COMPUTE_CAP=90");
        }
        "candle-lock" => candle::check_lock(&root()?)?,
        "candle-example" => candle::example(&root()?, opts.out.as_deref())?,
        other => bail!("unknown task {other:?}\n{USAGE}"),
    }
    Ok(())
}

const USAGE: &str = "usage: cargo xtask <build-ptx|check-ptx|check-committed-ptx|stable-embed|package|doc|long-files|ci|device-bundle|demo|bench|decode|cuda-toolkit|candle-lock|candle-example|figures> [--arch sm_XX] [--out DIR] [--write] [-- ARGS of intranode-bench bench or decode]";

/// The tasks, for `--help` (the module docs say more).
const HELP: &str = "\
tasks:
  build-ptx [--write]   build the kernels to PTX (--write: regenerate host/ptx/)
  check-committed-ptx   fail when host/ptx/ differs from the kernel source
  check-ptx [--write]   assemble the PTX with ptxas (fetched from PyPI when absent; --write: its spill table in docs/RELEASE.md)
  stable-embed          build and run a user's crate with the stable tool chain
  package               package the public crates, check size, build a stable user crate against them
  doc                   cargo doc of the public crates, warnings denied
  long-files            fail on a tracked .rs file over 700 lines with no reason at its top
  ci                    everything CI checks
  device-bundle         stripped release binaries for a GPU machine
  demo                  all-reduce sweep on the local GPUs (writes target/demo-out/)
  bench                 the full benchmark (default out: target/bench-out/)
  decode                the tensor-parallel decode benchmark (default out: target/decode-out/)
  cuda-toolkit          CUDA 13.0 from PyPI wheels into .cache/
  candle-lock           check examples/candle-tp/Cargo.lock with --locked, test its stats.rs
  candle-example        build examples/candle-tp (stable Rust, CUDA toolkit)
  figures [DIR]         remake README.md's figure tables from a dated results folder";

// The command line: a task and the options some tasks take. The task is a
// string matched in `try_main`, which refuses names it does not know.
#[derive(Debug, Parser)]
#[command(
    bin_name = "cargo xtask",
    about = "intranode's build tasks (xtask/src/main.rs says more)",
    after_help = HELP
)]
struct Opts {
    /// What to do (the list below).
    task: String,
    /// The architecture of the kernels built and checked.
    #[arg(long, default_value = intranode_ptx_builder::DEFAULT_ARCH)]
    arch: String,
    /// Where the task writes (build-ptx, device-bundle, bench, decode,
    /// candle-example).
    #[arg(long)]
    out: Option<PathBuf>,
    /// `build-ptx --write`: regenerate the committed PTX; `check-ptx
    /// --write`: rewrite the spill table in docs/RELEASE.md.
    #[arg(long)]
    write: bool,
    /// What follows `--`, handed to `intranode-bench bench` or `decode`.
    #[arg(last = true)]
    passthrough: Vec<String>,
}

/// The workspace root, from this crate's manifest directory.
fn root() -> Result<PathBuf> {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_owned)
        .context("xtask has no parent directory")
}

/// Builds the PTX of `set` for `opts.arch` into `opts.out` (default
/// `target/ptx`).
fn build_ptx(opts: &Opts, set: KernelSet) -> Result<PathBuf> {
    build_ptx_for(&root()?, &opts.arch, set, opts.out.as_deref())
}

/// Builds the PTX of `set` for `arch` into `out` (default `target/ptx`)
/// and returns the file's path.
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

/// Runs a command in the workspace root, failing with its command line.
pub(crate) fn run(root: &Path, program: &str, args: &[&str]) -> Result<()> {
    run_env(root, &[], program, args)
}

/// [`run`] with environment variables set for the command.
pub(crate) fn run_env(
    root: &Path,
    env: &[(&str, &str)],
    program: &str,
    args: &[&str],
) -> Result<()> {
    let shown: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v} ")).collect();
    eprintln!("xtask: $ {}{program} {}", shown.concat(), args.join(" "));
    let status = Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .current_dir(root)
        .status()
        .with_context(|| format!("starting {program}"))?;
    if !status.success() {
        bail!("`{program} {}` failed ({status})", args.join(" "));
    }
    Ok(())
}

/// What turns `intranode::internals` off: the crate as users build it
/// (the workspace's `.cargo/config.toml` turns it on for the suites).
const AS_USERS_BUILD: &[(&str, &str)] = &[("INTRANODE_INTERNALS", "0")];

/// `cargo doc -p intranode --no-deps` (and the CUDA-free crates it
/// re-exports, the kernels' crate and PTX builder it is built from, and
/// the launcher: every published crate),
/// every rustdoc warning an error: the public API as users see it, then
/// with `internals` (the suites' and benchmark's API, whose links into
/// crate-private modules break otherwise unseen). The kernels' crate is
/// documented as docs.rs builds it, for the host: its shared modules
/// (`layout`, `entries`, ...), not the nvptx64-only kernels.
fn doc(root: &Path) -> Result<()> {
    let cargo = intranode_ptx_builder::cargo_binary();
    let cargo = cargo.to_str().context("cargo path is not UTF-8")?;
    for internals in ["0", "1"] {
        let args = vec![
            "doc",
            "-p",
            "intranode",
            "-p",
            "intranode-dist-env",
            "-p",
            "intranode-ipc",
            "-p",
            "intranode-store",
            "-p",
            "intranode-kernels-gpu",
            "-p",
            "intranode-ptx-builder",
            "-p",
            "intranode-launcher",
            "--no-deps",
            "--locked",
        ];
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

fn ci(opts: &Opts) -> Result<()> {
    let mut steps = Steps::default();
    let result = ci_steps(opts, &mut steps);
    // Printed pass or fail, so a slow or failing step shows at once.
    eprint!("{}", steps.table());
    result
}

/// Each step of `ci` and its wall time.
#[derive(Default)]
struct Steps {
    done: Vec<(&'static str, std::time::Duration)>,
}

impl Steps {
    /// Runs `step`, noting its time even when it fails.
    fn time<T>(&mut self, name: &'static str, step: impl FnOnce() -> Result<T>) -> Result<T> {
        let started = std::time::Instant::now();
        let result = step();
        self.done.push((name, started.elapsed()));
        result
    }

    fn table(&self) -> String {
        let total: std::time::Duration = self.done.iter().map(|(_, t)| *t).sum();
        let mut out = String::from("xtask: ci steps (wall time)\n");
        for (name, t) in &self.done {
            out.push_str(&format!("xtask:   {:>7.1} s  {name}\n", t.as_secs_f64()));
        }
        out.push_str(&format!("xtask:   {:>7.1} s  total\n", total.as_secs_f64()));
        out
    }
}

fn ci_steps(opts: &Opts, steps: &mut Steps) -> Result<()> {
    let root = root()?;
    let cargo = intranode_ptx_builder::cargo_binary();
    let cargo = cargo.to_str().context("cargo path is not UTF-8")?;
    steps.time("fmt", || {
        run(&root, cargo, &["fmt", "--all", "--", "--check"])
    })?;
    steps.time("long files", || long_files::check(&root))?;
    // Early, so a kernel change without `build-ptx --write` fails fast;
    // the builds are kept for check-ptx below.
    let mut built = std::collections::HashMap::new();
    steps.time("committed PTX (kernels built from source)", || {
        committed::check(&root, |arch, set| {
            let path = build_ptx_for(&root, arch, set, None)?;
            built.insert((arch.to_owned(), set), path.clone());
            Ok(path)
        })
    })?;
    steps.time("clippy, workspace", || {
        run(
            &root,
            cargo,
            &[
                "clippy",
                "--workspace",
                "--all-targets",
                "--locked",
                "--",
                "-D",
                "warnings",
            ],
        )
    })?;
    // The host crate as users build it: in the workspace, the suites turn
    // its `test-kernels` feature on for everyone, and `.cargo/config.toml`
    // its `internals`.
    steps.time("clippy, intranode as users build it", || {
        run_env(
            &root,
            AS_USERS_BUILD,
            cargo,
            &[
                "clippy",
                "-p",
                "intranode",
                "--all-targets",
                "--locked",
                "--",
                "-D",
                "warnings",
            ],
        )
    })?;
    // The kernels as the GPU sees them, both sets (each PTX is built from
    // one of them alone).
    steps.time("clippy, kernels for the GPU", || {
        for features in [&[][..], &["--features", "test-kernels"]] {
            let mut args = vec![
                "clippy",
                "-p",
                "intranode-kernels-gpu",
                "--target",
                intranode_ptx_builder::TARGET,
                "-Zbuild-std=core",
                "--target-dir",
                "target/ptx-clippy",
            ];
            args.extend_from_slice(features);
            args.extend_from_slice(&["--", "-D", "warnings"]);
            run(&root, cargo, &args)?;
        }
        Ok(())
    })?;
    // The examples alone, without `internals`: in the workspace, other
    // crates' features (the suites' `test-kernels`) and the internals would
    // hide an example that uses more than the public API.
    steps.time("examples as users build them", || {
        run_env(
            &root,
            AS_USERS_BUILD,
            cargo,
            &[
                "check",
                "-p",
                "intranode-examples",
                "--examples",
                "--locked",
            ],
        )
    })?;
    steps.time("candle example's lock", || candle::check_lock(&root))?;
    steps.time("tests, workspace", || {
        run(&root, cargo, &["test", "--workspace", "--locked"])
    })?;
    // `intranode-kernels-gpu` keeps doctests out of the workspace run
    // (`doctest = false`); its few host-side examples, the typed kernel
    // keys' compile-fail one among them (`entries.rs`), run here.
    steps.time("doc tests, kernels", || {
        run(
            &root,
            cargo,
            &["test", "-p", "intranode-kernels-gpu", "--doc", "--locked"],
        )
    })?;
    steps.time("docs", || doc(&root))?;
    // The default architecture (or `--arch`), then the other one the
    // kernels promise to support.
    let mut archs = vec![opts.arch.clone()];
    if opts.arch != "sm_80" {
        archs.push("sm_80".into());
    }
    steps.time("check-ptx (ptxas, spills, cubin)", || {
        for arch in &archs {
            for set in KernelSet::ALL {
                let path = match built.get(&(arch.clone(), set)) {
                    Some(path) => path.clone(),
                    None => build_ptx_for(&root, arch, set, None)?,
                };
                println!("{}", path.display());
                let (cubin, kernels) = ptxas::check(&root, &path, arch)?;
                if set == KernelSet::Production {
                    committed::check_cubin(&root, arch, &cubin)?;
                    ptxas::check_spill_table(&root, arch, &kernels, false)?;
                }
            }
        }
        Ok(())
    })?;
    steps.time("a user's crate on stable", || stable::run(&root))?;
    steps.time("the packaged crates (1.88.0)", || {
        stable::run_packaged(&root)
    })?;
    eprintln!("xtask: ci passed");
    Ok(())
}

/// The demo: exits 0 without running anything only where the machine has
/// no GPU; GPUs that cannot be used, or fewer than 2 visible, fail it.
fn demo() -> Result<()> {
    let root = root()?;
    let Some(gpus) = gpus::for_task("demo", 2)? else {
        return Ok(());
    };
    build_launcher_and_bench(&root)?;
    let n = gpus.to_string();
    // The demo writes its results (`bench-out/`) where it runs: under
    // `target/`, not in the repository.
    let dir = job_out_dir(&root, None, "demo-out")?;
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let release = root.join("target").join("release");
    let launcher = release.join("intranode-run");
    let bench = release.join("intranode-bench");
    run(
        &dir,
        launcher.to_str().context("path is not UTF-8")?,
        &[
            "--nproc-per-node",
            &n,
            "--timeout",
            "600",
            "--",
            bench.to_str().context("path is not UTF-8")?,
            "demo",
        ],
    )
}

/// Release builds of `intranode-run` and `intranode-bench`, the binaries
/// `demo`, `bench` and `decode` start.
/// Where a job run in the workspace root writes: `out` relative to the
/// caller's directory, else `target/<default>`.
fn job_out_dir(root: &Path, out: Option<&Path>, default: &str) -> Result<PathBuf> {
    Ok(match out {
        Some(p) => std::env::current_dir()
            .context("reading the current directory")?
            .join(p),
        None => root.join("target").join(default),
    })
}

fn build_launcher_and_bench(root: &Path) -> Result<()> {
    let cargo = intranode_ptx_builder::cargo_binary();
    let cargo = cargo.to_str().context("cargo path is not UTF-8")?;
    run(
        root,
        cargo,
        &[
            "build",
            "--release",
            "--locked",
            "-p",
            "intranode-launcher",
            "-p",
            "intranode-bench",
        ],
    )
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::{Opts, Steps};

    #[test]
    fn the_step_table_names_every_step_and_the_total_even_after_a_failure() {
        let mut steps = Steps::default();
        steps.time("first", || Ok(())).unwrap();
        assert!(
            steps
                .time("second", || -> anyhow::Result<()> { anyhow::bail!("no") })
                .is_err()
        );
        let table = steps.table();
        assert!(
            table.contains("s  first\n") && table.contains("s  second\n"),
            "{table}"
        );
        assert!(table.trim_end().ends_with("total"), "{table}");
    }

    #[test]
    fn the_command_line_parses() {
        Opts::command().debug_assert();
        let o = Opts::try_parse_from(["xtask", "bench", "--out", "d", "--", "--sizes", "1"])
            .expect("bench with passthrough");
        assert_eq!(o.task, "bench");
        assert_eq!(o.arch, intranode_ptx_builder::DEFAULT_ARCH);
        assert_eq!(o.out.as_deref(), Some(std::path::Path::new("d")));
        assert_eq!(o.passthrough, ["--sizes", "1"]);
        let o = Opts::try_parse_from(["xtask", "check-ptx", "--arch", "sm_80"]).expect("arch");
        assert_eq!((o.arch.as_str(), o.write), ("sm_80", false));
        assert!(Opts::try_parse_from(["xtask", "build-ptx", "--frobnicate"]).is_err());
        assert!(Opts::try_parse_from(["xtask", "build-ptx", "--out"]).is_err());
    }
}
