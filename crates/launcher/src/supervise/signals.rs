//! The signals that end a job and what the ranks get for each, and the
//! signal a rank gets when the launcher dies (NOTE [parent death signal]).

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

use nix::errno::Errno;
use nix::sys::signal::Signal;
use signal_hook::consts::{SIGALRM, SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};

/// The signals that end a job and are forwarded to the ranks as they came:
/// each means "stop" to any program (SIGHUP: the terminal went away;
/// SIGQUIT: Ctrl-\\).
pub(super) const FORWARDED_SIGNALS: [i32; 4] = [SIGINT, SIGTERM, SIGHUP, SIGQUIT];

/// The signals that end a job, the ranks getting SIGTERM instead: their
/// default action ends a process, so left unhandled they would end the
/// launcher with no sweep, but a rank may give them another meaning (a
/// checkpoint on SIGUSR1, which Slurm's `--signal` sends before a time
/// limit; its own timer on SIGALRM) and keep running, to be SIGKILLed
/// after the grace period with no chance to clean up.
pub(super) const STOPPED_AS_SIGTERM: [i32; 3] = [SIGUSR1, SIGUSR2, SIGALRM];

/// Every signal that ends a job: the launcher stops the ranks, sweeps
/// their groups and exits with 128 + the signal's number.
pub(super) fn stop_signals() -> impl Iterator<Item = i32> {
    FORWARDED_SIGNALS.into_iter().chain(STOPPED_AS_SIGTERM)
}

/// What the ranks get first when the launcher got `signal` (or `None`: the
/// job ends for another reason): the signal itself when it is one of
/// [`FORWARDED_SIGNALS`], SIGTERM otherwise.
pub(super) fn signal_for_ranks(signal: Option<i32>) -> Signal {
    signal
        .filter(|s| FORWARDED_SIGNALS.contains(s))
        .and_then(|s| Signal::try_from(s).ok())
        .unwrap_or(Signal::SIGTERM)
}

/// Makes the kernel SIGKILL the rank when the launcher dies, so that a
/// launcher killed with SIGKILL (a CI timeout, the OOM killer) leaves no
/// rank holding a GPU. Only the rank's first process gets the signal.
///
/// NOTE [parent death signal]: Linux sends it when the *thread* that
/// forked the child exits; ranks are started from the main thread, which
/// lives as long as the launcher.
#[cfg(target_os = "linux")]
pub(super) fn die_with_launcher(cmd: &mut Command) {
    let launcher = nix::unistd::getpid();
    // SAFETY: the closure runs in the forked child before exec, where only
    // async-signal-safe work is allowed. It makes two system calls,
    // prctl(2) and getppid(2), through nix wrappers that neither allocate
    // nor lock, and builds its errors from raw errno values, which does
    // not allocate either.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
                .map_err(|errno| io::Error::from_raw_os_error(errno as i32))?;
            // The launcher died between fork and prctl: the signal will
            // never come, so do not start at all.
            if nix::unistd::getppid() != launcher {
                return Err(io::Error::from_raw_os_error(Errno::ESRCH as i32));
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
pub(super) fn die_with_launcher(_cmd: &mut Command) {}
