//! One opened GPU, shared by its device, buffers and backends: the driver context, the stream
//! everything is queued on (kernels and copies alike, so they are ordered), the kernels
//! compiled for it (loaded once per module), and a cuBLAS handle on the same stream where
//! cuBLAS is installed.

use crate::device::{self, DeviceInfo};
use crate::error::{guarded, CudaError};
use crate::kernels;
use crate::nvrtc::Compiler;
use crate::staging::Staging;
use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// An opened GPU (see the module docs).
pub struct Gpu {
    /// `CUDA{ordinal}`.
    pub(crate) name: String,
    pub(crate) info: DeviceInfo,
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    /// cuBLAS on `stream` (`None` where the library is missing: the plan then keeps batched
    /// products on the generic kernel).
    pub(crate) blas: Option<CudaBlas>,
    /// Page-locked host memory for large reads (the logits).
    pub(crate) staging: Staging,
    compiler: Compiler,
    modules: Mutex<HashMap<&'static str, Arc<CudaModule>>>,
    functions: Mutex<HashMap<String, CudaFunction>>,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu").field("name", &self.name).field("info", &self.info).finish()
    }
}

impl Gpu {
    /// Opens device `ordinal`; an error, never a panic, without a driver or device.
    pub(crate) fn open(ordinal: usize) -> Result<Gpu, CudaError> {
        let (ctx, info) = device::open(ordinal)?;
        // An owned, non-blocking stream (the legacy default stream cannot be captured into a
        // CUDA graph); buffers queue their copies on it too, so they are ordered after the
        // kernels that read or write the same memory.
        let stream = guarded(|| {
            ctx.new_stream().map_err(|e| CudaError::Driver(format!("creating a stream: {e:?}")))
        })?;
        // SAFETY: a dlopen probe, no other effect.
        let blas = if unsafe { cudarc::cublas::sys::is_culib_present() } {
            match guarded(|| {
                CudaBlas::new(stream.clone())
                    .map_err(|e| CudaError::Driver(format!("creating a cuBLAS handle: {e:?}")))
            }) {
                Ok(b) => Some(b),
                Err(e) => {
                    tracing::warn!(error = %e, "cuBLAS unusable: batched products on the generic kernel");
                    None
                }
            }
        } else {
            tracing::warn!("cuBLAS not found: batched products on the generic kernel");
            None
        };
        Ok(Gpu {
            name: format!("CUDA{ordinal}"),
            info,
            staging: Staging::new(ctx.clone(), stream.clone()),
            ctx,
            stream,
            blas,
            compiler: Compiler::new(Compiler::default_dir()),
            modules: Mutex::new(HashMap::new()),
            functions: Mutex::new(HashMap::new()),
        })
    }

    /// What the plan knows of this device.
    pub(crate) fn capability(&self) -> crate::plan::Capability {
        crate::plan::Capability { arch: self.info.arch(), cublas: self.blas.is_some() }
    }

    /// Makes the context current on this thread.
    pub(crate) fn bind(&self) -> Result<(), CudaError> {
        self.ctx.bind_to_thread().map_err(|e| CudaError::Driver(format!("{e:?}")))
    }

    /// Compiles the modules of `entries` not loaded yet, in parallel (one thread each), into the
    /// compiler's caches, so the first graph that needs several waits for the slowest, not for
    /// their sum (about 45 s for `fattn_mma.cu` alone on an H200 host's first run). Errors are
    /// left for [`Gpu::function`] to report. Entries already looked up are skipped before their
    /// kernel files are searched, so a graph of known kernels costs one map lookup each.
    pub(crate) fn precompile<'a>(&self, entries: impl Iterator<Item = &'a str>) {
        let mut unknown: Vec<&str> = Vec::new();
        {
            let functions = self.functions.lock().expect("function cache");
            for e in entries {
                if !functions.contains_key(e) && !unknown.contains(&e) {
                    unknown.push(e);
                }
            }
        }
        let mut missing: Vec<kernels::KernelSource> = Vec::new();
        {
            let loaded = self.modules.lock().expect("module cache");
            for e in unknown {
                if let Some(k) = kernels::find(e) {
                    if !loaded.contains_key(k.name) && !missing.iter().any(|m| m.name == k.name) {
                        missing.push(k);
                    }
                }
            }
        }
        if missing.len() < 2 {
            return;
        }
        let (arch, compiler) = (self.info.arch(), &self.compiler);
        std::thread::scope(|s| {
            for k in &missing {
                s.spawn(move || {
                    let _ = compiler.get(k, arch);
                });
            }
        });
    }

    /// Kernel `entry`, compiled for this device (NVRTC, cached) and loaded on first use.
    pub(crate) fn function(&self, entry: &str) -> Result<CudaFunction, CudaError> {
        if let Some(f) = self.functions.lock().expect("function cache").get(entry) {
            return Ok(f.clone());
        }
        let source = kernels::find(entry)
            .ok_or_else(|| CudaError::Nvrtc(format!("no kernel file defines {entry}")))?;
        let module = {
            let mut modules = self.modules.lock().expect("module cache");
            match modules.get(source.name) {
                Some(m) => m.clone(),
                None => {
                    let cubin = self.compiler.get(&source, self.info.arch())?;
                    let m = guarded(|| {
                        self.ctx
                            .load_module(cudarc::nvrtc::Ptx::from_binary(cubin.to_vec()))
                            .map_err(|e| {
                                CudaError::Driver(format!("loading {}: {e:?}", source.name))
                            })
                    })?;
                    modules.insert(source.name, m.clone());
                    m
                }
            }
        };
        let f = module
            .load_function(entry)
            .map_err(|e| CudaError::Driver(format!("{entry}: {e:?}")))?;
        self.functions.lock().expect("function cache").insert(entry.to_string(), f.clone());
        Ok(f)
    }
}
