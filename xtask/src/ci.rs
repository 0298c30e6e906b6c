//! `ci`: everything CI checks, as named steps (`--only`, `--skip`), each
//! timed. The kernels step is a chain of one thread's work (the kernel
//! crate is one codegen unit, ptxas one thread) and the longest of the
//! run, so when other steps run too it runs beside them, in a child
//! process (`cargo xtask ci --only kernels`) whose output goes to a log
//! file and is printed when it ends; a failure there stops the other steps
//! at their next boundary. The other steps then run at a lower priority
//! ([`yield_to_beside`]): they fill what the chain leaves of the cores.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::ValueEnum;

use crate::process::{AS_USERS_BUILD, run, run_env};

/// The architectures CI checks the kernels for: the default (committed,
/// with its cubin) and the other one the kernels promise to support.
const CI_ARCHS: [&str; 2] = [intranode_ptx_builder::DEFAULT_ARCH, "sm_80"];

/// Where the kernels step, run beside the others, writes its output.
const KERNELS_LOG: &str = "target/ci-kernels.log";

/// The steps of `ci`, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Step {
    /// `cargo fmt --check` of the workspace
    Fmt,
    /// Every tracked .rs file over 700 lines gives its reason and line
    /// count near its top, and has not grown past the count by more than
    /// 10 %
    LongFiles,
    /// clippy of the kernels for the GPU (both sets), host/ptx/ against
    /// the kernel source (`build-ptx --check`), then `check-ptx` for sm_90
    /// and sm_80
    Kernels,
    /// clippy, warnings denied: the workspace, and intranode as users
    /// build it (no internals, no test kernels)
    Clippy,
    /// The examples checked alone, without internals, so no other crate's
    /// features hide an example that reaches past the public API
    Examples,
    /// examples/candle-tp/Cargo.lock resolves with --locked (1.95.0,
    /// without building candle); its stats.rs unit tests
    CandleLock,
    /// Every test of the workspace, and the kernels' crate's doc tests
    Test,
    /// `cargo xtask doc`
    Doc,
    /// `cargo xtask stable-embed`
    StableEmbed,
    /// `cargo xtask package`
    Package,
}

/// Runs the steps `only` names (all of them when empty) but those `skip`
/// names, then prints each step's wall time, pass or fail.
pub fn run_ci(root: &Path, only: &[Step], skip: &[Step]) -> Result<()> {
    let selected = selected(only, skip);
    let mut steps = Steps::new();
    let result = run_steps(root, &selected, &mut steps);
    eprint!("{}", steps.table());
    if result.is_ok() {
        eprintln!("xtask: ci passed");
    }
    result
}

/// The steps to run, in [`Step`]'s order.
fn selected(only: &[Step], skip: &[Step]) -> Vec<Step> {
    Step::value_variants()
        .iter()
        .copied()
        .filter(|s| (only.is_empty() || only.contains(s)) && !skip.contains(s))
        .collect()
}

fn run_steps(root: &Path, selected: &[Step], steps: &mut Steps) -> Result<()> {
    // Started first: it is the longest step, and others overlap it.
    let mut beside = if selected.contains(&Step::Kernels) && selected.len() > 1 {
        let beside = Beside::start(root)?;
        yield_to_beside();
        Some(beside)
    } else {
        None
    };
    let mut result = Ok(());
    for &step in selected {
        if let Some(b) = &mut beside {
            result = b.fail_if_failed(steps);
        }
        if result.is_ok() && !(step == Step::Kernels && beside.is_some()) {
            result = run_step(root, step, steps);
        }
        if result.is_err() {
            break;
        }
    }
    if let Some(b) = beside {
        if result.is_err() {
            eprintln!("xtask: waiting for the kernels step beside (Ctrl-C stops it)");
        }
        let kernels = b.finish(steps);
        // The first failure is the one reported; both outputs are above.
        result = result.and(kernels);
    }
    result
}

/// Lowers this thread's priority, and so that of every command it starts
/// from now on, below the kernels step's (started before): that chain
/// takes a core whenever it can run, the parallel builds of the other
/// steps take the rest and both cores once it ends (shared evenly with
/// cargo's two jobs, the chain would get a third of a 2-core machine).
/// Best effort: where `renice` is missing or refuses, the steps share the
/// cores evenly, as without it.
fn yield_to_beside() {
    // On Linux a thread's nice value is its own; commands started from
    // this (the main) thread inherit it.
    let pid = std::process::id().to_string();
    let result = Command::new("renice")
        .args(["-n", "10", "-p", &pid])
        .stdout(Stdio::null())
        .status();
    match result {
        Ok(status) if status.success() => {
            eprintln!("xtask: the other steps run at nice 10, below the kernels step");
        }
        Ok(status) => {
            eprintln!("xtask: renice failed ({status}); the steps share the cores evenly")
        }
        Err(e) => eprintln!("xtask: no renice ({e}); the steps share the cores evenly"),
    }
}

