//! The command line of `intranode-run` and its validation into a [`JobConfig`].

use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr, ToSocketAddrs};
use std::time::Duration;

use clap::Parser;

use crate::error::LaunchError;

/// Most ranks on one node. Far above any GPU count; it keeps a typo (or
/// `1e11`) from turning into an allocation abort or a fork bomb.
pub const MAX_NPROC: usize = 1024;

/// Longest duration any option accepts: a year. Longer is a mistake, and
/// unbounded values overflow `Instant` arithmetic.
pub const MAX_SECS: u64 = 365 * 24 * 3600;

const AFTER_HELP: &str = "\
torchrun's spellings work too: --nproc_per_node, --master_addr (every option
takes its underscore form), --nproc-per-node gpu or auto (one rank per visible
GPU: CUDA_VISIBLE_DEVICES, else NVML's count), a program without -- (everything
from the first word that is not an option on is the program and its
arguments), and --standalone, --nnodes 1, --node-rank 0 and --no-python, which
change nothing here (one node, its own store, programs started directly).

Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
MASTER_PORT, INTRANODE_STORE_TOKEN, INTRANODE_STORE_PROTOCOL=intranode,
INTRANODE_DEVICE (its GPU from --gpus),
and NCCL_NVLS_ENABLE=0 with the other switches that keep NVLink multicast off.
Rank variables of other launchers (SLURM_PROCID, OMPI_COMM_WORLD_RANK, ...)
are removed. Every output line of a rank is prefixed with [rank].

When a rank fails, the other ranks get SIGTERM at once, or, with
--failure-wait-secs S, after up to S seconds in which they may exit on their
own (time for a survivor to see its peer's death as an error, report it and
exit); either way the first failure decides the exit status.

Exit status: 0 when every rank exits 0; the exit code of the first failing
rank (128+N when it was killed by signal N); 124 on --timeout; 128+N when the
launcher got signal N (SIGINT, SIGTERM, SIGHUP, SIGQUIT, forwarded to the
ranks; SIGUSR1, SIGUSR2, SIGALRM, the ranks getting SIGTERM; also during
start-up);
1 when the ranks succeeded but /proc could not be read to look for what they
left running; 127 when the command cannot be found;
2 when the launcher cannot run the job at all (bad arguments, store address in
use).";

/// `intranode-run --nproc-per-node N [OPTIONS] [--] CMD ARGS...`
#[derive(Debug, Clone, Parser)]
#[command(
    name = "intranode-run",
    version,
    about = "Start N ranks of a command on this node, torchrun style, and stop them all when one fails",
    after_help = AFTER_HELP
)]
pub struct Args {
    /// Number of ranks to start on this node, or `gpu`/`auto`: one per
    /// visible GPU.
    #[arg(long, alias = "nproc_per_node", value_name = "N|gpu|auto")]
    pub nproc_per_node: String,

    /// GPU index for each local rank, comma separated (default: local rank i uses GPU i).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub gpus: Option<Vec<usize>>,

