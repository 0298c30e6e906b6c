//! `--mps`: a CUDA MPS control daemon of the job's own, so that ranks that
//! share a GPU (`--gpus 0,0,0,0` with `INTRANODE_ALLOW_OVERLAPPING_DEVICES=1`)
//! run their kernels side by side, as on a GPU each, rather than in time
//! slices. That is how a one-GPU machine tests every multi-rank stage.
//!
//! The daemon gets a pipe and a log folder of its own under the temporary
//! folder (`CUDA_MPS_PIPE_DIRECTORY`, `CUDA_MPS_LOG_DIRECTORY`, which the
//! ranks inherit), so it never meets another job's server, and every job
//! starts a fresh one: after a rank faulted, a server could refuse the next
//! job's contexts (`cuCtxRetain`: `CUDA_ERROR_UNKNOWN`) until restarted.
//! [`MpsServer`]'s drop asks the daemon to quit and waits for it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The control program the daemon is started and stopped with.
pub const CONTROL: &str = "nvidia-cuda-mps-control";
/// Where the ranks find the daemon's pipe.
pub const PIPE_ENV: &str = "CUDA_MPS_PIPE_DIRECTORY";
/// Where the daemon and its server write their logs.
pub const LOG_ENV: &str = "CUDA_MPS_LOG_DIRECTORY";

/// How long the daemon may take to create its control pipe, and to exit.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// A running MPS control daemon of this job.
#[derive(Debug)]
pub struct MpsServer {
    root: PathBuf,
    pipe: PathBuf,
    log: PathBuf,
}

impl MpsServer {
    /// Starts the daemon with fresh folders under the temporary folder and
    /// waits until its control pipe exists.
    pub fn start() -> std::io::Result<Self> {
        Self::start_with(Path::new(CONTROL))
    }

    /// [`start`](Self::start) with the control program at `control_program`.
    fn start_with(control_program: &Path) -> std::io::Result<Self> {
        let root = std::env::temp_dir().join(format!("intranode-mps-{}", std::process::id()));
        let pipe = root.join("pipe");
        let log = root.join("log");
        std::fs::create_dir_all(&pipe)?;
        std::fs::create_dir_all(&log)?;
        let started = Command::new(control_program)
            .arg("-d")
            .env(PIPE_ENV, &pipe)
            .env(LOG_ENV, &log)
            .stdin(Stdio::null())
            .status();
        // No daemon to stop unless it started: only then does the server
        // exist (its drop asks the daemon to quit).
        match started {
            Ok(status) if status.success() => {}
            Ok(status) => {
                return Err(std::io::Error::other(format!(
                    "{} -d exited with {status}; its log is in {}",
                    control_program.display(),
                    log.display()
                )));
            }
            Err(e) => {
                let _ = std::fs::remove_dir_all(&root);
                return Err(std::io::Error::new(
                    e.kind(),
                    format!(
                        "cannot start {} (the CUDA driver's MPS; it needs root or the GPU's owner): {e}",
                        control_program.display()
                    ),
                ));
            }
        }
        let server = MpsServer { root, pipe, log };
        let control = server.pipe.join("control");
        let deadline = Instant::now() + READY_TIMEOUT;
        while !control.exists() {
            if Instant::now() > deadline {
                return Err(std::io::Error::other(format!(
                    "{CONTROL} -d started but made no {} within {} s",
                    control.display(),
                    READY_TIMEOUT.as_secs()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(server)
    }

    /// The variables that point a CUDA process at this daemon.
    pub fn env(&self) -> [(&'static str, &Path); 2] {
        [(PIPE_ENV, &self.pipe), (LOG_ENV, &self.log)]
    }

    /// Asks the daemon to quit (`quit` on its control) and waits until its
    /// pipe is gone or [`READY_TIMEOUT`] passes.
    fn quit(&self) -> std::io::Result<()> {
        let mut child = Command::new(CONTROL)
            .env(PIPE_ENV, &self.pipe)
            .env(LOG_ENV, &self.log)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(b"quit\n")?;
        }
        child.wait()?;
        let control = self.pipe.join("control");
        let deadline = Instant::now() + READY_TIMEOUT;
        while control.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }
}

impl Drop for MpsServer {
    fn drop(&mut self) {
        if let Err(e) = self.quit() {
            eprintln!(
                "intranode-run: could not stop the MPS daemon ({e}); stop it with: echo quit | {PIPE_ENV}={} {CONTROL}",
                self.pipe.display()
            );
            return;
        }
        // The logs stay when the daemon did not go: they say why.
        if !self.pipe.join("control").exists() {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_control_program_is_a_clear_error() {
        let e = MpsServer::start_with(Path::new("/nonexistent/nvidia-cuda-mps-control"))
            .expect_err("no such program");
        let text = e.to_string();
        assert!(
            text.contains("cannot start /nonexistent/nvidia-cuda-mps-control"),
            "{text}"
        );
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    }
}
