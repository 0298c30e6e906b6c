//! The one error type of this crate.

use crate::EnvSource;

/// Why the environment does not describe a valid rank.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DistEnvError {
    #[error(
        "no launcher variables found: set RANK and WORLD_SIZE (torchrun, intranode-run), \
         or start under mpirun (OMPI_COMM_WORLD_RANK), a PMI launcher (PMI_RANK) or srun \
         (SLURM_PROCID)"
    )]
    NotFound,
    #[error("{var}={value:?} is not a valid {what}")]
    Parse {
        var: &'static str,
        value: String,
        what: &'static str,
    },
    #[error("{present} is set but {missing} is not")]
    Partial {
        present: &'static str,
        missing: &'static str,
    },
    #[error("{var}=0: a job has at least one rank")]
    EmptyWorld { var: &'static str },
    #[error("{rank_var}={rank} is not below {size_var}={size}")]
    RankOutOfRange {
        rank_var: &'static str,
        rank: usize,
        size_var: &'static str,
        size: usize,
    },
    #[error("{local_var}={local_size} is larger than {world_var}={world_size}")]
    LocalWorldTooLarge {
        local_var: &'static str,
        local_size: usize,
        world_var: &'static str,
        world_size: usize,
    },
    #[error(
        "{first_var}={first} ({first_source}) contradicts {second_var}={second} \
         ({second_source}): variables of two launchers are set"
    )]
    Conflict {
        first_var: &'static str,
        first: usize,
        first_source: EnvSource,
        second_var: &'static str,
        second: usize,
        second_source: EnvSource,
    },
    #[error("MASTER_ADDR is set but empty")]
    EmptyMasterAddr,
    #[error(
        "no store address: {missing} is not set (intranode-run and torchrun set it; under \
         mpirun or srun, export MASTER_ADDR and MASTER_PORT of a store the job hosts)"
    )]
    NoStoreAddr { missing: &'static str },
    #[error(
        "TORCHELASTIC_USE_AGENT_STORE={value:?}: torchrun expects rank 0 to host a PyTorch \
         TCPStore, which intranode ranks do not; let the agent share its store (unset \
         TORCH_DISABLE_SHARE_RDZV_TCP_STORE) or set INTRANODE_STORE_PROTOCOL"
    )]
    NoAgentStore { value: String },
}