    /// Address the rendezvous store listens on, passed to the ranks as MASTER_ADDR.
    #[arg(
        long,
        alias = "master_addr",
        value_name = "ADDR",
        default_value = "127.0.0.1"
    )]
    pub master_addr: String,

    /// Port of the rendezvous store (0: pick a free one).
    #[arg(long, alias = "master_port", value_name = "PORT", default_value_t = 0)]
    pub master_port: u16,

    /// Stop the job when it has run this many seconds (default: no limit).
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<String>,

    /// Seconds between SIGTERM and SIGKILL when stopping ranks.
    #[arg(long, alias = "grace_secs", value_name = "SECS", default_value = "5")]
    pub grace_secs: String,

    /// After the first rank fails, seconds the others may take to exit on
    /// their own before they are stopped (0: stop them at once).
    #[arg(
        long,
        alias = "failure_wait_secs",
        value_name = "SECS",
        default_value = "0"
    )]
    pub failure_wait_secs: String,

    /// torchrun's single-node mode; the only mode here (accepted, no effect).
    #[arg(long)]
    pub standalone: bool,

    /// Number of nodes: only 1 (torchrun's spelling, for copied command lines).
    #[arg(long, value_name = "1", default_value = "1")]
    pub nnodes: String,

    /// Rank of this node: only 0 (torchrun's spelling).
    #[arg(long, alias = "node_rank", value_name = "0", default_value_t = 0)]
    pub node_rank: usize,

    /// Start the command directly, not under python: always so here
    /// (accepted, no effect).
    #[arg(long, alias = "no_python")]
    pub no_python: bool,

    /// Start a CUDA MPS control daemon for this job (fresh pipe and log
    /// folders, stopped at the end), so that ranks sharing a GPU run side
    /// by side rather than time-sliced (`mps` module).
    #[arg(long)]
    pub mps: bool,

    /// The command each rank runs, with its arguments: after `--`, or from
    /// the first word that is not an option on.
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// `--nproc-per-node` as given: a number, or one rank per visible GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nproc {
    /// This many ranks.
    Count(usize),
    /// `gpu` or `auto`: as many ranks as visible GPUs.
    PerGpu,
}

impl Nproc {
    /// Parses `N`, `gpu` or `auto` (torchrun's `cpu` and `xpu` have no
    /// meaning for an all-reduce between GPUs, and are refused).
    pub fn parse(text: &str) -> Result<Self, LaunchError> {
        let trimmed = text.trim();
        match trimmed.to_ascii_lowercase().as_str() {
            "gpu" | "auto" => return Ok(Self::PerGpu),
            _ => {}
        }
        if trimmed.starts_with('+') {
            return Err(LaunchError::BadNproc {
                value: text.to_owned(),
            });
        }
        match trimmed.parse::<u64>() {
            Ok(n) => Ok(Self::Count(usize::try_from(n).unwrap_or(usize::MAX))),
            Err(_) => Err(LaunchError::BadNproc {
                value: text.to_owned(),
            }),
        }
    }
}

/// GPUs this job can use: the entries of `CUDA_VISIBLE_DEVICES` where it
/// is set (CUDA numbers what it lists from 0, as the ranks will see them),
/// else NVML's device count. `Err` says why they could not be counted.
pub fn count_visible_gpus() -> Result<usize, String> {
    if let Some(visible) = std::env::var_os("CUDA_VISIBLE_DEVICES") {
        let visible = visible.to_string_lossy();
        return Ok(count_listed_devices(&visible));
    }
    let nvml = nvml_wrapper::Nvml::init().map_err(|e| format!("NVML: {e}"))?;
    let count = nvml.device_count().map_err(|e| format!("NVML: {e}"))?;
    Ok(count as usize)
}

/// Devices a `CUDA_VISIBLE_DEVICES` value lists. CUDA stops at the first
/// entry that names no device; `-1` is the common way to hide them all.
pub fn count_listed_devices(visible: &str) -> usize {
    visible
        .split(',')
        .map(str::trim)
        .take_while(|entry| !entry.is_empty() && !entry.starts_with('-'))
        .count()
}

/// A validated job: what [`crate::launch`] runs.
#[derive(Debug, Clone, PartialEq)]
pub struct JobConfig {
    /// Number of ranks, at least 1.
    pub nproc: usize,
    /// GPU index of each local rank; `devices.len() == nproc`.
    pub devices: Vec<usize>,
    /// MASTER_ADDR as the ranks see it.
    pub master_addr: String,
    /// Address the store server binds.
    pub bind_ip: IpAddr,
    /// Port the store server binds (0: any free port).
    pub master_port: u16,
    /// Whole-job time limit.
    pub timeout: Option<Duration>,
    /// Time between SIGTERM and SIGKILL when stopping ranks.
    pub grace: Duration,
    /// After the first rank failure, how long the others may take to exit
    /// by themselves before the launcher stops them.
    pub failure_wait: Duration,
    /// Program and arguments of every rank; never empty.
    pub command: Vec<OsString>,
}

