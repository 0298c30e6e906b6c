//! Rank, world size and store address from the launcher's environment.
//!
//! [`DistEnv::from_env`] reads the variables of whichever launcher started
//! this process and checks them; [`DistEnv::from_vars`] does the same with
//! any lookup function, which is how the tests feed it synthetic maps.
//!
//! Main types: [`DistEnv`] (where this process sits in the job),
//! [`EnvSource`] (which launcher said so), [`DistEnvError`] (why the
//! variables do not describe a rank); [`vars`] names the variables, and is
//! what `intranode-run` sets and removes.
//!
//! Architecture Invariant: this crate knows nothing of CUDA or of the
//! store; it only reads and checks variables, so the launcher can share its
//! names without depending on the library.
//!
//! | source | rank | world size | local rank | local world size |
//! | --- | --- | --- | --- | --- |
//! | [`EnvSource::Torchrun`] (also `intranode-run`) | `RANK` | `WORLD_SIZE` | `LOCAL_RANK` | `LOCAL_WORLD_SIZE` |
//! | [`EnvSource::OpenMpi`] | `OMPI_COMM_WORLD_RANK` | `OMPI_COMM_WORLD_SIZE` | `OMPI_COMM_WORLD_LOCAL_RANK` | `OMPI_COMM_WORLD_LOCAL_SIZE` |
//! | [`EnvSource::Pmi`] (MPICH, Intel MPI) | `PMI_RANK` | `PMI_SIZE` | - | - |
//! | [`EnvSource::Slurm`] (`srun`) | `SLURM_PROCID` | `SLURM_NTASKS` | `SLURM_LOCALID` | `SLURM_NTASKS_PER_NODE` |
//!
//! Rank and world size must come together; so must the local pair, except
//! that Slurm sets `SLURM_NTASKS_PER_NODE` only when it was asked for, and
//! then the local world is the step's `SLURM_NTASKS`. A source without a
//! local pair describes one node: the local rank is the rank.
//!
//! Every value is checked: numbers must parse, the world must hold at least
//! one rank, ranks must be below their world, and the local world cannot be
//! larger than the whole one. When torchrun, Open MPI and PMI variables are
//! set together they must agree; a disagreement is an error naming both
//! variables, because it means an outer launcher's variables leaked into
//! an inner launcher's ranks and nobody can tell which one is right.
//!
// NOTE [slurm is the outer launcher] is the paragraph below.
//! Slurm sets its variables in every process of an allocation, including the
//! batch script itself (`SLURM_PROCID=0`) and whatever `mpirun` or `torchrun`
//! starts from there, so a process that also has torchrun, Open MPI or PMI
//! variables was started by that inner launcher, and the Slurm variables
//! describe the outer step. They are read only when no other source is
//! present. `intranode-run` removes all foreign rank variables from its ranks.
// NOTE [foreign rank variables] in `crates/launcher/src/rank_env.rs`.
//!
//! `MASTER_ADDR`, `MASTER_PORT` and `INTRANODE_DEVICE` are read whatever
//! the source; [`DistEnv::store_addr`] joins the first two, and
//! [`DistEnv::store`] says which protocol the store there speaks
//! ([`StoreChoice`]: intranode's own, or PyTorch's `TCPStore` under
//! torchrun, by the rules of [`store_protocol`]).
// NOTE [store protocol decision] in `store_protocol.rs`.

// Every public item is documented; CI keeps it so (`cargo xtask doc`).
#![deny(missing_docs)]

mod error;
mod parse;
pub mod store_protocol;
#[cfg(test)]
mod tests;
pub mod vars;

pub use error::DistEnvError;
use parse::{parse_port, parse_usize};
pub use store_protocol::{StoreChoice, StoreProtocol};
pub use vars::EnvSource;
use vars::{Names, SLURM, TASK_LAUNCHERS};

