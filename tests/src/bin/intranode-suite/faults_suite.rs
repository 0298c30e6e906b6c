//! `faults-suite`: runs every fault and bad-input case under
//! `intranode-run` (found next to this executable) and checks the
//! launcher's verdict of each, so one command on the GPU machine gives one
//! answer. Run it directly, not under `intranode-run`.
//!
//! How a deliberate death shows in the launcher's exit status: the victim's
//! SIGKILL is the job's first failure, so `intranode-run` exits 137 and
//! names it (`job failed: rank K was killed by SIGKILL (9)`); with
//! `--failure-wait-secs` the survivors get to finish, print `PASS` and
//! exit 0 by themselves (`rank R: exited with code 0` in the summary). A
//! fault case passes when exactly that happened; every other case must
//! exit 0 on every rank.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};

#[derive(clap::Args, Debug)]
pub struct SuiteArgs {
    /// Ranks of the fault cases (default: every GPU of the machine).
    #[arg(long)]
    pub nproc: Option<usize>,
    /// Bound of every GPU wait on a peer, for the ranks.
    #[arg(long, default_value_t = 3000)]
    pub barrier_timeout_ms: u64,
    /// Bound of every store wait, for the ranks.
    #[arg(long, default_value_t = 5000)]
    pub store_timeout_ms: u64,
    /// The launcher (default: `intranode-run` next to this executable).
    #[arg(long)]
    pub launcher: Option<PathBuf>,
    /// Also the fault cases at 16 MiB and 1 GiB of every form (the bound
    /// must hold whatever the size).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub large: bool,
    /// Only the cases whose name contains this text.
    #[arg(long)]
    pub only: Option<String>,
}

/// bf16 elements of 16 MiB and of 1 GiB.
const MIB16_BF16: usize = 8 << 20;
const GIB_BF16: usize = 512 << 20;

