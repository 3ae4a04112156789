//! Finding a CUDA device: a probe that reports a machine without CUDA as a typed error.

use crate::error::{guarded, library_present, CudaError};
use cudarc::driver::{sys, CudaContext};
use std::sync::{Arc, OnceLock};

/// What the probe found about one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The device's ordinal.
    pub ordinal: usize,
    /// Its name (`NVIDIA H100 80GB HBM3`).
    pub name: String,
    /// Its compute capability, `(major, minor)`.
    pub compute_capability: (i32, i32),
}

impl DeviceInfo {
    /// The architecture number kernels are compiled for (`90` for compute capability 9.0).
    pub fn arch(&self) -> u32 {
        (self.compute_capability.0 * 10 + self.compute_capability.1) as u32
    }
}

/// Whether libcuda (the driver) can be opened (asked once).
pub fn driver_available() -> Result<(), CudaError> {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    library_present(&PRESENT, "cuda", sys::is_culib_present)
}

/// How many CUDA devices the driver reports.
pub fn device_count() -> Result<usize, CudaError> {
    driver_available()?;
    guarded(|| {
        CudaContext::device_count()
            .map(|n| n.max(0) as usize)
            .map_err(|e| CudaError::Driver(format!("{e:?}")))
    })
}

/// A context on device `ordinal` and what it is; an error, never a panic, where there is no
/// driver or no such device.
pub fn open(ordinal: usize) -> Result<(Arc<CudaContext>, DeviceInfo), CudaError> {
    let count = device_count()?;
    if ordinal >= count {
        return Err(CudaError::NoDevice { ordinal, count });
    }
    guarded(|| {
        let driver = |e: cudarc::driver::DriverError| CudaError::Driver(format!("{e:?}"));
        let ctx = CudaContext::new(ordinal).map_err(driver)?;
        let info = DeviceInfo {
            ordinal,
            name: ctx.name().map_err(driver)?,
            compute_capability: ctx.compute_capability().map_err(driver)?,
        };
        Ok((ctx, info))
    })
}
