//! The launchers this crate reads, and the names of their variables.
//!
//! `intranode-run` sets the torchrun names below and removes every other
//! source's rank variables from its ranks ([`EnvSource::var_names`]), so
//! launcher and reader share this one list.
// NOTE [foreign rank variables] in `crates/launcher/src/rank_env.rs`.

use std::fmt;

/// `RANK`: rank in the whole job (torchrun, `intranode-run`).
pub const RANK: &str = "RANK";
/// `WORLD_SIZE`: number of ranks in the job (torchrun, `intranode-run`).
pub const WORLD_SIZE: &str = "WORLD_SIZE";
/// `LOCAL_RANK`: rank on this node (torchrun, `intranode-run`).
pub const LOCAL_RANK: &str = "LOCAL_RANK";
/// `LOCAL_WORLD_SIZE`: number of ranks on this node (torchrun,
/// `intranode-run`).
pub const LOCAL_WORLD_SIZE: &str = "LOCAL_WORLD_SIZE";
/// `MASTER_ADDR`: host of the rendezvous store, read whatever the source.
pub const MASTER_ADDR: &str = "MASTER_ADDR";
/// `MASTER_PORT`: port of the rendezvous store, read whatever the source.
pub const MASTER_PORT: &str = "MASTER_PORT";
/// `INTRANODE_DEVICE`: the CUDA device index of this rank, set by
/// `intranode-run` (`--gpus`), read whatever the source.
pub const DEVICE: &str = "INTRANODE_DEVICE";

/// The launcher whose variables gave the rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EnvSource {
    /// torchrun, or `intranode-run`, which sets the same variables.
    Torchrun,
    /// Open MPI's `mpirun`.
    OpenMpi,
    /// A PMI launcher (MPICH's hydra, Intel MPI).
    Pmi,
    /// Slurm's `srun`.
    Slurm,
}

impl EnvSource {
    /// Every source, in the order of preference for
    /// [`DistEnv::source`](crate::DistEnv::source).
    pub const ALL: [Self; 4] = [Self::Torchrun, Self::OpenMpi, Self::Pmi, Self::Slurm];

    /// The rank variables this source's launcher sets: rank, world size,
    /// then the local pair where it has one.
    pub fn var_names(self) -> impl Iterator<Item = &'static str> {
        let names = self.names();
        [
            Some(names.rank),
            Some(names.size),
            names.local_rank,
            names.local_size,
        ]
        .into_iter()
        .flatten()
    }

    pub(crate) fn names(self) -> &'static Names {
        match self {
            Self::Torchrun => &TORCHRUN,
            Self::OpenMpi => &OPEN_MPI,
            Self::Pmi => &PMI,
            Self::Slurm => &SLURM,
        }
    }
}

impl fmt::Display for EnvSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Torchrun => "torchrun",
            Self::OpenMpi => "Open MPI",
            Self::Pmi => "PMI",
            Self::Slurm => "Slurm",
        })
    }
}

/// The variable names of one source.
pub(crate) struct Names {
    pub(crate) source: EnvSource,
    pub(crate) rank: &'static str,
    pub(crate) size: &'static str,
    pub(crate) local_rank: Option<&'static str>,
    pub(crate) local_size: Option<&'static str>,
    /// The local size may be missing when the local rank is set (Slurm);
    /// then it is the world size.
    pub(crate) local_size_optional: bool,
}

const TORCHRUN: Names = Names {
    source: EnvSource::Torchrun,
    rank: RANK,
    size: WORLD_SIZE,
    local_rank: Some(LOCAL_RANK),
    local_size: Some(LOCAL_WORLD_SIZE),
    local_size_optional: false,
};

const OPEN_MPI: Names = Names {
    source: EnvSource::OpenMpi,
    rank: "OMPI_COMM_WORLD_RANK",
    size: "OMPI_COMM_WORLD_SIZE",
    local_rank: Some("OMPI_COMM_WORLD_LOCAL_RANK"),
    local_size: Some("OMPI_COMM_WORLD_LOCAL_SIZE"),
    local_size_optional: false,
};

const PMI: Names = Names {
    source: EnvSource::Pmi,
    rank: "PMI_RANK",
    size: "PMI_SIZE",
    local_rank: None,
    local_size: None,
    local_size_optional: false,
};

pub(crate) const SLURM: Names = Names {
    source: EnvSource::Slurm,
    rank: "SLURM_PROCID",
    size: "SLURM_NTASKS",
    local_rank: Some("SLURM_LOCALID"),
    local_size: Some("SLURM_NTASKS_PER_NODE"),
    local_size_optional: true,
};

/// The sources that must agree when several are set, in the order of
/// preference for [`DistEnv::source`](crate::DistEnv::source). Slurm is
/// apart: see NOTE [slurm is the outer launcher].
pub(crate) const TASK_LAUNCHERS: [&Names; 3] = [&TORCHRUN, &OPEN_MPI, &PMI];
