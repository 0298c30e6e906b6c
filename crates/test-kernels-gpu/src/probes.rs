//! One tiny kernel per function of [`intranode_kernels_gpu::ptx`] that touches memory
//! ordering, so the emitted PTX holds each one in a body of its own: the
//! host test `ptx_scopes` checks that `probe_<name>` contains exactly the
//! instruction `<name>` claims. They are never launched.

use intranode_kernels_gpu::ptx;

/// # Safety
/// Never launched; `p` would have to be a valid global address.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn probe_ld_acquire_sys_u32(p: *mut u32) {
    // SAFETY: see the function's contract.
    unsafe { *p = ptx::ld_acquire_sys_u32(p) }
}

/// # Safety
/// Never launched; `p` would have to be a valid global address.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn probe_ld_relaxed_sys_u32(p: *mut u32) {
    // SAFETY: see the function's contract.
    unsafe { *p = ptx::ld_relaxed_sys_u32(p) }
}

/// # Safety
/// Never launched; `p` would have to be a valid global address.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn probe_st_release_sys_u32(p: *mut u32, v: u32) {
    // SAFETY: see the function's contract.
    unsafe { ptx::st_release_sys_u32(p, v) }
}

/// # Safety
/// Never launched; `p` would have to be a valid global address.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn probe_st_relaxed_sys_u32(p: *mut u32, v: u32) {
    // SAFETY: see the function's contract.
    unsafe { ptx::st_relaxed_sys_u32(p, v) }
}

/// Never launched.
#[unsafe(no_mangle)]
pub extern "ptx-kernel" fn probe_fence_acq_rel_sys() {
    ptx::fence_acq_rel_sys()
}

/// Never launched.
#[unsafe(no_mangle)]
pub extern "ptx-kernel" fn probe_fence_acq_rel_gpu() {
    ptx::fence_acq_rel_gpu()
}

/// # Safety
/// Never launched; `p` would have to be a valid, 16-byte aligned address.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn probe_ld_global_v4_u32(p: *mut [u32; 4]) {
    // SAFETY: see the function's contract.
    unsafe {
        let v = ptx::ld_global_v4_u32(p);
        *(p as *mut u32) = v[0] ^ v[1] ^ v[2] ^ v[3];
    }
}

/// # Safety
/// Never launched; `p` would have to be a valid, 16-byte aligned address.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn probe_st_global_v4_u32(p: *mut [u32; 4], v: u32) {
    // SAFETY: see the function's contract.
    unsafe { ptx::st_global_v4_u32(p, [v, v ^ 1, v ^ 2, v ^ 3]) }
}

/// # Safety
/// Never launched; `p` would have to be a valid global address.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn probe_globaltimer_ns(p: *mut u64) {
    // SAFETY: see the function's contract.
    unsafe { *p = ptx::globaltimer_ns() }
}

/// # Safety
/// Never launched; `p` would have to be a valid, 8-byte aligned address.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn probe_atom_add_relaxed_gpu_u64(p: *mut u64) {
    // SAFETY: see the function's contract.
    unsafe { *p.add(1) = ptx::atom_add_relaxed_gpu_u64(p, 1) }
}

/// # Safety
/// Never launched; `p` would have to be a valid, 8-byte aligned address.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn probe_red_add_relaxed_gpu_u64(p: *mut u64) {
    // SAFETY: see the function's contract.
    unsafe { ptx::red_add_relaxed_gpu_u64(p, 1) }
}

/// # Safety
/// Never launched; `p` would have to be a valid global address.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn probe_block_broadcast_u32(p: *mut u32) {
    // SAFETY: see the function's contract (and block-uniform: the probe
    // has no branch).
    unsafe { *p = ptx::block_broadcast_u32(ptx::thread_idx_x()) }
}

/// # Safety
/// Never launched; `p` would have to be a 16-byte aligned global address.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn probe_prefetch_bulk_l2(p: *const u8, bytes: u32) {
    // SAFETY: see the function's contract.
    unsafe { ptx::prefetch_bulk_l2(p, bytes) }
}

/// # Safety
/// Never launched; `p` would have to be a valid global address.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn probe_atom_add_acq_rel_gpu_u32(p: *mut u32) {
    // SAFETY: see the function's contract.
    unsafe { *p.add(1) = ptx::atom_add_acq_rel_gpu_u32(p, 1) }
}

/// # Safety
/// Never launched; `p` would have to be a valid, 16-byte aligned address.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn probe_ld_relaxed_sys_v4_u32(p: *mut [u32; 4]) {
    // SAFETY: see the function's contract.
    unsafe {
        let v = ptx::ld_relaxed_sys_v4_u32(p);
        *(p as *mut u32).add(4) = v[0] ^ v[1] ^ v[2] ^ v[3];
    }
}

/// # Safety
/// Never launched; `p` would have to be a valid, 16-byte aligned address.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn probe_st_relaxed_sys_v4_u32(p: *mut [u32; 4], v: u32) {
    // SAFETY: see the function's contract.
    unsafe { ptx::st_relaxed_sys_v4_u32(p, [v, v, v, v]) }
}

/// # Safety
/// Never launched; `p` would have to be a valid global address.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn probe_block_gather_warp_f32(p: *mut f32) {
    // SAFETY: see the function's contract; the whole block runs it.
    unsafe {
        let v = ptx::block_gather_warp_f32(*p);
        *p.add(1) = v[0] + v[15];
    }
}