/// Where this process sits in the job, as its launcher described it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistEnv {
    /// Rank in the whole job, below `world_size`.
    pub rank: usize,
    /// Number of ranks in the job, at least 1.
    pub world_size: usize,
    /// Rank among the ranks of this node, below `local_world_size`.
    pub local_rank: usize,
    /// Number of ranks on this node, at most `world_size`.
    pub local_world_size: usize,
    /// `MASTER_ADDR`: host of the rendezvous store.
    pub master_addr: Option<String>,
    /// `MASTER_PORT`: port of the rendezvous store.
    pub master_port: Option<u16>,
    /// `INTRANODE_DEVICE`: the CUDA device index this rank should use.
    pub device: Option<usize>,
    /// Which launcher's variables gave the rank.
    pub source: EnvSource,
    /// Which protocol the store at `MASTER_ADDR:MASTER_PORT` speaks.
    pub store: StoreChoice,
}

/// A value together with the variable it came from, for error messages.
#[derive(Debug, Clone, Copy)]
struct Var {
    name: &'static str,
    value: usize,
}

/// What one source says.
struct Reading {
    source: EnvSource,
    rank: Var,
    size: Var,
    /// `None`: the source has no local pair (one node assumed).
    local: Option<(Var, Var)>,
}

impl DistEnv {
    /// Reads the process environment (see the module docs).
    pub fn from_env() -> Result<Self, DistEnvError> {
        // A value that is not UTF-8 is kept (lossily) so that it fails to
        // parse with its name in the error, instead of looking unset.
        Self::from_vars(|name| {
            std::env::var_os(name).map(|value| value.to_string_lossy().into_owned())
        })
    }

    /// Reads the variables that `var` returns (`None`: not set).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self, DistEnvError> {
        let mut readings = Vec::new();
        for names in TASK_LAUNCHERS {
            if let Some(reading) = read_source(names, &var)? {
                readings.push(reading);
            }
        }
        if readings.is_empty()
            && let Some(reading) = read_source(&SLURM, &var)?
        {
            readings.push(reading);
        }
        let Some(first) = readings.first() else {
            return Err(DistEnvError::NotFound);
        };
        for other in &readings[1..] {
            agree(first.source, first.rank, other.source, other.rank)?;
            agree(first.source, first.size, other.source, other.size)?;
        }
        let locals: Vec<(EnvSource, (Var, Var))> = readings
            .iter()
            .filter_map(|reading| reading.local.map(|local| (reading.source, local)))
            .collect();
        if let Some(&(source, (rank, size))) = locals.first() {
            for &(other_source, (other_rank, other_size)) in &locals[1..] {
                agree(source, rank, other_source, other_rank)?;
                agree(source, size, other_source, other_size)?;
            }
        }
        let (local_rank, local_world_size) = locals
            .first()
            .map_or((first.rank.value, first.size.value), |(_, (rank, size))| {
                (rank.value, size.value)
            });

        let master_addr = match var(vars::MASTER_ADDR) {
            Some(addr) if addr.trim().is_empty() => return Err(DistEnvError::EmptyMasterAddr),
            Some(addr) => Some(addr.trim().to_owned()),
            None => None,
        };
        let master_port = match var(vars::MASTER_PORT) {
            Some(text) => Some(parse_port(&text)?),
            None => None,
        };
        let device = match var(vars::DEVICE) {
            Some(text) => Some(parse_usize(vars::DEVICE, &text, "device index")?),
            None => None,
        };
        let store = StoreChoice::from_vars(&var)?;
        Ok(Self {
            rank: first.rank.value,
            world_size: first.size.value,
            local_rank,
            local_world_size,
            master_addr,
            master_port,
            device,
            source: first.source,
            store,
        })
    }

    /// `host:port` of the rendezvous store, from `MASTER_ADDR` and
    /// `MASTER_PORT`; an IPv6 address gets brackets (`[::1]:29500`).
    pub fn store_addr(&self) -> Result<String, DistEnvError> {
        let addr = self
            .master_addr
            .as_deref()
            .ok_or(DistEnvError::NoStoreAddr {
                missing: vars::MASTER_ADDR,
            })?;
        let port = self.master_port.ok_or(DistEnvError::NoStoreAddr {
            missing: vars::MASTER_PORT,
        })?;
        if addr.contains(':') && !addr.starts_with('[') {
            Ok(format!("[{addr}]:{port}"))
        } else {
            Ok(format!("{addr}:{port}"))
        }
    }

    /// Whether this is rank 0, which hosts shared state in rendezvous.
    pub fn is_leader(&self) -> bool {
        self.rank == 0
    }
}

