//! The host-mapped error word kernels write when a wait on a peer runs out
//! (NOTE [signal pad layout] in `kernels-gpu/src/layout.rs`), and the
//! bound of those waits.

use std::ffi::c_void;
use std::sync::Arc;
use std::time::Duration;

use cudarc::driver::CudaContext;
use intranode_kernels_gpu::layout::{
    ERR_NONE, ErrorWord, SLOT_EXPLICIT, SLOT_LAMPORT, SLOT_MID, SLOT_PUSH, SLOT_START, form_name,
};

use crate::driver_ext;
use crate::error::{DriverContext, Error, Result};

/// One [`ErrorWord`] in page-locked host memory mapped into the device.
#[derive(Debug)]
pub struct HostErrorWord {
    ctx: Arc<CudaContext>,
    host: *mut c_void,
    device: u64,
    /// The bound the waits ran with, for the error's text.
    bound: Duration,
}

// SAFETY: the pointer is page-locked memory owned by this value alone; it
// is only read with volatile loads and freed once in Drop.
unsafe impl Send for HostErrorWord {}
// SAFETY: as above; shared access is read-only on the host.
unsafe impl Sync for HostErrorWord {}

impl HostErrorWord {
    /// Allocates a zeroed word mapped into `ctx`'s device, for waits
    /// bounded by `bound`.
    pub fn new(ctx: &Arc<CudaContext>, bound: Duration) -> Result<Self> {
        let dev = Some(ctx.ordinal());
        crate::error::bind(ctx, dev)?;
        let bytes = std::mem::size_of::<ErrorWord>();
        // SAFETY: the context is current.
        let host =
            unsafe { driver_ext::mem_host_alloc_mapped(bytes) }.ctx("cuMemHostAlloc", dev)?;
        // SAFETY: `host` holds `bytes` bytes, just allocated.
        unsafe { std::ptr::write_bytes(host as *mut u8, 0, bytes) };
        // SAFETY: `host` is mapped host memory from mem_host_alloc_mapped.
        let device = match unsafe { driver_ext::mem_host_get_device_pointer(host) } {
            Ok(d) => d,
            Err(e) => {
                // SAFETY: allocated above, never shared.
                let _ = unsafe { driver_ext::mem_free_host(host) };
                return Err(Error::Driver {
                    op: "cuMemHostGetDevicePointer",
                    device: dev,
                    source: e,
                });
            }
        };
        Ok(HostErrorWord {
            ctx: ctx.clone(),
            host,
            device,
            bound,
        })
    }

    /// The address kernels write to.
    pub fn device_ptr(&self) -> u64 {
        self.device
    }

    /// The word as the GPU last wrote it (no synchronization needed: the
    /// kernel writes `code` last, with release).
    pub fn read(&self) -> ErrorWord {
        // SAFETY: `host` is a live, aligned ErrorWord; volatile because the
        // GPU writes it behind the compiler's back.
        unsafe { std::ptr::read_volatile(self.host as *const ErrorWord) }
    }

    /// `Ok` while no kernel reported a failed wait; afterwards an error
    /// naming the waiting rank, the peer and where.
    pub fn check(&self) -> Result<()> {
        let w = self.read();
        if w.code == ERR_NONE {
            return Ok(());
        }
        Err(Error::PeerTimeout {
            rank: w.rank as usize,
            peer: w.peer as usize,
            block: w.block,
            slot: w.slot,
            form: form_name(w.form),
            phase: phase_name(w.slot),
            bound_ms: u64::try_from(self.bound.as_millis()).unwrap_or(u64::MAX),
        })
    }
}

/// Where a wait of barrier slot `slot` stood, for the error's text.
fn phase_name(slot: u32) -> &'static str {
    match slot as usize {
        SLOT_START => {
            "at the barrier after every rank copied its input in (push: at the start of the call)"
        }
        SLOT_MID => "at the barrier after the reduce-scatter (or HCM's relay)",
        // Slot 2 is also the one-shot's end barrier on a symmetric input
        // (`layout::SLOT_END`); the form in the report tells them apart.
        SLOT_LAMPORT => "for a peer's data (one-shot on a symmetric input: at the end barrier)",
        SLOT_PUSH => "for a peer's pushed chunk or its credit (push form)",
        SLOT_EXPLICIT => "at an explicit barrier",
        _ => "at an unknown barrier slot",
    }
}

impl Drop for HostErrorWord {
    fn drop(&mut self) {
        // NOTE [drop errors] in `error.rs`: kernels that could still write
        // the word are waited for first, whatever error is pending.
        if crate::error::sync_for_drop(&self.ctx, "cuCtxSetCurrent before cuMemFreeHost") {
            // SAFETY: allocated in `new`, freed once; the context is idle.
            if let Err(e) = unsafe { driver_ext::mem_free_host(self.host) } {
                crate::error::record_drop_error(&self.ctx, "cuMemFreeHost", e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_slot_names_its_phase() {
        let slots = [SLOT_START, SLOT_MID, SLOT_LAMPORT, SLOT_EXPLICIT];
        for (i, a) in slots.iter().enumerate() {
            assert!(!phase_name(*a as u32).contains("unknown"));
            for b in &slots[i + 1..] {
                assert_ne!(phase_name(*a as u32), phase_name(*b as u32));
            }
        }
        assert!(phase_name(99).contains("unknown"));
    }

    #[test]
    fn timeout_text_names_rank_peer_form_phase_and_bound() {
        let e = Error::PeerTimeout {
            rank: 0,
            peer: 1,
            block: 3,
            slot: SLOT_LAMPORT as u32,
            form: form_name(intranode_kernels_gpu::layout::FORM_LAMPORT),
            phase: phase_name(SLOT_LAMPORT as u32),
            bound_ms: 2000,
        };
        let text = e.to_string();
        for want in [
            "rank 0",
            "peer rank 1",
            "lamport",
            "2000 ms",
            "peer's data",
            "build a new one",
        ] {
            assert!(text.contains(want), "{want:?} missing from {text}");
        }
    }
}
