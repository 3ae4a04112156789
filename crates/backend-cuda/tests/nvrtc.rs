//! Every kernel file compiles with NVRTC to CUBIN for the architectures Tessera targets, every
//! listed entry point is in the CUBIN, and the compiler cache returns the same module from
//! memory and from disk. Needs only libnvrtc (the PyPI wheel `nvidia-cuda-nvrtc` on machines
//! without a GPU); skips where it is absent unless `REQUIRE_NVRTC=1` (CI sets it).
#![cfg(feature = "cuda")]

use tessera_backend_cuda::{kernels, nvrtc};

/// Whether the test may run; panics where NVRTC is required but absent.
fn nvrtc_here() -> bool {
    match nvrtc::available() {
        Ok(()) => true,
        Err(e) if std::env::var_os("REQUIRE_NVRTC").is_some() => {
            panic!("REQUIRE_NVRTC is set but NVRTC is unavailable: {e}")
        }
        Err(e) => {
            eprintln!("SKIP (no NVRTC): {e}");
            false
        }
    }
}

#[test]
fn every_kernel_compiles_to_cubin_with_its_entry_points() {
    if !nvrtc_here() {
        return;
    }
    eprintln!("NVRTC {:?}", nvrtc::version().expect("version"));
    // Turing (the oldest NVRTC 13 targets), Ampere, Ada, Hopper; (architecture, module) pairs
    // compiled on every core (NVRTC compiles separate programs concurrently).
    let jobs: Vec<(u32, kernels::KernelSource)> = [75, 80, 89, 90]
        .into_iter()
        .flat_map(|a| kernels::all().into_iter().map(move |k| (a, k)))
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).min(jobs.len());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((arch, k)) = jobs.get(i) else { break };
                let cubin = nvrtc::compile_cubin(k, *arch)
                    .unwrap_or_else(|e| panic!("{} for sm_{arch}: {e}", k.name));
                assert!(nvrtc::is_elf(&cubin), "{}: not an ELF CUBIN", k.name);
                for e in k.entry_points() {
                    let found = cubin
                        .windows(e.len() + 1)
                        .any(|w| &w[..e.len()] == e.as_bytes() && w[e.len()] == 0);
                    assert!(found, "{} sm_{arch}: entry point {e} missing from the CUBIN", k.name);
                }
            });
        }
    });
}

#[test]
fn a_broken_kernel_is_a_typed_error_with_the_log() {
    if !nvrtc_here() {
        return;
    }
    let bad = kernels::KernelSource {
        name: "broken.cu",
        src: "extern \"C\" __global__ void f(float *x) { x[0] = undefined_name; }",
    };
    match nvrtc::compile_cubin(&bad, 90) {
        Err(tessera_backend_cuda::CudaError::Compile { kernel, arch, log }) => {
            assert_eq!((kernel.as_str(), arch), ("broken.cu", 90));
            assert!(log.contains("undefined_name"), "{log}");
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
}

#[test]
fn the_cache_serves_memory_then_disk() {
    if !nvrtc_here() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("tessera-cuda-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let k = kernels::find("norm_op").expect("listed");
    let first = nvrtc::Compiler::new(Some(dir.clone())).get(&k, 90).expect("compiled");
    let files: Vec<_> = std::fs::read_dir(&dir).expect("cache dir").collect();
    assert_eq!(files.len(), 1, "one cached module");
    // A new compiler (a new process, as far as the cache knows) reads it back from disk.
    let second = nvrtc::Compiler::new(Some(dir.clone())).get(&k, 90).expect("from disk");
    assert_eq!(first, second);
    // Another architecture is another key.
    let key = |arch| nvrtc::Compiler::key(&k, arch, nvrtc::version().expect("version"));
    assert_ne!(key(90), key(89));
    let _ = std::fs::remove_dir_all(&dir);
}
