//! `cargo xtask`: the project's build tasks, in Rust rather than scripts.
//!
//! The tasks and their options are one declared tree, [`Task`]: its doc
//! comments are what `cargo xtask --help` and `cargo xtask TASK --help`
//! print.

mod bench;
mod bundle;
mod candle;
mod check_ptx;
mod ci;
mod committed;
mod decode;
mod doc;
mod figures;
mod gpus;
mod jobs;
mod long_files;
mod process;
mod ptx_build;
mod ptxas;
mod stable;

use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};
use intranode_ptx_builder::KernelSet;

use check_ptx::check_ptx;
use doc::doc;
use jobs::demo;
use process::root;
use ptx_build::build_ptx_for;

fn main() {
    if let Err(e) = try_main() {
        eprintln!("xtask: {e:#}");
        std::process::exit(1);
    }
}

/// intranode's build tasks: kernels, checks, GPU jobs.
#[derive(Debug, Parser)]
#[command(bin_name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Debug, Subcommand)]
enum Task {
    /// Build the kernels to PTX, both sets (production and test), and
    /// print the files' paths
    ///
    /// The production kernels and the test kernels
    /// (`intranode_ptx_builder::KernelSet`), each a PTX file in `--out`.
    /// `--write` regenerates the committed kernels the host crate embeds
    /// (host/ptx/: both PTX sets for every committed architecture, the
    /// production PTX xz-compressed, the production cubins assembled by
    /// the pinned ptxas, and the source stamp): run it after changing the
    /// kernels. `--check` fails when host/ptx/ differs from what the kernel
    /// source emits now (CI's first kernel check; no ptxas needed).
    BuildPtx {
        /// The architecture to build for
        #[arg(long, default_value = intranode_ptx_builder::DEFAULT_ARCH)]
        arch: String,
        /// Where the PTX files go [default: target/ptx]
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Regenerate host/ptx/ (every committed architecture)
        #[arg(long, conflicts_with_all = ["arch", "out", "check"])]
        write: bool,
        /// Fail when host/ptx/ differs from the kernel source
        #[arg(long, conflicts_with_all = ["arch", "out"])]
        check: bool,
    },
    /// Assemble the PTX with the pinned ptxas and check the kernel rules
    ///
    /// Builds both PTX sets of each `--arch` and assembles them with
    /// `ptxas -v` (fetched from PyPI into .cache/ when absent). Fails on
    /// assembler errors, out-of-line calls (`.extern .func`), spills or
    /// stack frames (beyond the few `ptxas::ALLOWED_SPILLS` lists for
    /// sm_80), a kernel over 128 registers (a 512-thread block's share), a
    /// PTX for a JIT-only architecture without `.maxnreg` on every entry,
    /// a committed production cubin (host/ptx/kernels-<arch>.cubin.xz)
    /// that differs from the machine code ptxas made, or a spill table in
    /// docs/RELEASE.md (sm_80) that is not what ptxas reports. Prints the
    /// registers of every kernel.
    CheckPtx {
        /// The architectures to check (repeat the option for several)
        #[arg(
            long = "arch",
            value_name = "ARCH",
            default_value = intranode_ptx_builder::DEFAULT_ARCH
        )]
        archs: Vec<String>,
        /// Rewrite docs/RELEASE.md's spill tables instead of checking them
        #[arg(long)]
        write: bool,
    },
    /// Run everything CI checks (`--only STEP` runs some of it)
    ///
    /// The steps run in the order `--only` lists them. The kernels step
    /// (nightly builds of the kernels, one thread each, and single-threaded
    /// ptxas runs) runs beside the others, its output in
    /// target/ci-kernels.log, printed when it ends. Prints each step's wall
    /// time at the end, pass or fail.
    Ci {
        /// Run only these steps (repeat, or separate with commas)
        #[arg(
            long,
            value_enum,
            value_delimiter = ',',
            value_name = "STEP",
            conflicts_with = "skip"
        )]
        only: Vec<ci::Step>,
        /// Run every step but these (the steps `--only` lists)
        #[arg(
            long,
            value_enum,
            value_delimiter = ',',
            value_name = "STEP",
            hide_possible_values = true
        )]
        skip: Vec<ci::Step>,
    },
    /// Document the published crates, every rustdoc warning an error (a
    /// step of `ci`)
    ///
    /// `cargo doc --no-deps` of intranode, its store, dist-env and ipc, the
    /// kernels' crate, the PTX builder and the launcher, as users see them
    /// and with `internals`; each crate denies `missing_docs`.
    Doc,
    /// Build and run tests/stable-embed (a user's crate) with the stable
    /// tool chain (a step of `ci`)
    StableEmbed,
    /// Package the published crates and build them as a user would (a step
    /// of `ci`)
    ///
    /// The published names (`stable::PUBLISHED`), `cargo publish
    /// --workspace --dry-run`, each `.crate` under crates.io's 10 MiB, the
    /// doc tests of the packaged intranode and `cargo install` of the
    /// packaged launcher with the `rust-version` tool chain, then a stable
    /// build and run of a crate that depends on `intranode = "0.1.0"`
    /// patched to the unpacked packages (tests/stable-embed's program).
    Package,
    /// Build stripped release binaries and test executables for a GPU
    /// machine that has no Rust tool chain
    DeviceBundle {
        /// Where the bundle goes [default: bundle]
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Run the main job: a short all-reduce sweep on the local GPUs, ours
    /// against NCCL, checked
    ///
    /// One process per visible GPU (`nvidia-smi -L` narrowed by
    /// `CUDA_VISIBLE_DEVICES`) under intranode-run; results in
    /// target/demo-out/. Exits 0 without running only where the machine has
    /// no GPU; GPUs that cannot be used, or fewer than 2 visible, are an
    /// error (so are they for `bench`, and fewer than 1 for `decode`).
    Demo,
    /// Run the full all-reduce benchmark at every world size the local GPUs
    /// allow, with one plot of them all
    Bench {
        /// Where the results go [default: target/bench-out]
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Arguments for `intranode-bench bench`, after `--`
        #[arg(last = true, value_name = "BENCH ARGS")]
        bench_args: Vec<String>,
    },
    /// Run the tensor-parallel decode benchmark on every local GPU
    Decode {
        /// Where the results go [default: target/decode-out]
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Arguments for `intranode-bench decode`, after `--`
        #[arg(last = true, value_name = "DECODE ARGS")]
        decode_args: Vec<String>,
    },
    /// Fetch the CUDA 13.0 compiler from PyPI wheels into
    /// .cache/cuda-13.0 and print the variables that make a build use it
    CudaToolkit,
    /// Build examples/candle-tp (release, candle with CUDA, stable Rust)
    /// with that toolkit
    ///
    /// With `--out`, the stripped binary, libcudart.so.13 and intranode-run
    /// in DIR, for a GPU machine.
    CandleExample {
        /// Where the bundle for a GPU machine goes
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Remake README.md's figure tables from a dated results folder
    Figures {
        /// The folder (docs/perf/results/...) [default: the one README.md
        /// names]
        #[arg(value_name = "DIR")]
        dir: Option<String>,
    },
}

fn try_main() -> Result<()> {
    let cli = Cli::parse();
    let root = root()?;
    match cli.task {
        Task::BuildPtx { write: true, .. } => {
            for path in committed::write(&root)? {
                println!("{}", path.display());
            }
        }
        Task::BuildPtx { check: true, .. } => {
            committed::check(&root, |arch, set| build_ptx_for(&root, arch, set, None))?;
        }
        Task::BuildPtx { arch, out, .. } => {
            for set in KernelSet::ALL {
                let path = build_ptx_for(&root, &arch, set, out.as_deref())?;
                println!("{}", path.display());
            }
        }
        Task::CheckPtx { archs, write } => check_ptx(&root, &archs, write)?,
        Task::Ci { only, skip } => ci::run_ci(&root, &only, &skip)?,
        Task::Doc => doc(&root)?,
        Task::StableEmbed => stable::run(&root)?,
        Task::Package => stable::run_packaged(&root)?,
        Task::DeviceBundle { out } => bundle::build(&root, out.as_deref())?,
        Task::Demo => demo(&root)?,
        Task::Bench { out, bench_args } => bench::run(&root, out.as_deref(), &bench_args)?,
        Task::Decode { out, decode_args } => decode::run(&root, out.as_deref(), &decode_args)?,
        Task::CudaToolkit => {
            let cuda_root = candle::toolkit(&root)?;
            println!("export PATH={}:$PATH", cuda_root.join("bin").display());
            println!("export CUDA_ROOT={}", cuda_root.display());
            println!(
                "export LIBRARY_PATH={}${{LIBRARY_PATH:+:$LIBRARY_PATH}}",
                cuda_root.join("lib").display()
            );
            println!("export CUDA_COMPUTE_CAP=90");
        }
        Task::CandleExample { out } => candle::example(&root, out.as_deref())?,
        Task::Figures { dir } => figures::run(&root, dir.as_deref())?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::{Cli, Task, ci::Step};

    fn parse(args: &[&str]) -> Result<Task, clap::Error> {
        Cli::try_parse_from(std::iter::once("xtask").chain(args.iter().copied())).map(|c| c.task)
    }

    #[test]
    fn the_command_tree_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn bench_and_decode_take_what_follows_the_double_dash() {
        let Task::Bench { out, bench_args } =
            parse(&["bench", "--out", "d", "--", "--sizes", "1"]).unwrap()
        else {
            panic!("not bench");
        };
        assert_eq!(out.as_deref(), Some(std::path::Path::new("d")));
        assert_eq!(bench_args, ["--sizes", "1"]);
        let Task::Decode { out, decode_args } =
            parse(&["decode", "--", "--models", "llama3-8b"]).unwrap()
        else {
            panic!("not decode");
        };
        assert_eq!((out, decode_args.len()), (None, 2));
        // Nothing else takes them.
        assert!(parse(&["check-ptx", "--", "x"]).is_err());
        assert!(parse(&["demo", "--", "x"]).is_err());
    }

    #[test]
    fn build_ptx_modes_exclude_each_other() {
        let Task::BuildPtx {
            arch,
            out,
            write,
            check,
        } = parse(&["build-ptx"]).unwrap()
        else {
            panic!("not build-ptx");
        };
        assert_eq!(arch, intranode_ptx_builder::DEFAULT_ARCH);
        assert_eq!((out, write, check), (None, false, false));
        assert!(matches!(
            parse(&["build-ptx", "--write"]).unwrap(),
            Task::BuildPtx { write: true, .. }
        ));
        assert!(matches!(
            parse(&["build-ptx", "--check"]).unwrap(),
            Task::BuildPtx { check: true, .. }
        ));
        for bad in [
            &["build-ptx", "--write", "--check"][..],
            &["build-ptx", "--write", "--out", "d"],
            &["build-ptx", "--check", "--arch", "sm_80"],
            &["build-ptx", "--out"],
            &["build-ptx", "--frobnicate"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn check_ptx_takes_several_architectures() {
        let Task::CheckPtx { archs, write } = parse(&["check-ptx"]).unwrap() else {
            panic!("not check-ptx");
        };
        assert_eq!(
            (archs.as_slice(), write),
            (&["sm_90".to_owned()][..], false)
        );
        let Task::CheckPtx { archs, write } =
            parse(&["check-ptx", "--arch", "sm_90", "--arch", "sm_80", "--write"]).unwrap()
        else {
            panic!("not check-ptx");
        };
        assert_eq!((archs, write), (vec!["sm_90".into(), "sm_80".into()], true));
    }

    #[test]
    fn ci_steps_are_named() {
        let Task::Ci { only, skip } = parse(&["ci", "--only", "fmt,long-files"]).unwrap() else {
            panic!("not ci");
        };
        assert_eq!((only, skip), (vec![Step::Fmt, Step::LongFiles], vec![]));
        let Task::Ci { only, skip } = parse(&["ci", "--skip", "package"]).unwrap() else {
            panic!("not ci");
        };
        assert_eq!((only, skip), (vec![], vec![Step::Package]));
        assert!(parse(&["ci", "--only", "no-such-step"]).is_err());
        assert!(parse(&["ci", "--only", "fmt", "--skip", "test"]).is_err());
    }

    #[test]
    fn figures_takes_an_optional_folder() {
        assert!(matches!(
            parse(&["figures"]).unwrap(),
            Task::Figures { dir: None }
        ));
        let Task::Figures { dir } = parse(&["figures", "docs/perf/results/x"]).unwrap() else {
            panic!("not figures");
        };
        assert_eq!(dir.as_deref(), Some("docs/perf/results/x"));
        assert!(parse(&["figures", "a", "b"]).is_err());
    }

    #[test]
    fn every_task_has_help_and_unknown_tasks_fail() {
        let mut cli = Cli::command();
        for task in cli.get_subcommands_mut() {
            assert!(
                task.get_about().is_some(),
                "{} has no help",
                task.get_name()
            );
        }
        assert!(parse(&["check-committed-ptx"]).is_err());
        assert!(parse(&[]).is_err());
    }
}