fn run_step(root: &Path, step: Step, steps: &mut Steps) -> Result<()> {
    let cargo = intranode_ptx_builder::cargo_binary();
    let cargo = cargo.to_str().context("cargo path is not UTF-8")?;
    match step {
        Step::Fmt => steps.time("fmt", || {
            run(root, cargo, &["fmt", "--all", "--", "--check"])
        }),
        Step::LongFiles => steps.time("long files", || crate::long_files::check(root)),
        Step::Kernels => kernels(root, steps),
        Step::Clippy => clippy(root, cargo, steps),
        // The examples alone, without `internals`: in the workspace, other
        // crates' features (the suites' `test-kernels`) and the internals
        // would hide an example that uses more than the public API.
        Step::Examples => steps.time("examples as users build them", || {
            run_env(
                root,
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
        }),
        Step::CandleLock => steps.time("candle example's lock", || crate::candle::check_lock(root)),
        Step::Test => {
            steps.time("tests, workspace", || {
                run(root, cargo, &["test", "--workspace", "--locked"])
            })?;
            // `intranode-kernels-gpu` keeps doctests out of the workspace
            // run (`doctest = false`); its few host-side examples, the
            // typed kernel keys' compile-fail one among them
            // (`entries.rs`), run here.
            steps.time("doc tests, kernels", || {
                run(
                    root,
                    cargo,
                    &["test", "-p", "intranode-kernels-gpu", "--doc", "--locked"],
                )
            })
        }
        Step::Doc => steps.time("docs", || crate::doc::doc(root)),
        Step::StableEmbed => steps.time("a user's crate on stable", || crate::stable::run(root)),
        Step::Package => steps.time("the packaged crates", || crate::stable::run_packaged(root)),
    }
}

/// Clippy first (seconds), then the committed PTX, so a kernel change
/// without `build-ptx --write` fails before ptxas runs; `check-ptx` then
/// finds those builds done.
fn kernels(root: &Path, steps: &mut Steps) -> Result<()> {
    let cargo = intranode_ptx_builder::cargo_binary();
    let cargo = cargo.to_str().context("cargo path is not UTF-8")?;
    // The kernels as the GPU sees them, both crates (the production PTX
    // is built from the first, the test PTX from the second).
    steps.time("clippy, kernels for the GPU", || {
        for package in ["intranode-kernels-gpu", "intranode-test-kernels-gpu"] {
            run(
                root,
                cargo,
                &[
                    "clippy",
                    "-p",
                    package,
                    "--target",
                    intranode_ptx_builder::TARGET,
                    "-Zbuild-std=core",
                    "--target-dir",
                    "target/ptx-clippy",
                    "--",
                    "-D",
                    "warnings",
                ],
            )?;
        }
        Ok(())
    })?;
    steps.time("committed PTX (kernels built from source)", || {
        crate::committed::check(root, |arch, set| {
            crate::ptx_build::build_ptx_for(root, arch, set, None)
        })
    })?;
    for arch in CI_ARCHS {
        steps.time_owned(format!("check-ptx {arch} (ptxas, spills, cubin)"), || {
            crate::check_ptx::check_ptx(root, &[arch.to_owned()], false)
        })?;
    }
    Ok(())
}

fn clippy(root: &Path, cargo: &str, steps: &mut Steps) -> Result<()> {
    steps.time("clippy, workspace", || {
        run(
            root,
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
            root,
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
    })
}

/// The kernels step in a child process (`cargo xtask ci --only kernels`,
/// this same program), its output in [`KERNELS_LOG`].
struct Beside {
    log: PathBuf,
    started: Instant,
    /// Waits for the child; gives its exit status and when it exited.
    waiter: Option<JoinHandle<std::io::Result<(ExitStatus, Instant)>>>,
}

impl Beside {
    fn start(root: &Path) -> Result<Self> {
        let exe = std::env::current_exe().context("finding xtask's own executable")?;
        let mut cmd = Command::new(&exe);
        cmd.args(["ci", "--only", "kernels"]).current_dir(root);
        Self::start_command(cmd, root.join(KERNELS_LOG))
    }

    /// Starts `cmd` with its output in `log`.
    fn start_command(mut cmd: Command, log: PathBuf) -> Result<Self> {
        if let Some(dir) = log.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let file =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        eprintln!(
            "xtask: the kernels step runs beside the others: {cmd:?} > {}",
            log.display()
        );
        let started = Instant::now();
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(file.try_clone().context("duplicating the log's handle")?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting {cmd:?}"))?;
        let waiter = std::thread::spawn(move || {
            let status = child.wait()?;
            Ok((status, Instant::now()))
        });
        Ok(Self {
            log,
            started,
            waiter: Some(waiter),
        })
    }

    /// Fails, with the step's output, where the child has ended with a
    /// failure; a child still running or passed is no failure.
    fn fail_if_failed(&mut self, steps: &mut Steps) -> Result<()> {
        if self.waiter.as_ref().is_some_and(JoinHandle::is_finished) {
            self.collect(steps)
        } else {
            Ok(())
        }
    }

    /// Waits for the child, prints its output, notes its time.
    fn finish(mut self, steps: &mut Steps) -> Result<()> {
        if self.waiter.is_some() {
            self.collect(steps)
        } else {
            Ok(())
        }
    }

    fn collect(&mut self, steps: &mut Steps) -> Result<()> {
        let Some(waiter) = self.waiter.take() else {
            return Ok(());
        };
        let joined = waiter
            .join()
            .map_err(|_| anyhow::anyhow!("the thread waiting for the kernels step panicked"))?;
        let (status, ended) = joined.context("waiting for the kernels step")?;
        steps.done.push((
            "kernels, beside the steps above".to_owned(),
            ended - self.started,
        ));
        let output = std::fs::read_to_string(&self.log)
            .with_context(|| format!("reading {}", self.log.display()))?;
        eprintln!(
            "xtask: ---- the kernels step's output ({}) ----\n{}xtask: ---- end of the kernels \
             step's output ----",
            self.log.display(),
            output
        );
        if !status.success() {
            bail!(
                "the kernels step failed ({status}); its output is above and in {}",
                self.log.display()
            );
        }
        Ok(())
    }
}

/// Each step of `ci` and its wall time.
struct Steps {
    started: Instant,
    done: Vec<(String, Duration)>,
}

impl Steps {
    fn new() -> Self {
        Self {
            started: Instant::now(),
            done: Vec::new(),
        }
    }

    /// Runs `step`, noting its time even when it fails.
    fn time<T>(&mut self, name: &str, step: impl FnOnce() -> Result<T>) -> Result<T> {
        self.time_owned(name.to_owned(), step)
    }

    fn time_owned<T>(&mut self, name: String, step: impl FnOnce() -> Result<T>) -> Result<T> {
        let started = Instant::now();
        let result = step();
        self.done.push((name, started.elapsed()));
        result
    }

    /// One line per step, then the wall time of the whole run (less than
    /// the sum where a step ran beside others).
    fn table(&self) -> String {
        let mut out = String::from("xtask: ci steps (wall time)\n");
        for (name, t) in &self.done {
            out.push_str(&format!("xtask:   {:>7.1} s  {name}\n", t.as_secs_f64()));
        }
        out.push_str(&format!(
            "xtask:   {:>7.1} s  total\n",
            self.started.elapsed().as_secs_f64()
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_step_table_names_every_step_and_the_total_even_after_a_failure() {
        let mut steps = Steps::new();
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

    /// A command beside, its log in a folder of the test's own.
    fn beside(script: &str) -> (Beside, crate::stable::RunDir) {
        let dir = crate::stable::RunDir::new("xtask-ci-test").unwrap();
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script]);
        (
            Beside::start_command(cmd, dir.path().join("beside.log")).unwrap(),
            dir,
        )
    }

    #[test]
    fn a_step_beside_that_fails_fails_the_run_and_is_timed() {
        let (mut b, _dir) = beside("echo built; echo broken >&2; exit 3");
        let mut steps = Steps::new();
        let waited = Instant::now();
        while b.fail_if_failed(&mut steps).is_ok() {
            assert!(
                waited.elapsed() < Duration::from_secs(60),
                "the failure was never seen"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(steps.done.len(), 1);
        assert!(steps.table().contains("kernels, beside"));
        // Seen once: the end of the run has nothing more to wait for.
        assert!(b.finish(&mut steps).is_ok());
        assert_eq!(steps.done.len(), 1);
    }

    #[test]
    fn a_step_beside_that_passes_is_waited_for() {
        let (b, dir) = beside("sleep 0.1; echo checked");
        let mut steps = Steps::new();
        assert!(b.finish(&mut steps).is_ok());
        assert_eq!(steps.done.len(), 1);
        let log = std::fs::read_to_string(dir.path().join("beside.log")).unwrap();
        assert_eq!(log, "checked\n");
        let (b, _dir) = beside("exit 1");
        assert!(b.finish(&mut Steps::new()).is_err());
    }

    #[test]
    fn only_and_skip_select_steps_in_order() {
        assert_eq!(selected(&[], &[]), Step::value_variants());
        assert_eq!(
            selected(&[Step::Package, Step::Fmt], &[]),
            [Step::Fmt, Step::Package]
        );
        let all_but = selected(&[], &[Step::Kernels, Step::Package]);
        assert_eq!(all_but.len(), Step::value_variants().len() - 2);
        assert!(!all_but.contains(&Step::Kernels));
    }
}
