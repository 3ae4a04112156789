//! Reference (scalar, readable) quantize and dequantize for every ggml type.
//!
//! Each submodule owns a family of types and lists its kernels in a `KERNELS` table; this
//! module checks sizes once and dispatches. Kernels work on whole blocks and may assume the
//! lengths they are handed are exact (`src.len() == n_blocks * type_size`,
//! `dst.len() == n_blocks * block_size`).
//!
//! Quantizers produce the same bytes as ggml's reference quantizers (`quantize_row_*_ref`, and
//! `quantize_*` without an importance matrix), which is what `llama-quantize` writes.

mod float;
pub mod ints;
mod iquants;
mod kquants;
mod legacy;
mod mxfp4;
mod ternary;

pub use float::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};
pub use iquants::iq_tables;

use crate::{DType, Result, TensorError};

/// Dequantizes whole blocks: `src` holds `n` blocks, `dst` receives `n * block_size` values.
pub(crate) type DequantFn = fn(&[u8], &mut [f32]);
/// Quantizes whole blocks: `src` holds `n * block_size` values, `dst` receives `n` blocks.
pub(crate) type QuantFn = fn(&[f32], &mut [u8]);

/// The reference kernels of one type.
pub(crate) struct Kernels {
    pub dtype: DType,
    pub dequantize: DequantFn,
    pub quantize: Option<QuantFn>,
}

fn kernels(dtype: DType) -> Option<&'static Kernels> {
    [
        float::KERNELS,
        legacy::KERNELS,
        kquants::KERNELS,
        iquants::KERNELS,
        ternary::KERNELS,
        mxfp4::KERNELS,
    ]
    .into_iter()
    .flatten()
    .find(|k| k.dtype == dtype)
}

/// Whether [`dequantize_row`] supports `dtype`.
pub fn can_dequantize(dtype: DType) -> bool {
    kernels(dtype).is_some()
}

/// Whether [`quantize_row`] supports `dtype` (types ggml quantizes without an importance
/// matrix).
pub fn can_quantize(dtype: DType) -> bool {
    kernels(dtype).is_some_and(|k| k.quantize.is_some())
}

fn check_sizes(
    dtype: DType,
    n_values: usize,
    n_bytes: usize,
    bytes_what: &'static str,
) -> Result<()> {
    let expected = dtype.row_size(n_values as u64)?;
    if expected != n_bytes as u64 {
        return Err(TensorError::SizeMismatch {
            what: bytes_what,
            expected,
            actual: n_bytes as u64,
        });
    }
    Ok(())
}

/// Dequantizes `src` (bytes of `dst.len()` values of type `dtype`) into `dst`.
pub fn dequantize_row(dtype: DType, src: &[u8], dst: &mut [f32]) -> Result<()> {
    let k = kernels(dtype).ok_or(TensorError::Unsupported { op: "dequantize", dtype })?;
    check_sizes(dtype, dst.len(), src.len(), "dequantize source")?;
    (k.dequantize)(src, dst);
    Ok(())
}

/// Quantizes `src` into `dst`, which must be exactly `dtype.row_size(src.len())` bytes.
pub fn quantize_row(dtype: DType, src: &[f32], dst: &mut [u8]) -> Result<()> {
    let q = kernels(dtype)
        .and_then(|k| k.quantize)
        .ok_or(TensorError::Unsupported { op: "quantize", dtype })?;
    check_sizes(dtype, src.len(), dst.len(), "quantize destination")?;
    q(src, dst);
    Ok(())
}

/// Dequantizes a whole buffer of `dtype` data (a whole number of blocks) into a new vector.
pub fn dequantize(dtype: DType, src: &[u8]) -> Result<Vec<f32>> {
    let ts = dtype.type_size();
    if src.len() % ts != 0 {
        return Err(TensorError::SizeMismatch {
            what: "dequantize source (not a whole number of blocks)",
            expected: (src.len() / ts * ts) as u64,
            actual: src.len() as u64,
        });
    }
    let n = (src.len() / ts)
        .checked_mul(dtype.block_size())
        .ok_or(TensorError::Overflow { what: "dequantized length" })?;
    let mut out = vec![0f32; n];
    dequantize_row(dtype, src, &mut out)?;
    Ok(out)
}

/// Quantizes `src` (a whole number of blocks) into a new byte vector.
pub fn quantize(dtype: DType, src: &[f32]) -> Result<Vec<u8>> {
    let n = dtype.row_size(src.len() as u64)?;
    let mut out = vec![
        0u8;
        usize::try_from(n)
            .map_err(|_| TensorError::Overflow { what: "quantized length" })?
    ];
    quantize_row(dtype, src, &mut out)?;
    Ok(out)
}

/// Applies `f` to each block of `src`, read as `B` (unaligned reads: tensor bytes need not be
/// aligned to `B`), writing `block_size` values per block into `dst`.
pub(crate) fn for_each_block<B: bytemuck::Pod, const N: usize>(
    src: &[u8],
    dst: &mut [f32],
    mut f: impl FnMut(&B, &mut [f32; N]),
) {
    let size = std::mem::size_of::<B>();
    for (bytes, out) in src.chunks_exact(size).zip(dst.chunks_exact_mut(N)) {
        let block: B = bytemuck::pod_read_unaligned(bytes);
        f(&block, out.try_into().expect("chunks_exact_mut yields N values"));
    }
}

/// Applies `f` to each group of `N` values of `src`, writing the block it returns into `dst`.
pub(crate) fn quantize_blocks<B: bytemuck::Pod, const N: usize>(
    src: &[f32],
    dst: &mut [u8],
    mut f: impl FnMut(&[f32; N]) -> B,
) {
    let size = std::mem::size_of::<B>();
    for (x, bytes) in src.chunks_exact(N).zip(dst.chunks_exact_mut(size)) {
        let block = f(x.try_into().expect("chunks_exact yields N values"));
        bytes.copy_from_slice(bytemuck::bytes_of(&block));
    }
}
