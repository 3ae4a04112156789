//! Block layouts, bit-identical to ggml's `block_*` structs (`ggml-common.h`).
//!
//! Every struct is `#[repr(C)]`, has no padding and is `bytemuck::Pod`, so tensor bytes from a
//! GGUF file can be viewed as blocks in place (when aligned) or read with
//! [`bytemuck::pod_read_unaligned`]. Multi-byte fields are little-endian on disk; this crate only
//! builds for little-endian targets, as ggml only runs on them.

use bytemuck::{Pod, Zeroable};
use half::f16;

#[cfg(target_endian = "big")]
compile_error!("tessera-tensor reads ggml blocks in place and needs a little-endian target");

/// Elements per block of the 32-wide types.
pub const QK4_0: usize = 32;
/// Elements per block of the K-quants and most i-quants.
pub const QK_K: usize = 256;
/// Size of the packed 6-bit scale array of Q4_K/Q5_K.
pub const K_SCALE_SIZE: usize = 12;

macro_rules! block {
    ($(#[$m:meta])* $name:ident, $size:expr, { $($(#[$fm:meta])* $f:ident : $t:ty),* $(,)? }) => {
        $(#[$m])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
        pub struct $name { $($(#[$fm])* pub $f: $t),* }
        const _: () = assert!(std::mem::size_of::<$name>() == $size);
    };
}

block!(/// `block_q4_0`: `x = d * (q - 8)`; low nibbles are elements 0..16, high 16..32.
    BlockQ4_0, 18, { /// Scale.
    d: f16, /// Packed 4-bit quants.
    qs: [u8; 16] });
block!(/// `block_q4_1`: `x = d * q + m`.
    BlockQ4_1, 20, { /// Scale.
    d: f16, /// Min.
    m: f16, /// Packed 4-bit quants.
    qs: [u8; 16] });
block!(/// `block_q5_0`: `x = d * (q - 16)`, fifth bits in `qh` (u32 LE).
    BlockQ5_0, 22, { /// Scale.
    d: f16, /// Fifth bits.
    qh: [u8; 4], /// Low 4 bits.
    qs: [u8; 16] });
block!(/// `block_q5_1`: `x = d * q + m`.
    BlockQ5_1, 24, { /// Scale.
    d: f16, /// Min.
    m: f16, /// Fifth bits.
    qh: [u8; 4], /// Low 4 bits.
    qs: [u8; 16] });
block!(/// `block_q8_0`: `x = d * q`.
    BlockQ8_0, 34, { /// Scale.
    d: f16, /// Quants.
    qs: [i8; 32] });
block!(/// `block_q8_1`: like Q8_0 plus `s = d * sum(q)`.
    BlockQ8_1, 36, { /// Scale.
    d: f16, /// `d * sum(qs)`.
    s: f16, /// Quants.
    qs: [i8; 32] });
block!(/// `block_q2_K`: 16 sub-blocks of 16, 4-bit scale and min each.
    BlockQ2K, 84, { /// Low nibble scale, high nibble min, per sub-block.
    scales: [u8; 16], /// 2-bit quants.
    qs: [u8; 64], /// Super-block scale for the scales.
    d: f16, /// Super-block scale for the mins.
    dmin: f16 });
block!(/// `block_q3_K`: 16 sub-blocks of 16, 6-bit scales.
    BlockQ3K, 110, { /// High bit of each quant.
    hmask: [u8; 32], /// Low 2 bits.
    qs: [u8; 64], /// Packed 6-bit scales.
    scales: [u8; 12], /// Super-block scale.
    d: f16 });
block!(/// `block_q4_K`: 8 sub-blocks of 32, 6-bit scale and min each.
    BlockQ4K, 144, { /// Super-block scale for the scales.
    d: f16, /// Super-block scale for the mins.
    dmin: f16, /// Packed 6-bit scales and mins.
    scales: [u8; K_SCALE_SIZE], /// 4-bit quants.
    qs: [u8; 128] });
block!(/// `block_q5_K`: like Q4_K with a fifth bit.
    BlockQ5K, 176, { /// Super-block scale for the scales.
    d: f16, /// Super-block scale for the mins.
    dmin: f16, /// Packed 6-bit scales and mins.
    scales: [u8; K_SCALE_SIZE], /// Fifth bits.
    qh: [u8; 32], /// Low 4 bits.
    qs: [u8; 128] });
block!(/// `block_q6_K`: 16 sub-blocks of 16, 8-bit scales; `d` is last.
    BlockQ6K, 210, { /// Low 4 bits.
    ql: [u8; 128], /// High 2 bits.
    qh: [u8; 64], /// Sub-block scales.
    scales: [i8; 16], /// Super-block scale.
    d: f16 });
block!(/// `block_q8_K`: the activation type of K-quant dot products.
    BlockQ8K, 292, { /// Scale (f32, not f16).
    d: f32, /// Quants.
    qs: [i8; 256], /// Sum of each group of 16 quants.
    bsums: [i16; 16] });
block!(/// `block_iq2_xxs`.
    BlockIQ2XXS, 66, { /// Scale.
    d: f16, /// Grid indexes, signs and scales.
    qs: [u16; 32] });
block!(/// `block_iq2_xs`.
    BlockIQ2XS, 74, { /// Scale.
    d: f16, /// Grid indexes and signs.
    qs: [u16; 32], /// 4-bit sub-block scales.
    scales: [u8; 8] });
block!(/// `block_iq2_s`.
    BlockIQ2S, 82, { /// Scale.
    d: f16, /// Grid index low bits, then signs.
    qs: [u8; 64], /// Grid index high bits.
    qh: [u8; 8], /// 4-bit sub-block scales.
    scales: [u8; 8] });
block!(/// `block_iq3_xxs`.
    BlockIQ3XXS, 98, { /// Scale.
    d: f16, /// Grid indexes, then signs and scales.
    qs: [u8; 96] });
block!(/// `block_iq3_s`.
    BlockIQ3S, 110, { /// Scale.
    d: f16, /// Grid index low bits.
    qs: [u8; 64], /// Grid index high bits.
    qh: [u8; 8], /// Signs.
    signs: [u8; 32], /// 4-bit sub-block scales.
    scales: [u8; 4] });
block!(/// `block_iq1_s`.
    BlockIQ1S, 50, { /// Scale.
    d: f16, /// Grid index low bits.
    qs: [u8; 32], /// Grid index high bits, scale and delta sign.
    qh: [u16; 8] });
block!(/// `block_iq1_m`: the f16 scale is spread over the top nibbles of `scales`.
    BlockIQ1M, 56, { /// Grid index low bits.
    qs: [u8; 32], /// Grid index high bits and delta signs.
    qh: [u8; 16], /// 3-bit sub-block scales and the packed f16 scale.
    scales: [u8; 8] });
block!(/// `block_iq4_nl`: nibbles index `KVALUES_IQ4NL`.
    BlockIQ4NL, 18, { /// Scale.
    d: f16, /// Packed 4-bit indexes.
    qs: [u8; 16] });
block!(/// `block_iq4_xs`: 8 sub-blocks of 32 with 6-bit scales.
    BlockIQ4XS, 136, { /// Scale.
    d: f16, /// High 2 bits of the sub-block scales.
    scales_h: u16, /// Low 4 bits of the sub-block scales.
    scales_l: [u8; 4], /// Packed 4-bit indexes.
    qs: [u8; 128] });
block!(/// `block_tq1_0`: ternary, five trits per byte.
    BlockTQ1_0, 54, { /// Five trits per byte.
    qs: [u8; 48], /// Four trits per byte.
    qh: [u8; 4], /// Scale.
    d: f16 });
block!(/// `block_tq2_0`: ternary, 2 bits each.
    BlockTQ2_0, 66, { /// 2-bit values.
    qs: [u8; 64], /// Scale.
    d: f16 });
block!(/// `block_mxfp4`: E2M1 values with an E8M0 shared exponent.
    BlockMXFP4, 17, { /// E8M0 exponent.
    e: u8, /// Packed E2M1 values.
    qs: [u8; 16] });

/// The 16 values an IQ4_NL / IQ4_XS nibble indexes (`kvalues_iq4nl`).
pub const KVALUES_IQ4NL: [i8; 16] =
    [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

/// E2M1 values, doubled, that an MXFP4 nibble indexes (`kvalues_mxfp4`).
pub const KVALUES_MXFP4: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];
