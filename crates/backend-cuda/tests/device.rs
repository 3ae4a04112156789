//! The error path: on a machine without a CUDA driver, opening a device is a typed error, never
//! a panic. With `REQUIRE_CUDA=1` (the GPU machine) a device must open instead.
#![cfg(feature = "cuda")]

use tessera_backend_cuda::{device, CudaError};

#[test]
fn opening_a_device_is_an_error_or_a_device_never_a_panic() {
    let required = std::env::var_os("REQUIRE_CUDA").is_some();
    match device::open(0) {
        Ok((_, info)) => {
            eprintln!("CUDA device 0: {} (sm_{})", info.name, info.arch());
            assert!(info.arch() >= 50, "{info:?}");
        }
        Err(e) => {
            assert!(!required, "REQUIRE_CUDA is set but no device opened: {e}");
            eprintln!("SKIP (no CUDA): {e}");
            assert!(
                matches!(e, CudaError::NoLibrary { lib: "cuda" } | CudaError::NoDevice { .. }),
                "{e:?}"
            );
        }
    }
    // Asking for a device far past the last is always NoDevice or NoLibrary.
    match device::open(1 << 20) {
        Err(CudaError::NoDevice { ordinal, .. }) => assert_eq!(ordinal, 1 << 20),
        Err(CudaError::NoLibrary { .. }) => assert!(!required),
        other => panic!("{other:?}"),
    }
}
