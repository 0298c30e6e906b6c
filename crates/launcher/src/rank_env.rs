//! The environment each rank starts with.
//!
// NOTE [foreign rank variables] is the paragraph below.
//! `intranode_dist_env` reads the rank from torchrun, Open MPI, Slurm and PMI
//! variables and reports an error when two of them disagree. A launcher
//! started inside `srun` or `mpirun` inherits that launcher's variables
//! (`SLURM_PROCID=0`, ...), which would contradict the `RANK` we set, so
//! [`foreign_rank_vars`] are removed from every rank's environment. Both lists
//! come from `intranode_dist_env`, so what we set and remove is what the ranks
//! read.

use intranode_dist_env::store_protocol::STORE_PROTOCOL;
use intranode_dist_env::{EnvSource, StoreProtocol, vars};

use crate::cli::JobConfig;

/// Rank variables of other launchers (every source but torchrun's, whose
/// names we set), removed from every rank's environment.
pub fn foreign_rank_vars() -> impl Iterator<Item = &'static str> {
    EnvSource::ALL
        .into_iter()
        .filter(|&source| source != EnvSource::Torchrun)
        .flat_map(EnvSource::var_names)
}

/// Name of the variable carrying the store token, shared with the store crate.
pub const TOKEN_ENV: &str = intranode_store::TOKEN_ENV;

/// The variables set for `rank` (all ranks run on this one node, so the
/// local rank is the rank and the local world is the world).
pub fn rank_vars(
    job: &JobConfig,
    rank: usize,
    master_port: u16,
    token: &str,
) -> Vec<(&'static str, String)> {
    let device = job.devices.get(rank).copied().unwrap_or(rank);
    vec![
        (vars::RANK, rank.to_string()),
        (vars::WORLD_SIZE, job.nproc.to_string()),
        (vars::LOCAL_RANK, rank.to_string()),
        (vars::LOCAL_WORLD_SIZE, job.nproc.to_string()),
        (vars::MASTER_ADDR, job.master_addr.clone()),
        (vars::MASTER_PORT, master_port.to_string()),
        (TOKEN_ENV, token.to_owned()),
        // Our store speaks intranode's protocol, whatever torchrun
        // variables an outer launcher left behind (NOTE [store protocol
        // decision] in intranode_dist_env).
        (STORE_PROTOCOL, StoreProtocol::Intranode.to_string()),
        (vars::DEVICE, device.to_string()),
        // NOTE [no NVLink multicast]: multicast stays off in NCCL, PyTorch
        // and NVSHMEM on every machine we run on: a program that uses it can
        // put a shared host's GPUs out of service for a day or more. Set
        // here unconditionally so a rank cannot inherit a different value.
        ("NCCL_NVLS_ENABLE", "0".to_owned()),
        ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1".to_owned()),
        ("NVSHMEM_DISABLE_NVLS", "1".to_owned()),
    ]
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::net::{IpAddr, Ipv4Addr};
    use std::time::Duration;

    use super::*;

    fn job(nproc: usize, devices: Vec<usize>) -> JobConfig {
        JobConfig {
            nproc,
            devices,
            master_addr: "10.0.0.7".into(),
            bind_ip: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            master_port: 0,
            timeout: None,
            grace: Duration::from_secs(5),
            failure_wait: Duration::ZERO,
            command: vec!["true".into()],
        }
    }

    #[test]
    fn torchrun_variables() {
        let vars: HashMap<_, _> = rank_vars(&job(4, vec![3, 2, 1, 0]), 1, 4242, "abc")
            .into_iter()
            .collect();
        assert_eq!(vars["RANK"], "1");
        assert_eq!(vars["WORLD_SIZE"], "4");
        assert_eq!(vars["LOCAL_RANK"], "1");
        assert_eq!(vars["LOCAL_WORLD_SIZE"], "4");
        assert_eq!(vars["MASTER_ADDR"], "10.0.0.7");
        assert_eq!(vars["MASTER_PORT"], "4242");
        assert_eq!(vars[TOKEN_ENV], "abc");
        assert_eq!(vars["INTRANODE_STORE_PROTOCOL"], "intranode");
        assert_eq!(vars["INTRANODE_DEVICE"], "2");
        assert_eq!(vars["NCCL_NVLS_ENABLE"], "0");
        assert_eq!(vars["TORCH_SYMM_MEM_DISABLE_MULTICAST"], "1");
        assert_eq!(vars["NVSHMEM_DISABLE_NVLS"], "1");
    }

    #[test]
    fn set_and_removed_variables_do_not_overlap() {
        for (name, _) in rank_vars(&job(1, vec![0]), 0, 1, "t") {
            assert!(
                !foreign_rank_vars().any(|foreign| foreign == name),
                "{name}"
            );
        }
    }

    #[test]
    fn foreign_variables_are_the_other_launchers_rank_variables() {
        let mut removed: Vec<_> = foreign_rank_vars().collect();
        removed.sort_unstable();
        let mut expected = vec![
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_SIZE",
            "OMPI_COMM_WORLD_LOCAL_RANK",
            "OMPI_COMM_WORLD_LOCAL_SIZE",
            "SLURM_PROCID",
            "SLURM_NTASKS",
            "SLURM_LOCALID",
            "SLURM_NTASKS_PER_NODE",
            "PMI_RANK",
            "PMI_SIZE",
        ];
        expected.sort_unstable();
        assert_eq!(removed, expected);
    }
}
