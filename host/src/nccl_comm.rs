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
            "rank {missing}: {}",
            load_failure()
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
        return Err(Error::NcclUnavailable(format!(
            "rank {rank}: the NCCL unique id from rank 0 has {} bytes, want 128",
            id_bytes.len()
        )));
    }
    for (dst, src) in internal.iter_mut().zip(&id_bytes) {
        *dst = *src as std::ffi::c_char;
    }
    Comm::from_rank(stream.clone(), rank, world, Id::uninit(internal))
        .map_err(|e| nccl_error(rank, "ncclCommInitRank", &e))
}

/// The crate's error for a failed NCCL call, every call's the same way
/// (`NcclError`'s own `Debug` says only "NcclError": the code is in its
/// field, which [`NcclCode`](crate::error::NcclCode) keeps).
pub(crate) fn nccl_error(rank: usize, op: &'static str, e: &NcclError) -> Error {
    Error::Nccl {
        op,
        rank,
        code: e.into(),
    }
}

/// The file names cudarc tries for NCCL, in its order, each once. cudarc
/// 0.19 never asks for `libnccl.so.2`, the only name NCCL's runtime
/// packages (`libnccl2`, pip's `nvidia-nccl-cu*`) install: the
/// unversioned `libnccl.so` comes with `libnccl-dev`.
#[cfg(feature = "dynamic-loading")]
pub(crate) fn nccl_file_names() -> Vec<String> {
    let mut names = cudarc::get_lib_name_candidates("nccl");
    let mut seen = std::collections::HashSet::new();
    names.retain(|n| seen.insert(n.clone()));
    names
}

/// Why NCCL did not load and what to do about it, for
/// [`Error::NcclUnavailable`].
pub(crate) fn load_failure() -> String {
    #[cfg(feature = "dynamic-loading")]
    let tried = format!(
        "cudarc found none of {} on the library path",
        nccl_file_names().join(", ")
    );
    #[cfg(not(feature = "dynamic-loading"))]
    let tried = "the application links NCCL itself".to_string();
    format!(
        "NCCL could not be loaded: {tried}. NCCL's runtime packages (libnccl2, \
         pip's nvidia-nccl-cu12/-cu13) install only libnccl.so.2, which cudarc does not \
         try: install libnccl-dev (it adds libnccl.so), or link the runtime under the \
         name cudarc asks for and put that folder on the path, e.g. \
         `ln -s /usr/lib/x86_64-linux-gnu/libnccl.so.2 ~/nccl/libnccl.so` (pip: \
         `$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))')/lib/libnccl.so.2`) \
         and `export LD_LIBRARY_PATH=~/nccl:$LD_LIBRARY_PATH`"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::NcclCode;
    use cudarc::nccl::sys::ncclResult_t;

    #[cfg(feature = "dynamic-loading")]
    #[test]
    fn load_failure_names_the_files_cudarc_tries_and_the_fix() {
        let names = nccl_file_names();
        assert_eq!(names[0], "libnccl.so", "cudarc's first choice");
        assert!(!names.iter().any(|n| n == "libnccl.so.2"));
        let text = load_failure();
        for name in &names {
            assert!(text.contains(name.as_str()), "{name} missing from: {text}");
        }
        assert!(text.contains("libnccl-dev"), "{text}");
        assert!(text.contains("LD_LIBRARY_PATH"), "{text}");
    }

    #[test]
    fn nccl_errors_keep_the_result_code() {
        let e = nccl_error(
            3,
            "ncclAllReduce",
            &NcclError(ncclResult_t::ncclRemoteError),
        );
        assert!(matches!(
            e,
            Error::Nccl {
                op: "ncclAllReduce",
                rank: 3,
                code: NcclCode::RemoteError
            }
        ));
        assert_eq!(
            e.to_string(),
            "nccl ncclAllReduce failed on rank 3: ncclRemoteError (6)"
        );
        for raw in 0..12 {
            assert_eq!(NcclCode::from_raw(raw).raw(), raw);
        }
    }
}
