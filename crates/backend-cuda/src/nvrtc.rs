//! Kernel compilation: NVRTC straight to CUBIN for one architecture, cached in memory and on
//! disk.

use crate::error::{guarded, library_present, CudaError};
use crate::kernels::KernelSource;
use cudarc::nvrtc::{result, sys};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::ffi::CString;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

/// Whether libnvrtc can be opened (asked once: cudarc opens the library on each check).
pub fn available() -> Result<(), CudaError> {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    library_present(&PRESENT, "nvrtc", sys::is_culib_present)
}

/// NVRTC's version, `(major, minor)`.
pub fn version() -> Result<(i32, i32), CudaError> {
    available()?;
    guarded(|| {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: two writable ints; the library is present (checked above).
        let r = unsafe { sys::nvrtcVersion(&mut major, &mut minor) };
        if r != sys::nvrtcResult::NVRTC_SUCCESS {
            return Err(CudaError::Nvrtc(format!("nvrtcVersion: {r:?}")));
        }
        Ok((major, minor))
    })
}

/// The options every kernel is compiled with, for architecture `arch` (90 for sm_90).
pub fn options(arch: u32) -> Vec<String> {
    vec![
        format!("--gpu-architecture=sm_{arch}"),
        "--std=c++17".into(),
        "--use_fast_math".into(),
        "--extra-device-vectorization".into(),
    ]
}

/// Compiles `kernel` (the prelude and its source) for `sm_{arch}` to CUBIN.
pub fn compile_cubin(kernel: &KernelSource, arch: u32) -> Result<Vec<u8>, CudaError> {
    available()?;
    let src = CString::new(kernel.full_source())
        .map_err(|_| CudaError::Nvrtc(format!("{}: NUL byte in the source", kernel.name)))?;
    let name = CString::new(kernel.name).expect("kernel names have no NUL");
    guarded(|| {
        let prog = result::create_program(&src, Some(&name))
            .map_err(|e| CudaError::Nvrtc(format!("{}: {e:?}", kernel.name)))?;
        // SAFETY: `prog` was just created and is destroyed once, below.
        let compiled = unsafe { result::compile_program(prog, &options(arch)) };
        let out = match compiled {
            Ok(()) => cubin(prog),
            Err(_) => {
                // SAFETY: `prog` is live.
                let log = unsafe { result::get_program_log(prog) }
                    .map(|l| {
                        let bytes: Vec<u8> =
                            l.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
                        String::from_utf8_lossy(&bytes).into_owned()
                    })
                    .unwrap_or_default();
                Err(CudaError::Compile { kernel: kernel.name.into(), arch, log })
            }
        };
        // SAFETY: `prog` is live and not used after this.
        let _ = unsafe { result::destroy_program(prog) };
        out
    })
}

/// The CUBIN of a compiled program.
fn cubin(prog: sys::nvrtcProgram) -> Result<Vec<u8>, CudaError> {
    let mut size = 0usize;
    // SAFETY: `prog` is a compiled, live program; `size` is writable.
    let r = unsafe { sys::nvrtcGetCUBINSize(prog, &mut size) };
    if r != sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(CudaError::Nvrtc(format!("nvrtcGetCUBINSize: {r:?}")));
    }
    let mut out = vec![0u8; size];
    // SAFETY: `out` has the `size` bytes NVRTC asked for.
    let r = unsafe { sys::nvrtcGetCUBIN(prog, out.as_mut_ptr().cast()) };
    if r != sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(CudaError::Nvrtc(format!("nvrtcGetCUBIN: {r:?}")));
    }
    Ok(out)
}

/// Compiles kernels once per (source, options, NVRTC version, architecture): a memory cache
/// for this process and a disk cache (one file per key) for the next.
pub struct Compiler {
    /// The on-disk cache folder, if any.
    dir: Option<PathBuf>,
    /// Compiled CUBINs by key.
    memory: Mutex<HashMap<String, std::sync::Arc<Vec<u8>>>>,
}

impl Compiler {
    /// A compiler caching on disk under `dir` (created when first written), or only in memory.
    pub fn new(dir: Option<PathBuf>) -> Compiler {
        Compiler { dir, memory: Mutex::new(HashMap::new()) }
    }

    /// The default disk cache: `$TESSERA_CUDA_CACHE`, else `$XDG_CACHE_HOME/tessera/cuda`, else
    /// `~/.cache/tessera/cuda`.
    pub fn default_dir() -> Option<PathBuf> {
        if let Some(d) = std::env::var_os("TESSERA_CUDA_CACHE") {
            return Some(d.into());
        }
        let base = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
        Some(base.join("tessera").join("cuda"))
    }

    /// The cache key of `kernel` for `sm_{arch}` with NVRTC `version`.
    pub fn key(kernel: &KernelSource, arch: u32, version: (i32, i32)) -> String {
        let mut h = Sha256::new();
        h.update(kernel.full_source().as_bytes());
        for o in options(arch) {
            h.update(o.as_bytes());
            h.update([0]);
        }
        h.update(format!("nvrtc {}.{} sm_{arch}", version.0, version.1).as_bytes());
        let digest = h.finalize();
        let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
        format!("{}-sm{arch}-{hex}", kernel.name)
    }

    /// `kernel`'s CUBIN for `sm_{arch}`: from memory, from disk, or compiled (and stored in
    /// both).
    pub fn get(
        &self,
        kernel: &KernelSource,
        arch: u32,
    ) -> Result<std::sync::Arc<Vec<u8>>, CudaError> {
        let key = Self::key(kernel, arch, version()?);
        if let Some(c) = self.memory.lock().expect("cache lock").get(&key) {
            return Ok(c.clone());
        }
        let path = self.dir.as_ref().map(|d| d.join(format!("{key}.cubin")));
        let cubin = match path.as_ref().and_then(|p| std::fs::read(p).ok()) {
            Some(bytes) if is_elf(&bytes) => bytes,
            _ => {
                tracing::info!(
                    kernel = kernel.name,
                    arch,
                    cache = ?self.dir,
                    "compiling CUDA kernels (once per version and GPU; up to a minute)"
                );
                let t = std::time::Instant::now();
                let bytes = compile_cubin(kernel, arch)?;
                tracing::debug!(
                    kernel = kernel.name,
                    arch,
                    ms = t.elapsed().as_millis() as u64,
                    "compiled"
                );
                if let (Some(dir), Some(path)) = (self.dir.as_ref(), path.as_ref()) {
                    let err = |source| CudaError::Cache { path: path.clone(), source };
                    std::fs::create_dir_all(dir).map_err(err)?;
                    // Written aside and renamed, so a reader never sees half a file.
                    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
                    std::fs::write(&tmp, &bytes).map_err(err)?;
                    std::fs::rename(&tmp, path).map_err(err)?;
                }
                bytes
            }
        };
        let cubin = std::sync::Arc::new(cubin);
        self.memory.lock().expect("cache lock").insert(key, cubin.clone());
        Ok(cubin)
    }
}

/// Whether `bytes` start like an ELF file (a CUBIN is one).
pub fn is_elf(bytes: &[u8]) -> bool {
    bytes.starts_with(b"\x7fELF")
}
