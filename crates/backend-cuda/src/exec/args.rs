//! Kernel arguments as the executor stores them between resolving a graph and launching it,
//! and the launch shapes the kernels expect.

use cudarc::driver::{DeviceRepr, LaunchConfig};

/// A tensor as the kernels see it (`struct TT` in kernels/types.cuh).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct TensorArg {
    pub p: u64,
    pub ne: [i64; 4],
    pub nb: [i64; 4],
    pub dtype: i32,
    pub pad: i32,
}

// SAFETY: a plain #[repr(C)] struct of integers, laid out as `struct TT` (8-byte aligned,
// 80 bytes), passed by value as a kernel parameter.
unsafe impl DeviceRepr for TensorArg {}

impl TensorArg {
    /// An absent optional source: every dimension 1, a null pointer the kernel never reads.
    pub const NONE: TensorArg = TensorArg { p: 0, ne: [1; 4], nb: [0; 4], dtype: 0, pad: 0 };
}

/// One kernel parameter, in the kernel's order.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Arg {
    /// A tensor descriptor (`TT`).
    T(TensorArg),
    /// A device address (`const u8 *`, `float *`).
    Ptr(u64),
    /// `int`.
    I32(i32),
    /// `i64`.
    I64(i64),
    /// `float`.
    F32(f32),
}

impl Arg {
    /// The address of the value, as `cuLaunchKernelEx`'s parameter list takes it (valid while
    /// `self` is borrowed).
    pub(crate) fn param(&self) -> *mut std::ffi::c_void {
        let p: *const std::ffi::c_void = match self {
            Arg::T(t) => (t as *const TensorArg).cast(),
            Arg::Ptr(p) => (p as *const u64).cast(),
            Arg::I32(x) => (x as *const i32).cast(),
            Arg::I64(x) => (x as *const i64).cast(),
            Arg::F32(x) => (x as *const f32).cast(),
        };
        p.cast_mut()
    }
}

impl From<TensorArg> for Arg {
    fn from(t: TensorArg) -> Arg {
        Arg::T(t)
    }
}
impl From<i32> for Arg {
    fn from(x: i32) -> Arg {
        Arg::I32(x)
    }
}
impl From<i64> for Arg {
    fn from(x: i64) -> Arg {
        Arg::I64(x)
    }
}
impl From<f32> for Arg {
    fn from(x: f32) -> Arg {
        Arg::F32(x)
    }
}

/// Threads per block of the element-wise kernels.
pub(crate) const THREADS: u32 = 256;

/// One thread per element.
pub(crate) fn grid_for(n: usize) -> LaunchConfig {
    let blocks = n.div_ceil(THREADS as usize).clamp(1, 1 << 20) as u32;
    LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 }
}

/// One block of `threads` per row.
pub(crate) fn per_row(rows: usize, threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (rows.max(1) as u32, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// One warp per item, `per_block` warps per block.
pub(crate) fn warps(n: usize, per_block: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n.div_ceil(per_block).max(1) as u32, 1, 1),
        block_dim: (32 * per_block as u32, 1, 1),
        shared_mem_bytes: 0,
    }
}
