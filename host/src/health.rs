//! The host-mapped error word kernels write when a wait on a peer runs out
//! (NOTE [signal pad layout] in `kernels-gpu/src/layout.rs`), and the
//! bound of those waits.

use std::ffi::c_void;
use std::sync::Arc;
use std::time::Duration;

use cudarc::driver::CudaContext;
use intranode_kernels_gpu::layout::{
    ERR_NONE, ErrorWord, FORM_ALL_GATHER, FORM_BARRIER, FORM_BROADCAST, FORM_FUSED_NORM, FORM_HCM,
    FORM_LAMPORT, FORM_LAMPORT_TWO_SHOT, FORM_ONE_SHOT, FORM_PUSH, FORM_REDUCE_SCATTER,
    FORM_TWO_SHOT, SLOT_END, SLOT_EXPLICIT, SLOT_LAMPORT, SLOT_MID, SLOT_PUSH, SLOT_START,
    form_name,
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
            phase: phase_name(w.form, w.slot),
            bound_ms: u64::try_from(self.bound.as_millis()).unwrap_or(u64::MAX),
        })
    }
}

/// Where a wait of collective `form` on barrier slot `slot` stood, for the
/// error's text: the pair, not the slot alone, since forms share slots
/// (slot 0 is the two-shot's barrier after the copy-in and the push
/// form's at the start of a call; slot 2 the Lamport forms' data and the
/// one-shot's end barrier), and the text must name only the form that
/// ran. The slots each form waits on are those of its kernels in
/// `kernels-gpu` (`all_reduce.rs`, `push.rs`, `broadcast.rs`,
/// `lamport.rs`, `fused_norm.rs`, `sync.rs`).
fn phase_name(form: u32, slot: u32) -> &'static str {
    let slot = slot as usize;
    match form {
        FORM_ONE_SHOT | FORM_TWO_SHOT if slot == SLOT_START => {
            "at the barrier after every rank copied its input in"
        }
        FORM_ONE_SHOT if slot == SLOT_END => {
            "at the end barrier (its symmetric input read by every peer)"
        }
        FORM_TWO_SHOT if slot == SLOT_MID => "at the barrier after the reduce-scatter",
        FORM_HCM if slot == SLOT_START => {
            "at the barrier with its group after every rank copied its input in"
        }
        FORM_HCM if slot == SLOT_MID => "at the barrier with its relay",
        FORM_PUSH | FORM_REDUCE_SCATTER | FORM_ALL_GATHER if slot == SLOT_START => {
            "at the barrier at the start of the call"
        }
        FORM_PUSH | FORM_REDUCE_SCATTER | FORM_ALL_GATHER if slot == SLOT_PUSH => {
            "for a peer's pushed chunk or its credit"
        }
        FORM_BROADCAST if slot == SLOT_START => "at the barrier after the root staged its chunk",
        FORM_LAMPORT
        | FORM_LAMPORT_TWO_SHOT
        | FORM_REDUCE_SCATTER
        | FORM_ALL_GATHER
        | FORM_FUSED_NORM
            if slot == SLOT_LAMPORT =>
        {
            "for a peer's data"
        }
        FORM_BARRIER if slot == SLOT_EXPLICIT => "at an explicit barrier",
        _ => "at a barrier slot this collective does not use (a corrupted report)",
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
    use intranode_kernels_gpu::layout::FORMS;

    /// Every (form, slot) a kernel reports has its own text, which names
    /// no other form; a pair no kernel reports says so.
    #[test]
    fn every_form_and_slot_names_its_phase() {
        let pairs = [
            (FORM_ONE_SHOT, SLOT_START),
            (FORM_ONE_SHOT, SLOT_END),
            (FORM_TWO_SHOT, SLOT_START),
            (FORM_TWO_SHOT, SLOT_MID),
            (FORM_HCM, SLOT_START),
            (FORM_HCM, SLOT_MID),
            (FORM_PUSH, SLOT_START),
            (FORM_PUSH, SLOT_PUSH),
            (FORM_BROADCAST, SLOT_START),
            (FORM_LAMPORT, SLOT_LAMPORT),
            (FORM_LAMPORT_TWO_SHOT, SLOT_LAMPORT),
            (FORM_REDUCE_SCATTER, SLOT_LAMPORT),
            (FORM_ALL_GATHER, SLOT_LAMPORT),
            (FORM_REDUCE_SCATTER, SLOT_START),
            (FORM_REDUCE_SCATTER, SLOT_PUSH),
            (FORM_ALL_GATHER, SLOT_START),
            (FORM_ALL_GATHER, SLOT_PUSH),
            (FORM_FUSED_NORM, SLOT_LAMPORT),
            (FORM_BARRIER, SLOT_EXPLICIT),
        ];
        let forms = FORMS;
        for (form, slot) in pairs {
            let text = phase_name(form, slot as u32);
            assert!(!text.contains("does not use"), "{form} {slot}: {text}");
            // The text names no form: the report's form is the one that ran.
            for other in forms {
                let name = form_name(other);
                assert!(
                    !text.contains(&format!("{name}:")) && !text.contains(&format!("({name}")),
                    "{form} {slot}: {text:?} names {name}"
                );
            }
        }
        // The message: the two-shot's slot 0 says nothing of push.
        let two_shot = phase_name(FORM_TWO_SHOT, SLOT_START as u32);
        assert!(!two_shot.contains("push") && !two_shot.contains("start of the call"));
        let push = phase_name(FORM_PUSH, SLOT_START as u32);
        assert!(!push.contains("copied its input"));
        assert_ne!(
            phase_name(FORM_LAMPORT, SLOT_LAMPORT as u32),
            phase_name(FORM_ONE_SHOT, SLOT_END as u32)
        );
        assert!(phase_name(FORM_TWO_SHOT, SLOT_PUSH as u32).contains("does not use"));
        assert!(phase_name(99, SLOT_START as u32).contains("does not use"));
    }

    #[test]
    fn timeout_text_names_rank_peer_form_phase_and_bound() {
        let e = Error::PeerTimeout {
            rank: 0,
            peer: 1,
            block: 3,
            slot: SLOT_LAMPORT as u32,
            form: form_name(intranode_kernels_gpu::layout::FORM_LAMPORT),
            phase: phase_name(
                intranode_kernels_gpu::layout::FORM_LAMPORT,
                SLOT_LAMPORT as u32,
            ),
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
