//! What the GPU suite (`intranode-suite`, in `tests/`) and the benchmark
//! (`intranode-bench`) share, so that neither depends on the other and
//! nothing is written twice:
//!
//! - [`rank`]: one process's set-up under `intranode-run` ([`Proc`]:
//!   environment, store, device, stream) and a rank with its
//!   `Communicator` ([`Rank`]);
//! - [`data`]: the reproducible inputs every rank can regenerate for every
//!   other rank (`intranode_kernels_gpu::pattern`, the soak kernels' own pattern),
//!   the f64 reference, tolerances and the checks of outputs;
//! - [`free`]: free-running timing on the device (stamp logs, graph and
//!   eager modes, skew, per-call distributions);
//! - [`progress`]: rank 0's progress bar or lines;
//! - [`logging`]: the `tracing` subscriber both install (`RUST_LOG`,
//!   warnings by default).
//!
//! Test and benchmark machinery, not product: nothing here belongs in the
//! `intranode` crate's API. Errors are `anyhow` because the only callers
//! are the two binaries, which print them and exit; none matches on them.

pub mod data;
pub mod free;
pub mod logging;
pub mod progress;
pub mod rank;

pub use rank::{Proc, Rank};
