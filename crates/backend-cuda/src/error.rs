//! The crate's one error type.

/// What can go wrong finding CUDA, compiling a kernel or using the device.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    /// A CUDA library (`cuda`, `nvrtc`, `cublas`) could not be opened.
    #[error("CUDA library lib{lib} not found (is the driver / toolkit installed and on the loader path?)")]
    NoLibrary {
        /// The library's short name.
        lib: &'static str,
    },
    /// The driver loaded but reported no device (or not the one asked for).
    #[error("no CUDA device {ordinal} (the driver reports {count})")]
    NoDevice {
        /// The device asked for.
        ordinal: usize,
        /// How many the driver reports.
        count: usize,
    },
    /// A driver call failed.
    #[error("CUDA driver: {0}")]
    Driver(String),
    /// A setting (an environment variable) could not be read.
    #[error("CUDA backend setting: {0}")]
    Config(String),
    /// NVRTC refused a kernel source.
    #[error("NVRTC could not compile {kernel} for sm_{arch}: {log}")]
    Compile {
        /// The kernel file.
        kernel: String,
        /// The target architecture (`90` for sm_90).
        arch: u32,
        /// NVRTC's log.
        log: String,
    },
    /// Another NVRTC failure.
    #[error("NVRTC: {0}")]
    Nvrtc(String),
    /// cudarc panicked (a library missing a symbol, say); caught so callers see an error.
    #[error("CUDA library call panicked: {0}")]
    Panicked(String),
    /// The on-disk kernel cache could not be read or written.
    #[error("kernel cache {path}: {source}")]
    Cache {
        /// The cache file or folder.
        path: std::path::PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// Runs `f`, turning a panic inside cudarc into [`CudaError::Panicked`].
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn guarded<T>(f: impl FnOnce() -> Result<T, CudaError>) -> Result<T, CudaError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            Err(CudaError::Panicked(msg))
        }
    }
}

/// Whether CUDA library `lib` can be opened, asked once per library through `check` (cudarc's
/// `is_culib_present`, which opens the library on every call) and remembered in `cell`.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn library_present(
    cell: &std::sync::OnceLock<bool>,
    lib: &'static str,
    check: unsafe fn() -> bool,
) -> Result<(), CudaError> {
    // SAFETY: `check` only tries to open the library by its candidate names.
    if *cell.get_or_init(|| unsafe { check() }) {
        Ok(())
    } else {
        Err(CudaError::NoLibrary { lib })
    }
}
