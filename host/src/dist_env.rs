//! Rank, world size and store address from the launcher's environment.
//!
//! [`DistEnv::from_env`] reads the variables of whichever launcher started
//! this process and checks them; [`DistEnv::from_vars`] does the same with
//! any lookup function, which is how the tests feed it synthetic maps.
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
//! NOTE [slurm is the outer launcher]: Slurm sets its variables in every
//! process of an allocation, including the batch script itself
//! (`SLURM_PROCID=0`) and whatever `mpirun` or `torchrun` starts from
//! there, so a process that also has torchrun, Open MPI or PMI variables
//! was started by that inner launcher, and the Slurm variables describe
//! the outer step. They are read only when no other source is present.
//! `intranode-run` removes all foreign rank variables from its ranks (see
//! NOTE [foreign rank variables] in `crates/launcher/src/rank_env.rs`).
//!
//! `MASTER_ADDR`, `MASTER_PORT` and `INTRANODE_DEVICE` are read whatever
//! the source; [`DistEnv::store_addr`] joins the first two.

use std::fmt;

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
}

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
    #[error("no store address: {missing} is not set")]
    NoStoreAddr { missing: &'static str },
}

/// The variable names of one source.
struct Names {
    source: EnvSource,
    rank: &'static str,
    size: &'static str,
    local_rank: Option<&'static str>,
    local_size: Option<&'static str>,
    /// The local size may be missing when the local rank is set (Slurm);
    /// then it is the world size.
    local_size_optional: bool,
}

