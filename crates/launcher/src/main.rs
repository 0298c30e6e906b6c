//! `intranode-run`: start N ranks of a command on this node and supervise them.
//!
//! See [`intranode_launcher`] for how it works; this file only turns the
//! command line into a job and the job's report into an exit status.

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use intranode_launcher::{Args, JobConfig, launch};

fn main() -> ExitCode {
    match try_main() {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("intranode-run: error: {err:#}");
            ExitCode::from(2)
        }
    }
}

fn try_main() -> anyhow::Result<u8> {
    let args = Args::parse();
    let job = JobConfig::from_args(args).context("invalid arguments")?;
    let report = launch(&job).context("cannot run the job")?;
    for line in report.summary() {
        eprintln!("intranode-run: {line}");
    }
    Ok(report.exit_code())
}
