//! Which rendezvous store a rank talks to, decided from its environment.
//!
// NOTE [store protocol decision] is the rest of these module docs.
//! This is the one place that decides which wire protocol the store at
//! `MASTER_ADDR:MASTER_PORT` speaks, so that every program (examples, suite,
//! benchmark, applications through `intranode_store::connect_env`) agrees. In
//! order:
//!
//! 1. `INTRANODE_STORE_PROTOCOL=intranode|torch` says it outright
//!    (`intranode-run` sets `intranode` in every rank, so a torchrun
//!    variable leaking from an outer launcher cannot change its ranks'
//!    choice).
//! 2. Under torchrun (its elastic agent sets `TORCHELASTIC_RUN_ID` and
//!    `GROUP_RANK` in every worker) the store is the agent's PyTorch
//!    `TCPStore`, which workers join as clients. Keys then go under
//!    `/worker/attempt_<TORCHELASTIC_RESTART_COUNT>/`, as PyTorch's own
//!    workers do, so a restarted job never reads the keys of the attempt
//!    before it. When the agent does not share its store
//!    (`TORCHELASTIC_USE_AGENT_STORE=False`), PyTorch expects rank 0 to
//!    host a `TCPStore` of its own, which we do not do: that is an error
//!    saying so, not a hang.
//! 3. Otherwise the store speaks intranode's own protocol (hosted by
//!    `intranode-run`, or by the application through `TcpStoreServer`).

use std::fmt;

use crate::error::DistEnvError;

// NOTE [store protocol decision].
/// `INTRANODE_STORE_PROTOCOL`: `intranode` or `torch`, overriding the
/// detection (rule 1 of the [module docs](self)).
pub const STORE_PROTOCOL: &str = "INTRANODE_STORE_PROTOCOL";
/// `TORCHELASTIC_RUN_ID`: set by torchrun's elastic agent in every worker.
pub const TORCHELASTIC_RUN_ID: &str = "TORCHELASTIC_RUN_ID";
/// `GROUP_RANK`: the node's rank, set by torchrun's elastic agent.
pub const GROUP_RANK: &str = "GROUP_RANK";
/// `TORCHELASTIC_RESTART_COUNT`: how many times torchrun restarted the
/// workers; PyTorch's workers put their keys under
/// `/worker/attempt_<count>/`.
pub const TORCHELASTIC_RESTART_COUNT: &str = "TORCHELASTIC_RESTART_COUNT";
/// `TORCHELASTIC_USE_AGENT_STORE`: `True` when workers join the agent's
/// store as clients, `False` when rank 0 must host one.
pub const TORCHELASTIC_USE_AGENT_STORE: &str = "TORCHELASTIC_USE_AGENT_STORE";

/// The wire protocol of the rendezvous store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreProtocol {
    /// intranode's own versioned protocol (`intranode_store::TcpStore`,
    /// hosted by `intranode-run`).
    Intranode,
    /// PyTorch's `TCPStore` protocol (`intranode_store::TorchStore`), as
    /// hosted by torchrun's agent.
    Torch,
}

impl fmt::Display for StoreProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Intranode => "intranode",
            Self::Torch => "torch",
        })
    }
}

// NOTE [store protocol decision].
/// Which store to join and why: the outcome of the rules in the [module
/// docs](self).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreChoice {
    /// The protocol the store speaks.
    pub protocol: StoreProtocol,
    /// Prefix for every key this rank writes (`None`: keys as they are).
    pub key_prefix: Option<String>,
    /// Why: the variable that decided, for logs and error messages.
    pub reason: &'static str,
}

impl StoreChoice {
    // NOTE [store protocol decision].
    /// Applies the rules of the [module docs](self) to the variables `var`
    /// returns.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self, DistEnvError> {
        let under_torchrun = var(TORCHELASTIC_RUN_ID).is_some() || var(GROUP_RANK).is_some();
        let (protocol, reason) = match var(STORE_PROTOCOL) {
            Some(text) => match text.trim().to_ascii_lowercase().as_str() {
                "intranode" => (StoreProtocol::Intranode, STORE_PROTOCOL),
                "torch" => (StoreProtocol::Torch, STORE_PROTOCOL),
                _ => {
                    return Err(DistEnvError::Parse {
                        var: STORE_PROTOCOL,
                        value: text,
                        what: "store protocol (intranode or torch)",
                    });
                }
            },
            None if under_torchrun => (StoreProtocol::Torch, TORCHELASTIC_RUN_ID),
            None => (StoreProtocol::Intranode, "no torchrun variables"),
        };
        if protocol == StoreProtocol::Intranode || !under_torchrun {
            return Ok(Self {
                protocol,
                key_prefix: None,
                reason,
            });
        }
        if let Some(text) = var(TORCHELASTIC_USE_AGENT_STORE)
            && matches!(text.trim().to_ascii_lowercase().as_str(), "false" | "0")
        {
            return Err(DistEnvError::NoAgentStore { value: text });
        }
        let key_prefix = match var(TORCHELASTIC_RESTART_COUNT) {
            Some(text) => {
                let attempt =
                    crate::parse::parse_usize(TORCHELASTIC_RESTART_COUNT, &text, "restart count")?;
                Some(format!("/worker/attempt_{attempt}"))
            }
            None => None,
        };
        Ok(Self {
            protocol,
            key_prefix,
            reason,
        })
    }
}
