//! The NCCL fallback: a `cudarc::nccl::Comm` built through our store (the
//! 128-byte unique id broadcast with bincode), or the reason there is none.

use std::sync::Arc;

use cudarc::driver::CudaStream;
use cudarc::nccl::result::NcclError;
use cudarc::nccl::{Comm, Id};
use intranode_store::{Store, StoreExchange};

use crate::error::{Error, Result};

/// Whether `libnccl` can be loaded on this machine (linked by the
/// application without the `dynamic-loading` feature).
pub fn nccl_available() -> bool {
    #[cfg(feature = "dynamic-loading")]
    // SAFETY: only tries to dlopen the library by name.
    let present = unsafe { cudarc::nccl::sys::is_culib_present() };
    #[cfg(not(feature = "dynamic-loading"))]
    let present = true;
    present
}

/// Creates the NCCL communicator of `rank` on `stream`. Every rank calls it
/// at the same point (it is a collective on the store); `Err` on every rank
/// when NCCL cannot be loaded on any of them, so none waits forever.
pub fn nccl_comm(
    stream: &Arc<CudaStream>,
    store: &dyn Store,
    exchange: &mut StoreExchange,
    rank: usize,
    world: usize,
) -> Result<Comm> {
    let here = nccl_available();
    let everywhere = exchange
        .all_gather(store, rank, world, &here)
        .map_err(|e| {
            Error::NcclUnavailable(format!("rank {rank}: exchanging nccl availability: {e}"))
        })?;
    if let Some(missing) = everywhere.iter().position(|ok| !ok) {
        return Err(Error::NcclUnavailable(format!(
            "libnccl.so.2 could not be loaded on rank {missing}"
        )));
    }
    let id_bytes: Option<Vec<u8>> = if rank == 0 {
        let id = Id::new().map_err(|e| nccl_error(rank, "ncclGetUniqueId", &e))?;
        Some(id.internal().iter().map(|&c| c as u8).collect())
    } else {
        None
    };
    let id_bytes: Vec<u8> = exchange
        .broadcast(store, rank, world, 0, id_bytes.as_ref())
        .map_err(|e| Error::NcclUnavailable(format!("rank {rank}: receiving the nccl id: {e}")))?;
    let mut internal = [0 as std::ffi::c_char; 128];
    if id_bytes.len() != internal.len() {
        return Err(Error::Nccl {
            op: "ncclCommInitRank",
            detail: format!("unique id of {} bytes, want 128", id_bytes.len()),
        });
    }
    for (dst, src) in internal.iter_mut().zip(&id_bytes) {
        *dst = *src as std::ffi::c_char;
    }
    Comm::from_rank(stream.clone(), rank, world, Id::uninit(internal))
        .map_err(|e| nccl_error(rank, "ncclCommInitRank", &e))
}

/// The crate's error for a failed NCCL call, every call's the same way
/// (`NcclError`'s own `Debug` says only "NcclError": the code is in its
/// field).
pub(crate) fn nccl_error(rank: usize, op: &'static str, e: &NcclError) -> Error {
    Error::Nccl {
        op,
        detail: format!("rank {rank}: {:?}", e.0),
    }
}