/// Whether torchrun's `--nnodes` value means one node: `N` or
/// `MIN:MAX`, each number 1 however it is spelt (`1`, `01`, `1:1`).
fn is_one_node(nnodes: &str) -> bool {
    let is_one = |n: &str| n.trim().parse::<u64>() == Ok(1);
    match nnodes.split_once(':') {
        None => is_one(nnodes),
        Some((min, max)) => is_one(min) && is_one(max),
    }
}

impl JobConfig {
    /// Checks the command line and resolves the master address; `gpu` and
    /// `auto` count the GPUs with [`count_visible_gpus`].
    pub fn from_args(args: Args) -> Result<Self, LaunchError> {
        Self::from_args_with(args, count_visible_gpus)
    }

    /// [`JobConfig::from_args`] with the GPUs counted by `count_gpus`.
    pub fn from_args_with(
        args: Args,
        count_gpus: impl FnOnce() -> Result<usize, String>,
    ) -> Result<Self, LaunchError> {
        if !is_one_node(&args.nnodes) {
            return Err(LaunchError::MultiNode {
                what: "--nnodes",
                value: args.nnodes.clone(),
            });
        }
        if args.node_rank != 0 {
            return Err(LaunchError::MultiNode {
                what: "--node-rank",
                value: args.node_rank.to_string(),
            });
        }
        let nproc = match Nproc::parse(&args.nproc_per_node)? {
            Nproc::Count(n) => n,
            Nproc::PerGpu => match count_gpus() {
                Ok(0) => return Err(LaunchError::NoGpus),
                Ok(n) => n,
                Err(why) => return Err(LaunchError::CannotCountGpus { why }),
            },
        };
        if nproc == 0 {
            return Err(LaunchError::NoRanks);
        }
        if nproc > MAX_NPROC {
            return Err(LaunchError::TooManyRanks {
                nproc,
                max: MAX_NPROC,
            });
        }
        let devices = match args.gpus {
            Some(gpus) if gpus.len() != nproc => {
                return Err(LaunchError::GpuCountMismatch {
                    gpus: gpus.len(),
                    nproc,
                });
            }
            Some(gpus) => gpus,
            None => (0..nproc).collect(),
        };
        let timeout = match args.timeout {
            Some(text) => {
                let timeout = parse_secs("timeout", &text)?;
                if timeout.is_zero() {
                    return Err(LaunchError::ZeroTimeout);
                }
                Some(timeout)
            }
            None => None,
        };
        let grace = parse_secs("grace-secs", &args.grace_secs)?;
        let failure_wait = parse_secs("failure-wait-secs", &args.failure_wait_secs)?;
        let bind_ip = resolve_ip(&args.master_addr)?;
        // Ranks cannot connect to 0.0.0.0 or ::, so they are told loopback.
        let master_addr = if bind_ip.is_unspecified() {
            Ipv4Addr::LOCALHOST.to_string()
        } else {
            args.master_addr
        };
        Ok(Self {
            nproc,
            devices,
            master_addr,
            bind_ip,
            master_port: args.master_port,
            timeout,
            grace,
            failure_wait,
            command: args.command,
        })
    }
}

/// Parses a non-negative, finite number of seconds such as `5` or `0.5`,
/// at most [`MAX_SECS`].
pub fn parse_secs(name: &'static str, text: &str) -> Result<Duration, LaunchError> {
    let bad = || LaunchError::BadSeconds {
        name,
        value: text.to_owned(),
    };
    let secs: f64 = text.trim().parse().map_err(|_| bad())?;
    if !secs.is_finite() || secs < 0.0 {
        return Err(bad());
    }
    // Compared as f64 first: 1e19 does not fit a Duration's seconds.
    if secs > MAX_SECS as f64 {
        return Err(LaunchError::SecondsTooLarge {
            name,
            value: text.trim().to_owned(),
            max_secs: MAX_SECS,
        });
    }
    Duration::try_from_secs_f64(secs).map_err(|_| bad())
}

