//! Dot products of the grid i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) and
//! the ternary types (TQ1_0, TQ2_0) with Q8_K activations, in ggml's arithmetic.
//!
//! ggml multiplies these types in integers (`ggml_vec_dot_*_q8_K`): per 256-value block an exact
//! integer sum of `scale · value · y`, then a few f32 steps. Any summation order gives the same
//! integers, so only the f32 steps and which integers reach them decide the bits:
//!
//! - the scalar level follows ggml's generic kernels (a build without AVX): one integer per
//!   block, `sum += d · f32(isum)` with `d = d_x · d_y`, the type's constant (1/8, 1/4) applied
//!   to the total; IQ1 adds its delta sum as `d · (f32(isum) + f32(dsum) / 8)`;
//! - the AVX2 level follows ggml's AVX2 kernels, which llama.cpp's x86 builds (AVX2 and
//!   AVX-512 alike) run: eight i32 lanes per block, lane `l` holding the products of elements
//!   `4l..4l+4` of every 32-element chunk, converted and accumulated with one FMA per block into
//!   eight f32 lanes, summed as `hsum_float_8` and then scaled. The ternary types subtract the
//!   activations' sum per lane (`Σ y` of elements `32l..32l+32`, from the Q8_K block sums:
//!   their codes are 0..=2); IQ1_S keeps its delta sum in one scalar f32 (`fma`), IQ1_M in a
//!   second eight-lane accumulator. GCC contracts ggml's `acc + a·b` into FMA there, and so
//!   does this module.
//!
//! Weights are decoded per 32 elements into unsigned grid bytes and ±1 sign bytes (the sign
//! tables are expanded to bytes at compile time), multiplied with `maddubs` (at most
//! 2·62·127 per pair: no saturation) and scaled with `madd`. TQ1_0's base-3 bytes are decoded
//! in 16-bit lanes (`(q·3ⁿ mod 256)·3 >> 8`, exact) before the same lanes.

#[cfg(doc)]
use crate::matmul::VecDot;
use tessera_tensor::blocks::QK_K;
use tessera_tensor::quant::ints::{block_ints, ints_kind, BlockInts, IntsKind, INT_TYPES};
use tessera_tensor::DType;

/// Bytes of a Q8_K block: d (f32), qs (256 i8), bsums (16 i16).
pub(in crate::matmul) const Q8K_SIZE: usize = 292;

/// The types of this module, indexed by the kernels' const parameter.
pub(in crate::matmul) const TYPES: [DType; 9] = INT_TYPES;

/// A Q8_K block of an activation row: `d`, the 256 values and the raw bytes (for the sums).
pub(in crate::matmul) struct Q8K<'a> {
    pub(in crate::matmul) d: f32,
    pub(in crate::matmul) qs: &'a [i8],
    pub(in crate::matmul) raw: &'a [u8],
}

impl Q8K<'_> {
    /// The sum of the activation values of sixteen-value group `t`.
    pub(in crate::matmul) fn bsum(&self, t: usize) -> i32 {
        i32::from(i16::from_le_bytes([self.raw[260 + 2 * t], self.raw[261 + 2 * t]]))
    }
}

/// Block `i` of the Q8_K row at `y`.
///
/// # Safety
/// `y` must hold at least `i + 1` Q8_K blocks.
pub(in crate::matmul) unsafe fn q8k<'a>(y: *const u8, i: usize) -> Q8K<'a> {
    // SAFETY: block i is readable (the caller's contract); i8 has no alignment.
    let raw = unsafe { std::slice::from_raw_parts(y.add(i * Q8K_SIZE), Q8K_SIZE) };
    let d = f32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]);
    // SAFETY: bytes 4..260 of the block, reinterpreted as i8.
    let qs = unsafe { std::slice::from_raw_parts(raw.as_ptr().add(4).cast::<i8>(), QK_K) };
    Q8K { d, qs, raw }
}

/// Block `i` (of `size` bytes) of the weight row at `x`.
///
/// # Safety
/// `x` must hold at least `i + 1` blocks of `size` bytes.
pub(in crate::matmul) unsafe fn block<'a>(x: *const u8, i: usize, size: usize) -> &'a [u8] {
    // SAFETY: by the caller's contract.
    unsafe { std::slice::from_raw_parts(x.add(i * size), size) }
}

/// `Σ scale(j/16) · v[j] · y[j]` over a block.
fn scaled_sum(ints: &BlockInts, v: &[i8; QK_K], y: &[i8]) -> i32 {
    (0..16)
        .map(|t| {
            let s: i32 = (16 * t..16 * t + 16).map(|j| i32::from(v[j]) * i32::from(y[j])).sum();
            ints.scales[t] * s
        })
        .sum()
}

/// ggml's generic kernel (`ggml_vec_dot_*_q8_K_generic`) for `TYPES[T]`.
///
/// # Safety
/// The [`VecDot`] contract: `x` and `y` hold `n / 256` blocks of the type and of Q8_K.
pub(in crate::matmul) unsafe fn generic<const T: usize>(
    n: usize,
    x: *const u8,
    y: *const u8,
) -> f32 {
    let dtype = TYPES[T];
    let kind = ints_kind(dtype).expect("TYPES are covered");
    let size = dtype.type_size();
    let mut ints = BlockInts::default();
    let mut sumf = 0f32;
    for i in 0..n / QK_K {
        // SAFETY: block i < n / 256 of each row.
        let (b, q) = unsafe { (block(x, i, size), q8k(y, i)) };
        block_ints(dtype, b, &mut ints);
        match kind {
            IntsKind::Grid { .. } => {
                let d = ints.d * q.d;
                sumf += d * scaled_sum(&ints, &ints.values, q.qs) as f32;
            }
            IntsKind::Iq1 => {
                let (s1, s2) =
                    (scaled_sum(&ints, &ints.values, q.qs), scaled_sum(&ints, &ints.deltas, q.qs));
                sumf += ints.d * q.d * (s1 as f32 + 0.125 * s2 as f32);
            }
            IntsKind::Ternary => {
                let s: i32 =
                    ints.values.iter().zip(q.qs).map(|(&v, &y)| i32::from(v) * i32::from(y)).sum();
                sumf += s as f32 * (ints.d * q.d);
            }
        }
    }
    match kind {
        IntsKind::Grid { mult } => mult * sumf,
        _ => sumf,
    }
}

#[cfg(test)]
mod tests;
