//! What the numbered examples share, kept apart so that the CPU tests
//! cover it: [`mlp`], the small model of `01_data_parallel`, with its
//! synthetic data, forward and backward passes on the host; [`exact`],
//! the inputs and element checks of 04 and 05; and
//! [`init_logging`], the log output every example installs.

pub mod exact;
pub mod mlp;

use tracing_subscriber::EnvFilter;

/// Shows what the library logs on stderr: `RUST_LOG` when set (e.g.
/// `RUST_LOG=intranode=debug`), warnings otherwise, which is where the
/// library says why a fast path was not taken. An application does the
/// same with whatever `tracing` subscriber it already has.
pub fn init_logging() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
