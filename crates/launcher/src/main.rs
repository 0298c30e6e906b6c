//! `intranode-run`: start N ranks of a command on this node and supervise them.
//!
//! See [`intranode_launcher`] for how it works; this file only turns the
//! command line into a job and the job's report into an exit status.

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use intranode_launcher::mps::MpsServer;
use intranode_launcher::{Args, JobConfig, launch};

fn main() -> ExitCode {
    init_logging();
    match try_main() {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("intranode-run: error: {err:#}");
            ExitCode::from(2)
        }
    }
}

/// The launcher's own `tracing` events (its store server's) on stderr:
/// `RUST_LOG` when set and valid, warnings otherwise. The ranks inherit
/// `RUST_LOG` and install their own.
fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = match std::env::var("RUST_LOG") {
        Ok(value) if !value.trim().is_empty() => EnvFilter::try_new(&value).unwrap_or_else(|e| {
            eprintln!("intranode-run: warning: RUST_LOG={value:?} does not parse ({e}); logging warnings only");
            EnvFilter::new("warn")
        }),
        _ => EnvFilter::new("warn"),
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

fn try_main() -> anyhow::Result<u8> {
    let args = Args::parse();
    let mps = args.mps;
    let job = JobConfig::from_args(args).context("invalid arguments")?;
    // Started before any rank and stopped (its drop) after the last one.
    let server = if mps {
        let server = MpsServer::start().context("--mps")?;
        for (name, value) in server.env() {
            // SAFETY: no other thread runs yet (the store server and the
            // ranks' threads start in `launch`), so nothing reads the
            // environment while it changes; the ranks inherit it.
            unsafe { std::env::set_var(name, value) };
        }
        Some(server)
    } else {
        None
    };
    let report = launch(&job).context("cannot run the job")?;
    drop(server);
    for line in report.summary() {
        eprintln!("intranode-run: {line}");
    }
    Ok(report.exit_code())
}
