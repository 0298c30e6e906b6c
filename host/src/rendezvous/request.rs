//! Step 1 of the rendezvous: the [`RendezvousRequest`] every rank
//! publishes (device, host, process, the settings that must agree), and
//! [`exchange_requests`], which all-gathers them through the store.

use std::sync::Arc;

use cudarc::driver::CudaContext;
use intranode_store::{Store, StoreExchange};
use serde::{Deserialize, Serialize};

use crate::config::{CommConfig, DEBUG_ENV, DebugLevel, PushShape};
use crate::driver_ext;
use crate::error::{DriverContext, Error, Result};
use crate::symm_mem::Backend;
use crate::topology::PciAddress;

/// Version of [`RendezvousRequest`] and of the rendezvous sequence; ranks
/// of different versions refuse each other.
pub const PROTOCOL_VERSION: u32 = 4;

/// The first failing rank of an all-gathered list of requests, and why.
pub(super) fn first_failed_request(
    requests: &[std::result::Result<RendezvousRequest, String>],
) -> Option<(usize, &str)> {
    requests
        .iter()
        .enumerate()
        .find_map(|(r, q)| q.as_ref().err().map(|e| (r, e.as_str())))
}

/// Step 1 of `IntraNodeComm::rendezvous`, the part that needs no GPU:
/// all-gathers every rank's request (or why it could not make one,
/// `published`) through `store` and returns them, index = rank.
///
/// A rank that never publishes (dead, hung) makes the others fail after
/// the store's timeout with [`Error::Store`] whose source names it
/// ([`intranode_store::StoreError::MissingRanks`]); a rank that published a
/// failure makes them fail with [`Error::PeerFailed`] naming it.
pub fn exchange_requests(
    store: &dyn Store,
    exchange: &mut StoreExchange,
    rank: usize,
    world: usize,
    published: &std::result::Result<RendezvousRequest, String>,
) -> Result<Vec<RendezvousRequest>> {
    let requests = exchange
        .all_gather(store, rank, world, published)
        .map_err(|source| Error::Store {
            op: "all-gather of rendezvous requests",
            rank,
            source,
        })?;
    if let Some((r, reason)) = first_failed_request(&requests) {
        return Err(Error::PeerFailed {
            rank: r,
            phase: "rendezvous request",
            reason: reason.to_owned(),
        });
    }
    Ok(requests.into_iter().flatten().collect())
}

/// What one rank tells the others at rendezvous.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RendezvousRequest {
    /// [`PROTOCOL_VERSION`] of the sender.
    pub protocol_version: u32,
    /// Host name of the sender's machine.
    pub hostname: String,
    /// The sender's rank.
    pub rank: usize,
    /// The world size the sender expects.
    pub world: usize,
    /// CUDA ordinal of the sender's device, in the sender's process.
    pub device: usize,
    /// PCI address of the device (`0000:18:00.0`), the same in every
    /// process.
    pub pci_bus_id: String,
    /// The device's UUID.
    pub uuid: [u8; 16],
    /// The sender's process id.
    pub pid: u32,
    /// Bytes of symmetric buffer the sender asks for.
    pub buffer_bytes: usize,
    /// The symmetric-memory backend the sender will use.
    pub backend: Backend,
    /// The sender's `INTRANODE_DEBUG` level.
    pub debug: DebugLevel,
    /// The sender's push-form launch shape (`config::PUSH_LAUNCH_ENV`):
    /// its kernels meet per block and lay their rings out from it, so
    /// ranks that differ would wait for each other's missing blocks or
    /// read each other's chunks at the wrong places.
    pub push_shape: PushShape,
    /// SMs of the device as the sender's context sees them (under MPS
    /// with an active-thread percentage, its share): launch shapes spread
    /// over the fewest any rank sees (NOTE [co-residency] in
    /// `intra/residency.rs`).
    pub sms: usize,
}

impl RendezvousRequest {
    /// This process's request for the device of `ctx`.
    pub fn local(
        ctx: &Arc<CudaContext>,
        rank: usize,
        world: usize,
        config: &CommConfig,
    ) -> Result<Self> {
        let device = ctx.ordinal();
        crate::error::bind(ctx, Some(device))?;
        // SAFETY: the driver is initialised (the context exists) and
        // `cu_device` is its valid device handle.
        let pci_bus_id = unsafe { driver_ext::device_get_pci_bus_id(ctx.cu_device()) }
            .ctx("cuDeviceGetPCIBusId", Some(device))?;
        let uuid = ctx
            .uuid()
            .ctx("cuDeviceGetUuid", Some(device))?
            .bytes
            .map(|c| c as u8);
        let sms = super::multiprocessors(ctx)?;
        Ok(Self {
            protocol_version: PROTOCOL_VERSION,
            hostname: hostname(),
            rank,
            world,
            device,
            pci_bus_id,
            uuid,
            pid: std::process::id(),
            buffer_bytes: config.buffer_bytes,
            backend: config.backend,
            debug: config.debug,
            push_shape: config.push_shape.for_sms(sms),
            sms,
        })
    }

    /// The device's PCI address, when `pci_bus_id` parses as one.
    pub fn pci_address(&self) -> Option<PciAddress> {
        PciAddress::parse(&self.pci_bus_id)
    }

    /// Whether `self` and `other` name the same GPU (same UUID, or same
    /// PCI address).
    pub fn same_device(&self, other: &Self) -> bool {
        let same_uuid = self.uuid != [0; 16] && self.uuid == other.uuid;
        let same_pci = match (self.pci_address(), other.pci_address()) {
            (Some(a), Some(b)) => a == b,
            _ => {
                !self.pci_bus_id.is_empty()
                    && self.pci_bus_id.eq_ignore_ascii_case(&other.pci_bus_id)
            }
        };
        same_uuid || same_pci
    }

    /// `device N (pci P)`, for messages.
    pub(crate) fn device_label(&self) -> String {
        format!("device {} (pci {})", self.device, self.pci_bus_id)
    }
}

/// Why the ranks that sent `requests` cannot work together, if they
/// disagree on the push form's launch shape (`config::PUSH_LAUNCH_ENV`):
/// a failure on every rank alike, as [`debug_level_mismatch`].
pub fn push_shape_mismatch(requests: &[RendezvousRequest]) -> Option<String> {
    let first = requests.first()?;
    let other = requests.iter().find(|r| r.push_shape != first.push_shape)?;
    Some(format!(
        "{} differs between ranks: rank {} (host {}) runs with {:?}, rank {} with {:?}; set it alike on every rank",
        crate::config::PUSH_LAUNCH_ENV,
        other.rank,
        other.hostname,
        other.push_shape,
        first.rank,
        first.push_shape
    ))
}

/// This machine's host name (`gethostname`), or `unknown-host`.
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown-host".to_owned())
}

/// Why the ranks that sent `requests` cannot work together at all, if
/// they disagree on `INTRANODE_DEBUG`: a rank that checks every call would wait
/// in the store for fingerprints its peers never publish (until the store
/// timeout, minutes), on the fast path and on NCCL alike. So this is a
/// failure on every rank, not a reason to fall back.
pub fn debug_level_mismatch(requests: &[RendezvousRequest]) -> Option<String> {
    let first = requests.first()?;
    let other = requests.iter().find(|r| r.debug != first.debug)?;
    Some(format!(
        "{DEBUG_ENV} differs between ranks: rank {} (host {}) runs with {:?}, rank {} with {:?}; set it alike on every rank",
        other.rank, other.hostname, other.debug, first.rank, first.debug
    ))
}