const TORCHRUN: Names = Names {
    source: EnvSource::Torchrun,
    rank: "RANK",
    size: "WORLD_SIZE",
    local_rank: Some("LOCAL_RANK"),
    local_size: Some("LOCAL_WORLD_SIZE"),
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

const SLURM: Names = Names {
    source: EnvSource::Slurm,
    rank: "SLURM_PROCID",
    size: "SLURM_NTASKS",
    local_rank: Some("SLURM_LOCALID"),
    local_size: Some("SLURM_NTASKS_PER_NODE"),
    local_size_optional: true,
};

/// The sources that must agree when several are set, in the order of
/// preference for [`DistEnv::source`]. Slurm is apart: see NOTE [slurm is
/// the outer launcher].
const TASK_LAUNCHERS: [&Names; 3] = [&TORCHRUN, &OPEN_MPI, &PMI];

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

        let master_addr = match var("MASTER_ADDR") {
            Some(addr) if addr.trim().is_empty() => return Err(DistEnvError::EmptyMasterAddr),
            Some(addr) => Some(addr.trim().to_owned()),
            None => None,
        };
        let master_port = match var("MASTER_PORT") {
            Some(text) => Some(parse_port(&text)?),
            None => None,
        };
        let device = match var("INTRANODE_DEVICE") {
            Some(text) => Some(parse_usize("INTRANODE_DEVICE", &text, "device index")?),
            None => None,
        };
        Ok(Self {
            rank: first.rank.value,
            world_size: first.size.value,
            local_rank,
            local_world_size,
            master_addr,
            master_port,
            device,
            source: first.source,
        })
    }

    /// `host:port` of the rendezvous store, from `MASTER_ADDR` and
    /// `MASTER_PORT`; an IPv6 address gets brackets (`[::1]:29500`).
    pub fn store_addr(&self) -> Result<String, DistEnvError> {
        let addr = self
            .master_addr
            .as_deref()
            .ok_or(DistEnvError::NoStoreAddr {
                missing: "MASTER_ADDR",
            })?;
        let port = self.master_port.ok_or(DistEnvError::NoStoreAddr {
            missing: "MASTER_PORT",
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

/// A decimal number; surrounding whitespace is allowed, a sign is not.
fn parse_usize(var: &'static str, text: &str, what: &'static str) -> Result<usize, DistEnvError> {
    let trimmed = text.trim();
    if trimmed.starts_with('+') {
        return Err(parse_error(var, text, what));
    }
    trimmed.parse().map_err(|_| parse_error(var, text, what))
}

fn parse_port(text: &str) -> Result<u16, DistEnvError> {
    match text.trim().parse::<u16>() {
        Ok(port) if port != 0 && !text.trim().starts_with('+') => Ok(port),
        _ => Err(parse_error("MASTER_PORT", text, "port (1-65535)")),
    }
}

fn parse_error(var: &'static str, text: &str, what: &'static str) -> DistEnvError {
    DistEnvError::Parse {
        var,
        value: text.to_owned(),
        what,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn read(vars: &[(&str, &str)]) -> Result<DistEnv, DistEnvError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|&(name, value)| (name.to_owned(), value.to_owned()))
            .collect();
        DistEnv::from_vars(|name| map.get(name).cloned())
    }

    fn message(vars: &[(&str, &str)]) -> String {
        match read(vars) {
            Ok(env) => panic!("expected an error, got {env:?}"),
            Err(err) => err.to_string(),
        }
    }

    const TORCHRUN_2_OF_4: &[(&str, &str)] = &[
        ("RANK", "2"),
        ("WORLD_SIZE", "4"),
        ("LOCAL_RANK", "2"),
        ("LOCAL_WORLD_SIZE", "4"),
        ("MASTER_ADDR", "10.1.2.3"),
        ("MASTER_PORT", "29500"),
    ];

    #[test]
    fn torchrun() {
        let env = read(TORCHRUN_2_OF_4).unwrap();
        assert_eq!(
            env,
            DistEnv {
                rank: 2,
                world_size: 4,
                local_rank: 2,
                local_world_size: 4,
                master_addr: Some("10.1.2.3".into()),
                master_port: Some(29500),
                device: None,
                source: EnvSource::Torchrun,
            }
        );
        assert_eq!(env.store_addr().unwrap(), "10.1.2.3:29500");
        assert!(!env.is_leader());
    }

    #[test]
    fn intranode_run_sets_the_device() {
        let mut vars = TORCHRUN_2_OF_4.to_vec();
        vars.push(("INTRANODE_DEVICE", "5"));
        assert_eq!(read(&vars).unwrap().device, Some(5));
        vars.pop();
        vars.push(("INTRANODE_DEVICE", "gpu5"));
        let err = message(&vars);
        assert!(err.contains("INTRANODE_DEVICE=\"gpu5\""), "{err}");
    }

    #[test]
    fn torchrun_without_local_pair_is_one_node() {
        let env = read(&[("RANK", "1"), ("WORLD_SIZE", "2")]).unwrap();
        assert_eq!((env.local_rank, env.local_world_size), (1, 2));
        assert_eq!(env.master_addr, None);
        assert_eq!(env.master_port, None);
    }

    #[test]
    fn torchrun_across_nodes() {
        let env = read(&[
            ("RANK", "5"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_RANK", "1"),
            ("LOCAL_WORLD_SIZE", "4"),
        ])
        .unwrap();
        assert_eq!(
            (
                env.rank,
                env.world_size,
                env.local_rank,
                env.local_world_size
            ),
            (5, 8, 1, 4)
        );
    }

    #[test]
    fn open_mpi() {
        let env = read(&[
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "3"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
        ])
        .unwrap();
        assert_eq!(env.source, EnvSource::OpenMpi);
        assert_eq!(
            (
                env.rank,
                env.world_size,
                env.local_rank,
                env.local_world_size
            ),
            (3, 4, 3, 4)
        );
        assert_eq!(env.master_addr, None);
    }

    #[test]
    fn open_mpi_uses_master_vars_when_set() {
        let env = read(&[
            ("OMPI_COMM_WORLD_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("MASTER_ADDR", "node7"),
            ("MASTER_PORT", "1234"),
        ])
        .unwrap();
        assert_eq!(env.store_addr().unwrap(), "node7:1234");
        assert!(env.is_leader());
    }

    #[test]
    fn slurm_with_tasks_per_node() {
        let env = read(&[
            ("SLURM_PROCID", "6"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_LOCALID", "2"),
            ("SLURM_NTASKS_PER_NODE", "4"),
        ])
        .unwrap();
        assert_eq!(env.source, EnvSource::Slurm);
        assert_eq!(
            (
                env.rank,
                env.world_size,
                env.local_rank,
                env.local_world_size
            ),
            (6, 8, 2, 4)
        );
    }

    #[test]
    fn slurm_without_tasks_per_node_is_one_node() {
        let env = read(&[
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_LOCALID", "1"),
        ])
        .unwrap();
        assert_eq!((env.local_rank, env.local_world_size), (1, 2));
        let env = read(&[("SLURM_PROCID", "1"), ("SLURM_NTASKS", "2")]).unwrap();
        assert_eq!((env.local_rank, env.local_world_size), (1, 2));
    }

    #[test]
    fn pmi() {
        let env = read(&[("PMI_RANK", "0"), ("PMI_SIZE", "1")]).unwrap();
        assert_eq!(env.source, EnvSource::Pmi);
        assert_eq!(
            (
                env.rank,
                env.world_size,
                env.local_rank,
                env.local_world_size
            ),
            (0, 1, 0, 1)
        );
    }

    #[test]
    fn nothing_set() {
        assert_eq!(read(&[]).unwrap_err(), DistEnvError::NotFound);
        let err = message(&[("MASTER_ADDR", "x"), ("MASTER_PORT", "1")]);
        assert!(err.contains("RANK and WORLD_SIZE"), "{err}");
    }

    #[test]
    fn agreeing_sources_are_fine() {
        let env = read(&[
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("PMI_RANK", "1"),
            ("PMI_SIZE", "2"),
        ])
        .unwrap();
        assert_eq!(env.source, EnvSource::Torchrun);
        assert_eq!(env.rank, 1);
    }

    #[test]
    fn local_pair_from_another_source() {
        let env = read(&[
            ("PMI_RANK", "5"),
            ("PMI_SIZE", "8"),
            ("OMPI_COMM_WORLD_RANK", "5"),
            ("OMPI_COMM_WORLD_SIZE", "8"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
        ])
        .unwrap();
        assert_eq!(env.source, EnvSource::OpenMpi);
        assert_eq!((env.local_rank, env.local_world_size), (1, 4));
    }

    #[test]
    fn contradicting_ranks() {
        let err = read(&[
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
        ])
        .unwrap_err();
        assert_eq!(
            err,
            DistEnvError::Conflict {
                first_var: "RANK",
                first: 1,
                first_source: EnvSource::Torchrun,
                second_var: "OMPI_COMM_WORLD_RANK",
                second: 0,
                second_source: EnvSource::OpenMpi,
            }
        );
        let text = err.to_string();
        assert!(
            text.contains("RANK=1 (torchrun) contradicts OMPI_COMM_WORLD_RANK=0 (Open MPI)"),
            "{text}"
        );
    }

    #[test]
    fn contradicting_world_sizes() {
        let err = message(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("PMI_RANK", "0"),
            ("PMI_SIZE", "4"),
        ]);
        assert!(err.contains("WORLD_SIZE=2"), "{err}");
        assert!(err.contains("PMI_SIZE=4"), "{err}");
    }

    #[test]
    fn contradicting_local_ranks() {
        let err = message(&[
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("LOCAL_RANK", "1"),
            ("LOCAL_WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "1"),
        ]);
        assert!(err.contains("LOCAL_RANK=1"), "{err}");
        assert!(err.contains("OMPI_COMM_WORLD_LOCAL_RANK=0"), "{err}");
    }

    #[test]
    fn slurm_is_ignored_under_an_inner_launcher() {
        // `srun -n1 torchrun --nproc-per-node 4`: Slurm's step has one task.
        let env = read(&[
            ("RANK", "3"),
            ("WORLD_SIZE", "4"),
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "1"),
            ("SLURM_LOCALID", "0"),
        ])
        .unwrap();
        assert_eq!(env.source, EnvSource::Torchrun);
        assert_eq!(env.rank, 3);
        // Not even read: garbage there does not matter.
        let env = read(&[("PMI_RANK", "0"), ("PMI_SIZE", "1"), ("SLURM_PROCID", "x")]).unwrap();
        assert_eq!(env.source, EnvSource::Pmi);
    }

    #[test]
    fn partial_sets() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (&[("RANK", "0")], "RANK is set but WORLD_SIZE is not"),
            (&[("WORLD_SIZE", "2")], "WORLD_SIZE is set but RANK is not"),
            (&[("LOCAL_RANK", "0")], "LOCAL_RANK is set but RANK is not"),
            (
                &[("RANK", "0"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "0")],
                "LOCAL_RANK is set but LOCAL_WORLD_SIZE is not",
            ),
            (
                &[
                    ("RANK", "0"),
                    ("WORLD_SIZE", "2"),
                    ("LOCAL_WORLD_SIZE", "2"),
                ],
                "LOCAL_WORLD_SIZE is set but LOCAL_RANK is not",
            ),
            (
                &[("OMPI_COMM_WORLD_SIZE", "2")],
                "OMPI_COMM_WORLD_SIZE is set but OMPI_COMM_WORLD_RANK is not",
            ),
            (&[("PMI_RANK", "0")], "PMI_RANK is set but PMI_SIZE is not"),
            (
                &[("SLURM_PROCID", "0")],
                "SLURM_PROCID is set but SLURM_NTASKS is not",
            ),
            (
                &[
                    ("SLURM_PROCID", "0"),
                    ("SLURM_NTASKS", "1"),
                    ("SLURM_NTASKS_PER_NODE", "1"),
                ],
                "SLURM_NTASKS_PER_NODE is set but SLURM_LOCALID is not",
            ),
        ];
        for (vars, expected) in cases {
            assert_eq!(message(vars), *expected, "{vars:?}");
        }
    }

    #[test]
    fn unparsable_numbers() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (
                &[("RANK", "one"), ("WORLD_SIZE", "2")],
                "RANK=\"one\" is not a valid rank",
            ),
            (
                &[("RANK", "-1"), ("WORLD_SIZE", "2")],
                "RANK=\"-1\" is not a valid rank",
            ),
            (
                &[("RANK", "+1"), ("WORLD_SIZE", "2")],
                "RANK=\"+1\" is not a valid rank",
            ),
            (
                &[("RANK", ""), ("WORLD_SIZE", "2")],
                "RANK=\"\" is not a valid rank",
            ),
            (
                &[("RANK", "0"), ("WORLD_SIZE", "2.0")],
                "WORLD_SIZE=\"2.0\" is not a valid world size",
            ),
            (
                &[
                    ("RANK", "0"),
                    ("WORLD_SIZE", "2"),
                    ("LOCAL_RANK", "x"),
                    ("LOCAL_WORLD_SIZE", "2"),
                ],
                "LOCAL_RANK=\"x\" is not a valid local rank",
            ),
            (
                &[("RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_PORT", "70000")],
                "MASTER_PORT=\"70000\" is not a valid port (1-65535)",
            ),
            (
                &[("RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_PORT", "0")],
                "MASTER_PORT=\"0\" is not a valid port (1-65535)",
            ),
            (
                &[("RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", " ")],
                "MASTER_ADDR is set but empty",
            ),
        ];
        for (vars, expected) in cases {
            assert_eq!(message(vars), *expected, "{vars:?}");
        }
    }

    #[test]
    fn whitespace_around_numbers_is_allowed() {
        let env = read(&[
            ("RANK", " 1\n"),
            ("WORLD_SIZE", "2 "),
            ("MASTER_PORT", " 80"),
        ])
        .unwrap();
        assert_eq!(
            (env.rank, env.world_size, env.master_port),
            (1, 2, Some(80))
        );
    }

    #[test]
    fn ranks_out_of_range() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (
                &[("RANK", "2"), ("WORLD_SIZE", "2")],
                "RANK=2 is not below WORLD_SIZE=2",
            ),
            (
                &[("RANK", "0"), ("WORLD_SIZE", "0")],
                "WORLD_SIZE=0: a job has at least one rank",
            ),
            (
                &[
                    ("RANK", "0"),
                    ("WORLD_SIZE", "4"),
                    ("LOCAL_RANK", "2"),
                    ("LOCAL_WORLD_SIZE", "2"),
                ],
                "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2",
            ),
            (
                &[
                    ("RANK", "0"),
                    ("WORLD_SIZE", "4"),
                    ("LOCAL_RANK", "0"),
                    ("LOCAL_WORLD_SIZE", "0"),
                ],
                "LOCAL_WORLD_SIZE=0: a job has at least one rank",
            ),
            (
                &[
                    ("RANK", "0"),
                    ("WORLD_SIZE", "2"),
                    ("LOCAL_RANK", "0"),
                    ("LOCAL_WORLD_SIZE", "4"),
                ],
                "LOCAL_WORLD_SIZE=4 is larger than WORLD_SIZE=2",
            ),
            (
                &[("OMPI_COMM_WORLD_RANK", "4"), ("OMPI_COMM_WORLD_SIZE", "4")],
                "OMPI_COMM_WORLD_RANK=4 is not below OMPI_COMM_WORLD_SIZE=4",
            ),
            (
                &[
                    ("SLURM_PROCID", "0"),
                    ("SLURM_NTASKS", "2"),
                    ("SLURM_LOCALID", "2"),
                ],
                "SLURM_LOCALID=2 is not below SLURM_NTASKS=2",
            ),
            (
                &[("PMI_RANK", "1"), ("PMI_SIZE", "1")],
                "PMI_RANK=1 is not below PMI_SIZE=1",
            ),
        ];
        for (vars, expected) in cases {
            assert_eq!(message(vars), *expected, "{vars:?}");
        }
    }

    #[test]
    fn store_addr_needs_both_halves() {
        let env = read(&[("RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "h")]).unwrap();
        assert_eq!(
            env.store_addr().unwrap_err().to_string(),
            "no store address: MASTER_PORT is not set"
        );
        let env = read(&[("RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_PORT", "1")]).unwrap();
        assert_eq!(
            env.store_addr().unwrap_err().to_string(),
            "no store address: MASTER_ADDR is not set"
        );
    }

    #[test]
    fn store_addr_brackets_ipv6() {
        let mut env = read(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "1"),
            ("MASTER_ADDR", "::1"),
            ("MASTER_PORT", "29500"),
        ])
        .unwrap();
        assert_eq!(env.store_addr().unwrap(), "[::1]:29500");
        env.master_addr = Some("[fe80::1]".into());
        assert_eq!(env.store_addr().unwrap(), "[fe80::1]:29500");
        env.master_addr = Some("localhost".into());
        assert_eq!(env.store_addr().unwrap(), "localhost:29500");
    }

    #[test]
    fn from_env_reads_the_process_environment() {
        // Whatever this test process inherited, the answer is either a
        // valid environment or an error: never a panic.
        match DistEnv::from_env() {
            Ok(env) => assert!(env.rank < env.world_size),
            Err(err) => assert!(!err.to_string().is_empty()),
        }
    }
}
