//! Finding the driver and the GPUs, without ever panicking where there are
//! none.
//!
//! cudarc loads `libcuda` lazily and panics on first use when it is
//! missing; every entry point of this crate that touches the driver goes
//! through [`device_count`] (or [`require_devices`]) first, which checks
//! for the library before any cudarc call.

use std::sync::Arc;

use cudarc::driver::CudaContext;

use crate::error::{DriverContext, Error, Result};

/// Whether `libcuda` can be loaded on this machine. Without the
/// `dynamic-loading` feature the application linked it, so a running
/// process has it.
pub fn driver_available() -> bool {
    #[cfg(feature = "dynamic-loading")]
    // SAFETY: `is_culib_present` only tries to dlopen the library by name
    // and closes it again; it has no preconditions.
    let present = unsafe { cudarc::driver::sys::is_culib_present() };
    #[cfg(not(feature = "dynamic-loading"))]
    let present = true;
    present
}

/// Number of CUDA devices; [`Error::NoDriver`] where there is no driver.
pub fn device_count() -> Result<usize> {
    if !driver_available() {
        return Err(Error::NoDriver);
    }
    let n = CudaContext::device_count().ctx("cuDeviceGetCount", None)?;
    Ok(usize::try_from(n).unwrap_or(0))
}

/// Checks that at least `needed` devices exist and returns how many do.
pub fn require_devices(needed: usize) -> Result<usize> {
    let found = device_count()?;
    if found < needed {
        return Err(Error::TooFewGpus { needed, found });
    }
    Ok(found)
}

/// The primary context of device `ordinal`, after checking it exists.
pub fn context(ordinal: usize) -> Result<Arc<CudaContext>> {
    require_devices(ordinal + 1)?;
    CudaContext::new(ordinal).ctx("cuCtxRetain", Some(ordinal))
}

use crate::config::REQUIRE_GPUS_ENV;
pub use crate::nccl_comm::nccl_available;

/// Gate for GPU tests: `Ok(true)` when `needed` GPUs are present;
/// `Ok(false)` after printing a visible skip message when they are not;
/// an error instead of the skip when `INTRANODE_REQUIRE_GPUS` asks for at least
/// `needed` GPUs (a device run, where a skip would hide a broken machine).
pub fn gpus_or_skip(needed: usize, test: &str) -> Result<bool> {
    let required = crate::config::required_gpus()?;
    match require_devices(needed) {
        Ok(_) => Ok(true),
        Err(e) if required >= needed => Err(e),
        Err(e) => {
            // Straight to the process's stderr: the test harness captures
            // `eprintln!`, and a skip must stay visible in CI logs.
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED {test}: {e} (set {REQUIRE_GPUS_ENV}={needed} to make this a failure)"
            );
            Ok(false)
        }
    }
}