/// One launch of the suite and what it must produce.
struct Case {
    name: String,
    nproc: usize,
    gpus: Option<Vec<usize>>,
    args: Vec<String>,
    env: Vec<(&'static str, String)>,
    /// The rank that kills itself, if any.
    victim: Option<usize>,
    /// What every surviving rank prints when it passes.
    pass_marker: &'static str,
}

pub fn run(args: &SuiteArgs) -> Result<()> {
    if std::env::var_os("RANK").is_some() {
        bail!("run faults-suite directly: it starts intranode-run itself");
    }
    let gpus = intranode::gpu::device_count().unwrap_or_default();
    if !intranode::gpu::gpus_or_skip(2, "intranode-suite faults-suite")? {
        return Ok(());
    }
    let n = args.nproc.unwrap_or(gpus).clamp(2, gpus);
    let exe = std::env::current_exe().context("locating this executable")?;
    let launcher = match &args.launcher {
        Some(l) => l.clone(),
        None => exe
            .parent()
            .map(|d| d.join("intranode-run"))
            .context("this executable has no directory")?,
    };
    if !launcher.is_file() {
        bail!(
            "launcher {} not found (pass --launcher)",
            launcher.display()
        );
    }
    let faults = |phase: &str, victim: usize, extra: &[&str]| {
        let mut a = vec![
            "faults".to_owned(),
            "--phase".into(),
            phase.into(),
            "--victim".into(),
            victim.to_string(),
        ];
        a.extend(extra.iter().map(|s| s.to_string()));
        Case {
            name: format!("{phase}, victim {victim} {}", extra.join(" ")),
            nproc: n,
            gpus: None,
            args: a,
            env: Vec::new(),
            victim: Some(victim),
            pass_marker: "faults rank",
        }
    };
    // A live straggler: every rank, the victim too, passes and exits 0.
    let straggler = |phase: &str, victim: usize, algo: &str, extra: &[&str]| {
        let mut a = vec![
            "faults".to_owned(),
            "--phase".into(),
            phase.into(),
            "--victim".into(),
            victim.to_string(),
            "--algo".into(),
            algo.into(),
        ];
        if extra.is_empty() {
            a.extend(["--elems".into(), "65536".into()]);
        }
        a.extend(extra.iter().map(|s| s.to_string()));
        Case {
            name: format!("{phase}, victim {victim} --algo {algo} {}", extra.join(" ")),
            nproc: n,
            gpus: None,
            args: a,
            env: Vec::new(),
            victim: None,
            pass_marker: "faults rank",
        }
    };
    let mut cases = vec![
        straggler("skip", n - 1, "lamport", &[]),
        straggler("skip", 0, "two-shot", &[]),
        straggler("late", n - 1, "one-shot", &[]),
        straggler("late", 0, "lamport-two-shot", &[]),
        straggler("late", n - 1, "push", &[]),
        // NOTE [no arrival after giving up]: the Lamport one-shot, the
        // decode path.
        straggler("late", 1, "lamport", &[]),
        faults("rendezvous", n - 1, &[]),
        faults("rendezvous", 0, &[]),
        faults("barrier", 0, &[]),
        faults("barrier", n - 1, &[]),
        faults("all-reduce", 1, &["--algo", "one-shot"]),
        faults(
            "all-reduce",
            n - 1,
            &["--algo", "lamport", "--elems", "4096"],
        ),
        faults("all-reduce", n - 1, &["--algo", "two-shot"]),
        // Several chunks per call (larger than half the symmetric buffer).
        faults(
            "all-reduce",
            0,
            &["--algo", "two-shot", "--elems", "8000000", "--calls", "4"],
        ),
        // The push form, many tiles per call.
        faults(
            "all-reduce",
            n - 1,
            &["--algo", "push", "--elems", "8000000", "--calls", "4"],
        ),
        Case {
            name: "bad input, debug fingerprints".into(),
            nproc: n,
            gpus: None,
            args: vec!["bad-input".into()],
            env: vec![("INTRANODE_DEBUG", "detail".into())],
            victim: None,
            pass_marker: "bad-input rank",
        },
        Case {
            name: "INTRANODE_DEBUG on one rank only".into(),
            nproc: n,
            gpus: None,
            args: vec![
                "bad-input".into(),
                "--group".into(),
                "debug-mismatch".into(),
            ],
            env: Vec::new(),
            victim: None,
            pass_marker: "bad-input rank",
        },
        Case {
            name: "two ranks on one GPU".into(),
            nproc: 2,
            gpus: Some(vec![0, 0]),
            args: vec!["bad-input".into(), "--group".into(), "overlap".into()],
            env: Vec::new(),
            victim: None,
            pass_marker: "bad-input rank",
        },
        Case {
            name: "world size 1".into(),
            nproc: 1,
            gpus: None,
            args: vec!["bad-input".into(), "--group".into(), "world-size".into()],
            env: Vec::new(),
            victim: None,
            pass_marker: "bad-input rank",
        },
        Case {
            name: "world size 9".into(),
            nproc: 9,
            gpus: Some((0..9).map(|i| i % gpus).collect()),
            args: vec!["bad-input".into(), "--group".into(), "world-size".into()],
            env: Vec::new(),
            victim: None,
            pass_marker: "bad-input rank",
        },
    ];
    // The bound holds whatever the size. Every form that runs
    // at 16 MiB and 1 GiB (the Lamport forms hand such messages to their
    // barrier twins, which are here), a peer that dies and one that
    // skips: the report comes within the bound + 100 ms of the failed
    // wait's start (`faults`: the clock starts once the buffers are made,
    // and at the call the victim never made where the stream reached it).
    if args.large {
        for (size, elems, calls) in [("16 MiB", MIB16_BF16, "4"), ("1 GiB", GIB_BF16, "2")] {
            for (k, algo) in ["one-shot", "two-shot", "push"].into_iter().enumerate() {
                let elems = elems.to_string();
                let extra = ["--algo", algo, "--elems", &elems, "--calls", calls];
                // Victims alternate between the first and the last rank.
                let victim = if k % 2 == 0 { n - 1 } else { 0 };
                let mut die = faults("all-reduce", victim, &extra);
                die.name = format!("{} ({size})", die.name);
                cases.push(die);
                // `straggler` names the form itself: only the size here.
                let mut skip = straggler("skip", n - 1 - victim, algo, &extra[2..]);
                skip.name = format!("{} ({size})", skip.name);
                cases.push(skip);
                // A late peer with several chunks or tiles per call: its
                // late call must still report (NOTE [no arrival after giving
                // up] in `kernels-gpu/src/sync.rs`).
                if size == "16 MiB" {
                    let mut late = straggler("late", victim, algo, &extra[2..]);
                    late.name = format!("{} ({size})", late.name);
                    cases.push(late);
                }
            }
        }
    }
    if let Some(only) = &args.only {
        cases.retain(|c| c.name.contains(only.as_str()));
    }
    let mut failed = Vec::new();
    for case in &cases {
        match run_case(&launcher, &exe, args, case) {
            Ok(summary) => println!("faults-suite: PASS {}: {summary}", case.name),
            Err(e) => {
                println!("faults-suite: FAIL {}: {e:#}", case.name);
                failed.push(case.name.clone());
            }
        }
    }
    if !failed.is_empty() {
        bail!(
            "faults-suite: {} of {} cases failed: {failed:?}",
            failed.len(),
            cases.len()
        );
    }
    println!("faults-suite: PASS all {} cases", cases.len());
    Ok(())
}

fn run_case(launcher: &PathBuf, exe: &PathBuf, args: &SuiteArgs, case: &Case) -> Result<String> {
    // Long enough for the survivors' bounded waits, a context check and a
    // slow teardown; the job timeout bounds the whole launch.
    let wait_secs = (args.store_timeout_ms.max(args.barrier_timeout_ms) / 1000) + 60;
    let mut cmd = Command::new(launcher);
    cmd.arg("--nproc-per-node")
        .arg(case.nproc.to_string())
        .args(["--failure-wait-secs", &wait_secs.to_string()])
        .args(["--timeout", "400"]);
    if let Some(gpus) = &case.gpus {
        let list: Vec<String> = gpus.iter().map(usize::to_string).collect();
        cmd.args(["--gpus", &list.join(",")]);
    }
    cmd.arg("--")
        .arg(exe)
        .args(&case.args)
        .env(
            "INTRANODE_BARRIER_TIMEOUT_MS",
            args.barrier_timeout_ms.to_string(),
        )
        .env(
            "INTRANODE_STORE_TIMEOUT_MS",
            args.store_timeout_ms.to_string(),
        )
        .env_remove("INTRANODE_DEBUG")
        .env_remove("INTRANODE_ALLOW_OVERLAPPING_DEVICES")
        .env("NCCL_NVLS_ENABLE", "0")
        .envs(case.env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null());
    println!("faults-suite: --- {} ---", case.name);
    let start = Instant::now();
    let out = cmd.output().context("running intranode-run")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    for line in stdout.lines().chain(stderr.lines()) {
        println!("    {line}");
    }
    let code = out.status.code();
    let survivors: Vec<usize> = (0..case.nproc)
        .filter(|&r| Some(r) != case.victim)
        .collect();
    for &r in &survivors {
        let marker = format!("{} {r}: PASS", case.pass_marker);
        if !stdout
            .lines()
            .any(|l| l.starts_with(&format!("[{r}] ")) && l.contains(&marker))
        {
            bail!("rank {r} printed no `{marker}` line");
        }
    }
    match case.victim {
        Some(victim) => {
            if code != Some(137) {
                bail!("launcher exit status {code:?}, expected 137 (the victim's SIGKILL)");
            }
            let first = format!("job failed: rank {victim} was killed by SIGKILL (9)");
            if !stderr.contains(&first) {
                bail!("the launcher did not report `{first}`");
            }
            for &r in &survivors {
                if !stderr.contains(&format!("  rank {r}: exited with code 0\n")) {
                    bail!("rank {r} did not exit 0 by itself inside the failure wait");
                }
            }
            Ok(format!(
                "launcher exit 137 naming rank {victim} first; {} survivors passed and exited 0 ({:.1} s)",
                survivors.len(),
                start.elapsed().as_secs_f64()
            ))
        }
        None => {
            if code != Some(0) {
                bail!("launcher exit status {code:?}, expected 0");
            }
            Ok(format!(
                "{} ranks passed ({:.1} s)",
                case.nproc,
                start.elapsed().as_secs_f64()
            ))
        }
    }
}
