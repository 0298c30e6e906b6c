//! Unit tests of the reading and checking, on synthetic variable maps.

use std::collections::HashMap;

use crate::*;

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
            store: StoreChoice {
                protocol: StoreProtocol::Intranode,
                key_prefix: None,
                reason: "no torchrun variables",
            },
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
    let err = env.store_addr().unwrap_err().to_string();
    assert!(
        err.starts_with("no store address: MASTER_PORT is not set"),
        "{err}"
    );
    let env = read(&[("RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_PORT", "1")]).unwrap();
    let err = env.store_addr().unwrap_err().to_string();
    assert!(
        err.starts_with("no store address: MASTER_ADDR is not set"),
        "{err}"
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

#[test]
fn var_names_are_what_the_reader_reads() {
    let torchrun: Vec<_> = EnvSource::Torchrun.var_names().collect();
    assert_eq!(
        torchrun,
        [
            vars::RANK,
            vars::WORLD_SIZE,
            vars::LOCAL_RANK,
            vars::LOCAL_WORLD_SIZE
        ]
    );
    assert_eq!(
        EnvSource::Pmi.var_names().collect::<Vec<_>>(),
        ["PMI_RANK", "PMI_SIZE"]
    );
    // Each source's variables, set alone and consistently, are read as
    // that source: the names the launcher shares are the names read here.
    for source in EnvSource::ALL {
        let names: Vec<_> = source.var_names().collect();
        let values = ["1", "2", "1", "2"];
        let vars: Vec<(&str, &str)> = names.iter().copied().zip(values).collect();
        let env = read(&vars).unwrap();
        assert_eq!(env.source, source, "{names:?}");
        assert_eq!((env.rank, env.world_size), (1, 2), "{names:?}");
    }
}

/// torchrun's worker variables as PyTorch 2.x's elastic agent sets them.
const TORCHRUN_WORKER: &[(&str, &str)] = &[
    ("RANK", "1"),
    ("WORLD_SIZE", "2"),
    ("LOCAL_RANK", "1"),
    ("LOCAL_WORLD_SIZE", "2"),
    ("GROUP_RANK", "0"),
    ("TORCHELASTIC_RUN_ID", "none"),
    ("TORCHELASTIC_RESTART_COUNT", "0"),
    ("TORCHELASTIC_USE_AGENT_STORE", "True"),
    ("MASTER_ADDR", "127.0.0.1"),
    ("MASTER_PORT", "29500"),
];

#[test]
fn torchrun_workers_join_the_agents_torch_store() {
    let env = read(TORCHRUN_WORKER).unwrap();
    assert_eq!(env.store.protocol, StoreProtocol::Torch);
    assert_eq!(env.store.key_prefix.as_deref(), Some("/worker/attempt_0"));
    assert_eq!(env.store.reason, "TORCHELASTIC_RUN_ID");
    // A restarted attempt gets keys of its own.
    let mut vars = TORCHRUN_WORKER.to_vec();
    vars.retain(|(name, _)| *name != "TORCHELASTIC_RESTART_COUNT");
    vars.push(("TORCHELASTIC_RESTART_COUNT", "3"));
    let env = read(&vars).unwrap();
    assert_eq!(env.store.key_prefix.as_deref(), Some("/worker/attempt_3"));
    // GROUP_RANK alone is enough to recognise torchrun.
    let env = read(&[("RANK", "0"), ("WORLD_SIZE", "1"), ("GROUP_RANK", "0")]).unwrap();
    assert_eq!(env.store.protocol, StoreProtocol::Torch);
    assert_eq!(env.store.key_prefix, None);
}

#[test]
fn the_protocol_variable_overrides_detection() {
    let mut vars = TORCHRUN_WORKER.to_vec();
    vars.push(("INTRANODE_STORE_PROTOCOL", "intranode"));
    let env = read(&vars).unwrap();
    assert_eq!(env.store.protocol, StoreProtocol::Intranode);
    assert_eq!(env.store.key_prefix, None);
    assert_eq!(env.store.reason, "INTRANODE_STORE_PROTOCOL");
    // Without torchrun: no attempt prefix, whatever the protocol.
    let env = read(&[
        ("OMPI_COMM_WORLD_RANK", "0"),
        ("OMPI_COMM_WORLD_SIZE", "2"),
        ("INTRANODE_STORE_PROTOCOL", " Torch "),
    ])
    .unwrap();
    assert_eq!(env.store.protocol, StoreProtocol::Torch);
    assert_eq!(env.store.key_prefix, None);
    assert_eq!(env.store.protocol.to_string(), "torch");
    let err = message(&[
        ("RANK", "0"),
        ("WORLD_SIZE", "1"),
        ("INTRANODE_STORE_PROTOCOL", "gloo"),
    ]);
    assert!(
        err.contains("INTRANODE_STORE_PROTOCOL=\"gloo\" is not a valid store protocol"),
        "{err}"
    );
}

#[test]
fn torchrun_without_an_agent_store_is_refused_with_the_reason() {
    let mut vars = TORCHRUN_WORKER.to_vec();
    vars.retain(|(name, _)| *name != "TORCHELASTIC_USE_AGENT_STORE");
    vars.push(("TORCHELASTIC_USE_AGENT_STORE", "False"));
    let err = message(&vars);
    assert!(err.contains("rank 0 to host a PyTorch TCPStore"), "{err}");
    vars.push(("INTRANODE_STORE_PROTOCOL", "intranode"));
    assert_eq!(
        read(&vars).unwrap().store.protocol,
        StoreProtocol::Intranode
    );
    vars.pop();
    vars.retain(|(name, _)| *name != "TORCHELASTIC_RESTART_COUNT");
    vars.retain(|(name, _)| *name != "TORCHELASTIC_USE_AGENT_STORE");
    vars.push(("TORCHELASTIC_RESTART_COUNT", "-1"));
    let err = message(&vars);
    assert!(err.contains("TORCHELASTIC_RESTART_COUNT=\"-1\""), "{err}");
}
