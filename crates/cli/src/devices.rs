//! The devices this program can use, composed here in the binary (as llama.cpp's device
//! registry is filled by the backends it was built with): CUDA GPUs under the `cuda` feature,
//! `TESSERA_SIM_DEVICES=N` simulated accelerators (`SIM0`..), then the CPU last. The model
//! library knows only the `Device` trait.

use std::sync::Arc;
use tessera_backend::{Device, DeviceKind, Registry};
use tessera_backend_cpu::{CpuDevice, SimDevice};

/// The registry, in priority order with the CPU last.
pub fn registry() -> Registry {
    let mut r = Registry::new();
    #[cfg(feature = "cuda")]
    match tessera_backend_cuda::device::device_count() {
        // Kernels are compiled at run time: a driver without NVRTC cannot run anything, and
        // offloading to it by default (-ngl defaults to all layers) would fail every run.
        Ok(n) if n > 0 && tessera_backend_cuda::nvrtc::available().is_err() => tracing::warn!(
            "{n} CUDA device(s) found but libnvrtc is missing (CUDA toolkit's NVRTC, or the \
             nvidia-cuda-nvrtc wheel on the loader path): running on the CPU"
        ),
        Ok(n) => {
            for i in 0..n {
                match tessera_backend_cuda::CudaDevice::new(i) {
                    Ok(d) => r.add(Arc::new(d)),
                    Err(e) => tracing::warn!("CUDA{i} not usable: {e}"),
                }
            }
        }
        Err(e) => tracing::info!("no CUDA devices: {e}"),
    }
    let n_sim: usize =
        std::env::var("TESSERA_SIM_DEVICES").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    for i in 0..n_sim {
        r.add(Arc::new(SimDevice::new(i, threads)));
    }
    r.add(Arc::new(CpuDevice::from_env()));
    r
}

/// The registry's CPU device (always present: [`registry`] adds it last).
pub fn host(r: &Registry) -> Arc<dyn Device> {
    let cpu = r.devices().iter().find(|d| d.kind() == DeviceKind::Cpu);
    cpu.cloned().expect("the registry has the CPU device")
}

/// One line per device: name, kind and description (`tessera --version`, `run -v`).
pub fn describe(r: &Registry) -> String {
    r.devices()
        .iter()
        .map(|d| format!("  {}: {}", d.name(), d.description()))
        .collect::<Vec<_>>()
        .join("\n")
}
