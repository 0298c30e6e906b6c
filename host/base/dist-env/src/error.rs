//! The one error type of this crate.

use crate::vars::EnvSource;

/// Why the environment does not describe a valid rank. `Debug` prints
/// the message, so `main` returning this error says what to do.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
pub enum DistEnvError {
    #[error(
        "no launcher variables found: set RANK and WORLD_SIZE (torchrun, intranode-run), \
         or start under mpirun (OMPI_COMM_WORLD_RANK), a PMI launcher (PMI_RANK) or srun \
         (SLURM_PROCID)"
    )]
    /// No launcher's variables are set.
    NotFound,
    /// A variable's value does not parse.
    #[error("{var}={value:?} is not a valid {what}")]
    Parse {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What it should be (`"rank"`, `"port"`, ...).
        what: &'static str,
    },
    /// One variable of a pair is set, the other is not.
    #[error("{present} is set but {missing} is not")]
    Partial {
        /// The variable that is set.
        present: &'static str,
        /// The one that is missing.
        missing: &'static str,
    },
    /// A world size of 0.
    #[error("{var}=0: a job has at least one rank")]
    EmptyWorld {
        /// The variable that says 0.
        var: &'static str,
    },
    /// A rank at or above its world size.
    #[error("{rank_var}={rank} is not below {size_var}={size}")]
    RankOutOfRange {
        /// The rank's variable.
        rank_var: &'static str,
        /// The rank.
        rank: usize,
        /// The size's variable.
        size_var: &'static str,
        /// The size.
        size: usize,
    },
    /// More ranks on this host than in the whole job.
    #[error("{local_var}={local_size} is larger than {world_var}={world_size}")]
    LocalWorldTooLarge {
        /// The local size's variable.
        local_var: &'static str,
        /// The local world size.
        local_size: usize,
        /// The world size's variable.
        world_var: &'static str,
        /// The world size.
        world_size: usize,
    },
    #[error(
        "{first_var}={first} ({first_source}) contradicts {second_var}={second} \
         ({second_source}): variables of two launchers are set"
    )]
    /// Two launchers' variables are set and disagree.
    Conflict {
        /// The first variable.
        first_var: &'static str,
        /// Its value.
        first: usize,
        /// The launcher it belongs to.
        first_source: EnvSource,
        /// The second variable.
        second_var: &'static str,
        /// Its value.
        second: usize,
        /// The launcher it belongs to.
        second_source: EnvSource,
    },
    /// `MASTER_ADDR` is empty.
    #[error("MASTER_ADDR is set but empty")]
    EmptyMasterAddr,
    #[error(
        "no store address: {missing} is not set (intranode-run and torchrun set it; under \
         mpirun or srun, export MASTER_ADDR and MASTER_PORT of a store the job hosts)"
    )]
    /// No store address in the environment.
    NoStoreAddr {
        /// The variable that is missing.
        missing: &'static str,
    },
    #[error(
        "TORCHELASTIC_USE_AGENT_STORE={value:?}: torchrun expects rank 0 to host a PyTorch \
         TCPStore, which intranode ranks do not; let the agent share its store (unset \
         TORCH_DISABLE_SHARE_RDZV_TCP_STORE) or set INTRANODE_STORE_PROTOCOL"
    )]
    /// torchrun was told to let rank 0 host the store, which intranode
    /// ranks do not.
    NoAgentStore {
        /// The variable's value.
        value: String,
    },
}

impl std::fmt::Debug for DistEnvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self}")
    }
}