/// What `names` says, `None` when none of its variables is set.
fn read_source(
    names: &Names,
    var: &impl Fn(&str) -> Option<String>,
) -> Result<Option<Reading>, DistEnvError> {
    let get = |name: Option<&'static str>| name.and_then(|name| var(name).map(|v| (name, v)));
    let rank = get(Some(names.rank));
    let size = get(Some(names.size));
    let local_rank = get(names.local_rank);
    let local_size = get(names.local_size);
    if rank.is_none() && size.is_none() && local_rank.is_none() && local_size.is_none() {
        return Ok(None);
    }
    let (rank, size) = match (rank, size) {
        (Some(rank), Some(size)) => (rank, size),
        (Some(_), None) => return Err(partial(names.rank, names.size)),
        (None, Some(_)) => return Err(partial(names.size, names.rank)),
        (None, None) => {
            let present = local_rank
                .or(local_size)
                .map_or(names.rank, |(name, _)| name);
            return Err(partial(present, names.rank));
        }
    };
    let rank = parse_var(rank, "rank")?;
    let size = parse_var(size, "world size")?;
    if size.value == 0 {
        return Err(DistEnvError::EmptyWorld { var: size.name });
    }
    below(rank, size)?;

    let local = match (local_rank, local_size) {
        (Some(local_rank), Some(local_size)) => Some((
            parse_var(local_rank, "local rank")?,
            parse_var(local_size, "local world size")?,
        )),
        (Some(local_rank), None) if names.local_size_optional => {
            Some((parse_var(local_rank, "local rank")?, size))
        }
        (Some((present, _)), None) => {
            return Err(partial(present, names.local_size.unwrap_or(names.size)));
        }
        (None, Some((present, _))) => {
            return Err(partial(present, names.local_rank.unwrap_or(names.rank)));
        }
        (None, None) => None,
    };
    if let Some((local_rank, local_size)) = local {
        if local_size.value == 0 {
            return Err(DistEnvError::EmptyWorld {
                var: local_size.name,
            });
        }
        below(local_rank, local_size)?;
        if local_size.value > size.value {
            return Err(DistEnvError::LocalWorldTooLarge {
                local_var: local_size.name,
                local_size: local_size.value,
                world_var: size.name,
                world_size: size.value,
            });
        }
    }
    Ok(Some(Reading {
        source: names.source,
        rank,
        size,
        local,
    }))
}

fn partial(present: &'static str, missing: &'static str) -> DistEnvError {
    DistEnvError::Partial { present, missing }
}

fn below(rank: Var, size: Var) -> Result<(), DistEnvError> {
    if rank.value < size.value {
        Ok(())
    } else {
        Err(DistEnvError::RankOutOfRange {
            rank_var: rank.name,
            rank: rank.value,
            size_var: size.name,
            size: size.value,
        })
    }
}

fn agree(
    first_source: EnvSource,
    first: Var,
    second_source: EnvSource,
    second: Var,
) -> Result<(), DistEnvError> {
    if first.value == second.value {
        Ok(())
    } else {
        Err(DistEnvError::Conflict {
            first_var: first.name,
            first: first.value,
            first_source,
            second_var: second.name,
            second: second.value,
            second_source,
        })
    }
}

fn parse_var(
    (name, text): (&'static str, String),
    what: &'static str,
) -> Result<Var, DistEnvError> {
    Ok(Var {
        name,
        value: parse_usize(name, &text, what)?,
    })
}
