//! [`connect_env`]: the store of this rank's job, in the protocol its
//! launcher's store speaks.

use std::sync::Arc;

use intranode_dist_env::{DistEnv, StoreChoice, StoreProtocol};

use crate::client::{ClientConfig, TcpStore};
use crate::error::StoreError;
use crate::prefix::PrefixStore;
use crate::store::Store;
use crate::torch::TorchStore;
use crate::vars::TOKEN_ENV;

// NOTE [store protocol decision] in `intranode_dist_env`.
/// Joins the rendezvous store of this rank's job: `MASTER_ADDR:MASTER_PORT`,
/// speaking the protocol [`DistEnv::store`] chose: [`TcpStore`] under
/// `intranode-run`, [`TorchStore`] under torchrun. Timeouts come from
/// [`crate::STORE_TIMEOUT_ENV`], the token from [`crate::TOKEN_ENV`]
/// ([`ClientConfig::try_from_env`]).
///
/// The result goes to `intranode::Communicator::new` as it is.
pub fn connect_env(env: &DistEnv) -> Result<Arc<dyn Store>, StoreError> {
    let addr = env.store_addr().map_err(|e| StoreError::Env {
        source: Box::new(e),
    })?;
    connect(&addr, &env.store, ClientConfig::try_from_env()?)
}

/// Joins the store at `addr` as `choice` says (see [`connect_env`]).
pub fn connect(
    addr: &str,
    choice: &StoreChoice,
    config: ClientConfig,
) -> Result<Arc<dyn Store>, StoreError> {
    tracing::info!(
        addr,
        protocol = %choice.protocol,
        because = choice.reason,
        "joining the rendezvous store"
    );
    let store: Arc<dyn Store> = match choice.protocol {
        StoreProtocol::Intranode => Arc::new(TcpStore::connect(addr, config)?),
        StoreProtocol::Torch => {
            if config.token.is_some() {
                tracing::warn!(
                    addr,
                    "{} is set but PyTorch's TCPStore takes no token; not sent",
                    TOKEN_ENV
                );
            }
            Arc::new(TorchStore::connect(addr, config)?)
        }
    };
    Ok(match &choice.key_prefix {
        Some(prefix) => Arc::new(PrefixStore::new(prefix.clone(), store)),
        None => store,
    })
}