/// An IP literal as is, or the first address a host name resolves to.
fn resolve_ip(addr: &str) -> Result<IpAddr, LaunchError> {
    if let Ok(ip) = addr.parse::<IpAddr>() {
        return Ok(ip);
    }
    let err = |source| LaunchError::MasterAddr {
        addr: addr.to_owned(),
        source,
    };
    (addr, 0)
        .to_socket_addrs()
        .map_err(err)?
        .next()
        .map(|sock| sock.ip())
        .ok_or_else(|| err(std::io::Error::other("no address found")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Result<Args, clap::Error> {
        let mut argv = vec!["intranode-run"];
        argv.extend_from_slice(extra);
        Args::try_parse_from(argv)
    }

    fn job(extra: &[&str]) -> Result<JobConfig, LaunchError> {
        JobConfig::from_args(args(extra).unwrap())
    }

    #[test]
    fn defaults() {
        let job = job(&["--nproc-per-node", "3", "--", "echo", "hi"]).unwrap();
        assert_eq!(job.nproc, 3);
        assert_eq!(job.devices, vec![0, 1, 2]);
        assert_eq!(job.master_addr, "127.0.0.1");
        assert_eq!(job.bind_ip, IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(job.master_port, 0);
        assert_eq!(job.timeout, None);
        assert_eq!(job.grace, Duration::from_secs(5));
        assert_eq!(job.failure_wait, Duration::ZERO);
        assert_eq!(
            job.command,
            vec![OsString::from("echo"), OsString::from("hi")]
        );
    }

    #[test]
    fn all_options() {
        let job = job(&[
            "--nproc-per-node",
            "2",
            "--gpus",
            "3,1",
            "--master-addr",
            "0.0.0.0",
            "--master-port",
            "29500",
            "--timeout",
            "1.5",
            "--grace-secs",
            "0",
            "--failure-wait-secs",
            "2.5",
            "--",
            "prog",
            "--flag",
        ])
        .unwrap();
        assert_eq!(job.devices, vec![3, 1]);
        assert_eq!(job.master_addr, "127.0.0.1");
        assert!(job.bind_ip.is_unspecified());
        assert_eq!(job.master_port, 29500);
        assert_eq!(job.timeout, Some(Duration::from_millis(1500)));
        assert_eq!(job.grace, Duration::ZERO);
        assert_eq!(job.failure_wait, Duration::from_millis(2500));
        assert_eq!(
            job.command,
            vec![OsString::from("prog"), OsString::from("--flag")]
        );
    }

    #[test]
    fn localhost_resolves() {
        let job = job(&[
            "--nproc-per-node",
            "1",
            "--master-addr",
            "localhost",
            "--",
            "true",
        ])
        .unwrap();
        assert!(job.bind_ip.is_loopback());
        assert_eq!(job.master_addr, "localhost");
    }

    #[test]
    fn zero_ranks_rejected() {
        let err = job(&["--nproc-per-node", "0", "--", "true"]).unwrap_err();
        assert!(matches!(err, LaunchError::NoRanks), "{err}");
    }

    #[test]
    fn gpu_count_must_match() {
        let err = job(&["--nproc-per-node", "2", "--gpus", "0,1,2", "--", "true"]).unwrap_err();
        assert!(
            matches!(err, LaunchError::GpuCountMismatch { gpus: 3, nproc: 2 }),
            "{err}"
        );
        assert!(err.to_string().contains("--gpus lists 3 GPUs"), "{err}");
    }

    #[test]
    fn bad_seconds_rejected() {
        for bad in ["-1", "abc", "inf", "NaN"] {
            let timeout = format!("--timeout={bad}");
            let err = job(&["--nproc-per-node", "1", &timeout, "--", "true"]).unwrap_err();
            assert!(
                matches!(
                    err,
                    LaunchError::BadSeconds {
                        name: "timeout",
                        ..
                    }
                ),
                "{bad}: {err}"
            );
        }
        let err = job(&["--nproc-per-node", "1", "--timeout", "0", "--", "true"]).unwrap_err();
        assert!(matches!(err, LaunchError::ZeroTimeout), "{err}");
        let err = job(&["--nproc-per-node", "1", "--grace-secs", "x", "--", "true"]).unwrap_err();
        assert!(err.to_string().contains("--grace-secs"), "{err}");
        let err = job(&[
            "--nproc-per-node",
            "1",
            "--failure-wait-secs=-3",
            "--",
            "true",
        ])
        .unwrap_err();
        assert!(err.to_string().contains("--failure-wait-secs"), "{err}");
    }

    #[test]
    fn huge_values_are_rejected_naming_the_flag() {
        for flag in ["--timeout", "--grace-secs", "--failure-wait-secs"] {
            for value in ["1e19", "31536001", "1e300"] {
                let arg = format!("{flag}={value}");
                let err = job(&["--nproc-per-node", "1", &arg, "--", "true"]).unwrap_err();
                assert!(
                    matches!(err, LaunchError::SecondsTooLarge { .. }),
                    "{arg}: {err}"
                );
                assert!(err.to_string().contains(flag), "{err}");
            }
            // A year exactly is fine.
            let arg = format!("{flag}=31536000");
            job(&["--nproc-per-node", "1", &arg, "--", "true"]).unwrap();
        }
        let err = job(&["--nproc-per-node", "1025", "--", "true"]).unwrap_err();
        assert!(matches!(err, LaunchError::TooManyRanks { .. }), "{err}");
        assert!(err.to_string().contains("--nproc-per-node 1025"), "{err}");
        let err = job(&["--nproc-per-node", "100000000000", "--", "true"]).unwrap_err();
        assert!(err.to_string().contains("--nproc-per-node"), "{err}");
        // Not an integer at all: the error names the flag.
        for bad in ["1e11", "-1", "+2", "x", "cpu", "99999999999999999999999"] {
            let arg = format!("--nproc-per-node={bad}");
            let err = job(&[&arg, "--", "true"]).unwrap_err();
            assert!(matches!(err, LaunchError::BadNproc { .. }), "{bad}: {err}");
            assert!(err.to_string().contains("--nproc-per-node"), "{err}");
        }
        job(&["--nproc-per-node", "1024", "--", "true"]).unwrap();
    }

    #[test]
    fn a_command_is_required() {
        assert!(args(&["--nproc-per-node", "1"]).is_err());
        assert!(args(&["--nproc-per-node", "1", "--"]).is_err());
        assert!(args(&["--", "echo"]).is_err());
        assert!(args(&["echo"]).is_err());
        assert!(args(&["--nproc-per-node", "1", "--gpus", "a,b", "--", "echo"]).is_err());
        // An option the launcher does not know, before the program, is an
        // error, not the program.
        let err = args(&["--nproc-per-node", "1", "--bogus", "echo"]).unwrap_err();
        assert!(err.to_string().contains("--bogus"), "{err}");
    }

    #[test]
    fn torchrun_spellings() {
        // Underscores, `=`, and the program without `--`: everything from
        // the first word that is not an option on belongs to the program.
        let job = job(&[
            "--nproc_per_node=2",
            "--master_addr",
            "localhost",
            "--master_port",
            "29501",
            "--standalone",
            "--nnodes",
            "1",
            "--node_rank",
            "0",
            "--no_python",
            "prog",
            "--nproc_per_node",
            "7",
            "--",
            "-x",
        ])
        .unwrap();
        assert_eq!(job.nproc, 2);
        assert_eq!(job.master_addr, "localhost");
        assert_eq!(job.master_port, 29501);
        let want: Vec<OsString> = ["prog", "--nproc_per_node", "7", "--", "-x"]
            .into_iter()
            .map(OsString::from)
            .collect();
        assert_eq!(job.command, want);
        // The dashed forms, torchrun's `--nnodes 1:1`, and `--` before the
        // program all still work.
        let job = super::JobConfig::from_args(
            args(&[
                "--nproc-per-node",
                "3",
                "--nnodes=1:1",
                "--node-rank=0",
                "--no-python",
                "--grace_secs",
                "1",
                "--failure_wait_secs",
                "2",
                "--",
                "prog",
            ])
            .unwrap(),
        )
        .unwrap();
        assert_eq!(job.nproc, 3);
        assert_eq!(job.grace, Duration::from_secs(1));
        assert_eq!(job.failure_wait, Duration::from_secs(2));
        assert_eq!(job.command, vec![OsString::from("prog")]);
    }

    /// `--nnodes 01` was once refused as multi-node (the value was
    /// compared as a string).
    #[test]
    fn one_node_in_any_spelling_is_accepted() {
        for nnodes in ["1", " 1 ", "01", "1:1", "01:001", "+1"] {
            let job = job(&["--nproc-per-node", "1", "--nnodes", nnodes, "true"]);
            assert!(job.is_ok(), "{nnodes}: {:?}", job.err());
        }
        for nnodes in ["0", "2", "1:2", "0:1", "1:", ":1", "x", "1:1:1"] {
            let err = job(&["--nproc-per-node", "1", "--nnodes", nnodes, "true"]).unwrap_err();
            assert!(
                matches!(err, LaunchError::MultiNode { .. }),
                "{nnodes}: {err}"
            );
        }
    }

    #[test]
    fn more_than_one_node_is_refused() {
        for extra in [["--nnodes", "2"], ["--nnodes", "1:2"], ["--node-rank", "1"]] {
            let mut argv = vec!["--nproc-per-node", "1"];
            argv.extend(extra);
            argv.push("true");
            let err = job(&argv).unwrap_err();
            assert!(matches!(err, LaunchError::MultiNode { .. }), "{err}");
            assert!(err.to_string().contains("one node"), "{err}");
        }
    }

    fn with_gpus(nproc: &str, count: Result<usize, String>) -> Result<JobConfig, LaunchError> {
        let args = args(&["--nproc-per-node", nproc, "prog"]).unwrap();
        JobConfig::from_args_with(args, || count)
    }

    #[test]
    fn gpu_and_auto_start_one_rank_per_visible_gpu() {
        for spelling in ["gpu", "auto", "GPU", " auto "] {
            let job = with_gpus(spelling, Ok(4)).unwrap();
            assert_eq!(job.nproc, 4, "{spelling}");
            assert_eq!(job.devices, vec![0, 1, 2, 3]);
        }
        let err = with_gpus("gpu", Ok(0)).unwrap_err();
        assert!(matches!(err, LaunchError::NoGpus), "{err}");
        let err = with_gpus("gpu", Err("NVML: library not found".into())).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("cannot count the GPUs"), "{text}");
        assert!(text.contains("NVML: library not found"), "{text}");
        assert!(text.contains("give the number of ranks"), "{text}");
        // A number never counts GPUs.
        let job = with_gpus("2", Err("unused".into())).unwrap();
        assert_eq!(job.nproc, 2);
    }

    #[test]
    fn visible_devices_are_counted_as_cuda_does() {
        assert_eq!(count_listed_devices("0,1,2"), 3);
        assert_eq!(count_listed_devices("3"), 1);
        assert_eq!(count_listed_devices(" 1 , 0 "), 2);
        assert_eq!(count_listed_devices("GPU-8f1e,GPU-22aa"), 2);
        assert_eq!(count_listed_devices(""), 0);
        assert_eq!(count_listed_devices("-1"), 0);
        assert_eq!(count_listed_devices("0,-1,2"), 1);
        assert_eq!(count_listed_devices("0,,1"), 1);
    }

    #[test]
    fn command_arguments_are_not_parsed_as_options() {
        let args = args(&[
            "--nproc-per-node",
            "1",
            "--",
            "prog",
            "--nproc-per-node",
            "7",
        ])
        .unwrap();
        assert_eq!(args.nproc_per_node, "1");
        assert_eq!(args.command.len(), 3);
    }
}
