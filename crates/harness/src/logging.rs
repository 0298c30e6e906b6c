//! The programs' log output: [`init`].

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// The filter when `RUST_LOG` is unset: warnings and errors, which is where
/// the library says why a fast path was not taken ("NVLink mesh unknown,
/// assuming no NVLink: NVML unavailable", ...).
pub const DEFAULT_FILTER: &str = "warn";

/// The filter for a `RUST_LOG` value (`None` or blank: [`DEFAULT_FILTER`]),
/// and the parse error when it does not parse (the default is used then).
pub fn filter(rust_log: Option<&str>) -> (EnvFilter, Option<String>) {
    match rust_log {
        Some(value) if !value.trim().is_empty() => match EnvFilter::try_new(value) {
            Ok(filter) => (filter, None),
            Err(e) => (
                EnvFilter::new(DEFAULT_FILTER),
                Some(format!(
                    "RUST_LOG={value:?} does not parse ({e}); logging warnings only"
                )),
            ),
        },
        _ => (EnvFilter::new(DEFAULT_FILTER), None),
    }
}

/// Sends `tracing` events to stderr, filtered by `RUST_LOG` (e.g.
/// `RUST_LOG=intranode=debug`), warnings and errors by default. Colour only
/// on a terminal: under `intranode-run` stderr is a pipe whose lines get a
/// `[rank]` prefix. Call once, first thing in `main`; where a subscriber is
/// already installed it stays.
pub fn init() {
    let value = std::env::var("RUST_LOG").ok();
    let (found, complaint) = filter(value.as_deref());
    if let Some(complaint) = complaint {
        eprintln!("warning: {complaint}");
    }
    // Err only when a subscriber is already installed: keep that one.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(found)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_blank_and_bad_values_log_warnings() {
        for value in [None, Some(""), Some("  ")] {
            let (found, complaint) = filter(value);
            assert_eq!(found.to_string(), "warn");
            assert_eq!(complaint, None);
        }
        let (found, complaint) = filter(Some("intranode=debug,warn"));
        assert_eq!(complaint, None);
        assert!(found.to_string().contains("intranode=debug"), "{found}");
        let (found, complaint) = filter(Some("intranode=[=nonsense"));
        assert_eq!(found.to_string(), "warn");
        assert!(complaint.unwrap().contains("does not parse"));
    }
}
