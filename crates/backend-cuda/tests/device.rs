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

/// The backend's device: opens where CUDA is (a name, a description, memory, a buffer that
/// round-trips bytes), a typed error elsewhere.
#[test]
fn a_cuda_device_opens_or_is_a_typed_error() {
    use tessera_backend::Device;
    let required = std::env::var_os("REQUIRE_CUDA").is_some();
    match tessera_backend_cuda::CudaDevice::new(0) {
        Ok(d) => {
            assert_eq!(d.name(), "CUDA0");
            eprintln!("{}: {}, memory {:?}", d.name(), d.description(), d.memory());
            assert!(d.memory().1 > 0);
            let b = d.buffer_type().alloc(1000).expect("a device buffer");
            assert!(!b.is_host() && b.device_ptr().is_some());
            let data: Vec<u8> = (0..200).map(|i| (i * 7) as u8).collect();
            b.write(300, &data).unwrap();
            let mut back = vec![0u8; 200];
            b.read(300, &mut back).unwrap();
            assert_eq!(back, data);
            let mut zeros = vec![1u8; 10];
            b.read(0, &mut zeros).unwrap();
            assert_eq!(zeros, [0; 10], "new buffers are zeroed");
            assert!(b.write(950, &data).is_err(), "out of bounds is an error");
            // Device to device in one copy, and to host memory in one transfer.
            let c = d.buffer_type().alloc(1000).expect("a second buffer");
            assert!(b.copy_to(300, &*c, 10, 200).unwrap(), "a direct device-to-device copy");
            let mut back = vec![0u8; 200];
            c.read(10, &mut back).unwrap();
            assert_eq!(back, data);
            let host = tessera_backend::HostBuffer::new(1000, Default::default()).unwrap();
            assert!(c.copy_to(10, &host, 0, 200).unwrap());
            let mut back = vec![0u8; 200];
            tessera_backend::Buffer::read(&host, 0, &mut back).unwrap();
            assert_eq!(back, data);
            assert!(c.copy_to(900, &host, 0, 200).is_err(), "out of bounds is an error");
            // Reads of 64 KiB and more go through page-locked memory (a step's logits): at an
            // odd offset, twice the block's first size (it grows), then a small one again.
            let big = d.buffer_type().alloc(600_000).expect("a large buffer");
            let data: Vec<u8> = (0..600_000u32).map(|i| (i * 31 + i / 977) as u8).collect();
            big.write(0, &data).unwrap();
            for (off, len) in [(3, 70_000), (1, 599_999), (0, 600_000), (5, 100)] {
                let mut back = vec![0u8; len];
                big.read(off, &mut back).unwrap();
                assert!(back == data[off..off + len], "a read of {len} bytes at {off}");
            }
        }
        Err(e) => {
            assert!(!required, "REQUIRE_CUDA is set but no device opened: {e}");
            eprintln!("SKIP (no CUDA): {e}");
        }
    }
}
