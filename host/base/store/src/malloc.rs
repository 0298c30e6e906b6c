//! Makes the C allocator give large freed buffers back to the system, so
//! the server's RSS follows what it holds (NOTE [memory budget]).
//!
//! glibc's malloc serves blocks from 128 KiB up with `mmap`, and `free`
//! unmaps them, but each such free raises the threshold to the freed size
//! (up to 32 MiB) and the trim threshold to twice that. After that, 16 MiB
//! request bodies come from the per-thread arenas (up to eight per core),
//! and each arena may keep 64 MiB it no longer uses: measured on the
//! 16 x 16 MiB `SET` test, 213 MiB of RSS for a 64 MiB budget. Setting the
//! threshold explicitly turns the adjustment off. The setting is process
//! wide; it only moves large blocks to `mmap`, which costs a few
//! microseconds per block of 256 KiB or more.

/// Blocks at least this large are mapped on their own and unmapped on
/// free.
pub(crate) const MMAP_THRESHOLD_BYTES: usize = 256 * 1024;

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod imp {
    use std::ffi::c_int;

    /// `M_MMAP_THRESHOLD` in glibc's `malloc.h`.
    const M_MMAP_THRESHOLD: c_int = -3;

    unsafe extern "C" {
        /// glibc's `mallopt(3)`; std already links glibc.
        fn mallopt(param: c_int, value: c_int) -> c_int;
        /// glibc's `malloc_trim(3)`.
        fn malloc_trim(pad: usize) -> c_int;
    }

    pub(super) fn set_mmap_threshold(bytes: usize) -> bool {
        let Ok(bytes) = c_int::try_from(bytes) else {
            return false;
        };
        // SAFETY: mallopt takes two ints and returns one; it is
        // thread-safe (it takes the arena locks) and M_MMAP_THRESHOLD with
        // a value under HEAP_MAX_SIZE / 2 is a documented, valid setting.
        unsafe { mallopt(M_MMAP_THRESHOLD, bytes) == 1 }
    }

    pub(super) fn trim() {
        // SAFETY: malloc_trim(3) takes a size_t and is thread-safe (it
        // takes each arena's lock in turn); 0 asks it to keep no padding.
        unsafe {
            malloc_trim(0);
        }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
mod imp {
    /// Other allocators (musl's, the BSDs') unmap large blocks on their
    /// own; nothing to do.
    pub(super) fn set_mmap_threshold(_bytes: usize) -> bool {
        true
    }

    pub(super) fn trim() {}
}

/// Applies the setting once per process.
pub(crate) fn return_large_frees_to_the_system() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if !imp::set_mmap_threshold(MMAP_THRESHOLD_BYTES) {
            tracing::warn!("mallopt(M_MMAP_THRESHOLD) failed; freed buffers may stay resident");
        }
    });
}

/// Gives the free pages inside malloc's heaps back to the system. Freed
/// small blocks (the keys and values of many tiny entries) stay resident
/// otherwise: only the top of a heap is trimmed by itself. It walks every
/// arena, so the table calls it only after freeing many megabytes
/// (`hash.rs`, NOTE [entry cost] in `limits.rs`).
pub(crate) fn trim() {
    imp::trim();
}
