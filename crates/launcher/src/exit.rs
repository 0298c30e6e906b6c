//! How a rank ended, as the launcher reports it and turns it into its own
//! exit code. Below `supervise` and `leftovers`, which both name it.

use std::fmt;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use nix::sys::signal::Signal;

/// How one rank ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RankExit {
    /// It exited with this code.
    Code(i32),
    /// It was killed by this signal.
    Signal(i32),
    /// Waiting for it failed, or the launcher could not watch it.
    Unknown(String),
}

impl RankExit {
    /// The exit of a reaped child.
    pub fn from_status(status: ExitStatus) -> Self {
        match (status.code(), status.signal()) {
            (Some(code), _) => Self::Code(code),
            (None, Some(signal)) => Self::Signal(signal),
            (None, None) => Self::Unknown(status.to_string()),
        }
    }

    /// Whether this is exit code 0.
    pub fn success(&self) -> bool {
        matches!(self, Self::Code(0))
    }

    /// The launcher's exit code when this is the first failure: the rank's
    /// code, or 128 + the signal number, as a shell reports it.
    pub(crate) fn launcher_code(&self) -> u8 {
        match self {
            Self::Code(code) => u8::try_from(*code).ok().filter(|&c| c != 0).unwrap_or(1),
            Self::Signal(signal) => signal_exit_code(*signal),
            Self::Unknown(_) => 1,
        }
    }
}

impl fmt::Display for RankExit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Code(code) => write!(f, "exited with code {code}"),
            Self::Signal(signal) => write!(f, "was killed by {}", signal_name(*signal)),
            Self::Unknown(why) => write!(f, "ended in an unknown way ({why})"),
        }
    }
}

/// `SIGKILL (9)`, or `signal 40` for numbers nix has no name for.
pub fn signal_name(signal: i32) -> String {
    match Signal::try_from(signal) {
        Ok(named) => format!("{} ({signal})", named.as_str()),
        Err(_) => format!("signal {signal}"),
    }
}

pub(crate) fn signal_exit_code(signal: i32) -> u8 {
    u8::try_from(128 + signal.clamp(1, 127)).unwrap_or(u8::MAX)
}
