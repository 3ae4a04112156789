//! The low-bit block types in integer form: what ggml's integer dot products multiply.
//!
//! ggml multiplies the grid i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) and
//! the ternary types (TQ1_0, TQ2_0) by Q8_K activations in integers: a signed value per
//! element, a small odd scale per 16 or 32 elements, and one f16 scale per 256, brought
//! together in f32 only per block. [`block_ints`] decodes a block into that form so a dot
//! product can reproduce ggml's integer sums exactly and its f32 steps in its own order. The
//! element order and the index arithmetic are the dequantizers' (`dequantize_row_*`), which a
//! test checks: `x = d · mult · scale · (value + delta / 8)`, with `mult` 1/8 for the IQ2
//! types, 1/4 for IQ3_XXS and 1 for the rest ([`IntsKind`]).

use super::iquants::iq1m_scale;
use super::iquants::iq_tables::{
    IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID,
};
use super::ternary::unpack_trit;
use crate::blocks::QK_K;
use crate::DType;
use half::f16;

/// One 256-element block in integer form.
#[derive(Clone, Debug)]
pub struct BlockInts {
    /// The signed value of each element: grid value × sign (IQ2, IQ3), grid value −1..=1
    /// (IQ1), trit −1..=1 (TQ).
    pub values: [i8; QK_K],
    /// IQ1_S / IQ1_M: the sign (±1) of each element's delta (`±IQ1S_DELTA`, i.e. ±1/8); 0 for
    /// the other types.
    pub deltas: [i8; QK_K],
    /// The integer scale of each 16-element sub-block (`2s + 1`; 1 for the ternary types).
    pub scales: [i32; 16],
    /// The block's f16 scale, as f32.
    pub d: f32,
}

impl Default for BlockInts {
    fn default() -> Self {
        BlockInts { values: [0; QK_K], deltas: [0; QK_K], scales: [0; 16], d: 0.0 }
    }
}

/// What the block's f32 factor holds beside `d`: how a dot product combines the integers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum IntsKind {
    /// `x = d · mult · scale · value` (IQ2_*: 1/8, IQ3_XXS: 1/4, IQ3_S: 1).
    Grid {
        /// The constant ggml multiplies the sum by (a power of two).
        mult: f32,
    },
    /// `x = d · scale · (value + delta / 8)` (IQ1_S, IQ1_M).
    Iq1,
    /// `x = d · value` (TQ1_0, TQ2_0).
    Ternary,
}

/// The types [`block_ints`] decodes: the seven grid i-quants, then the two ternary types.
pub const INT_TYPES: [DType; 9] = [
    DType::IQ2_XXS,
    DType::IQ2_XS,
    DType::IQ2_S,
    DType::IQ3_XXS,
    DType::IQ3_S,
    DType::IQ1_S,
    DType::IQ1_M,
    DType::TQ1_0,
    DType::TQ2_0,
];

/// The grid i-quants among [`INT_TYPES`] (all but the ternary types), in its order.
pub fn grid_types() -> impl Iterator<Item = DType> {
    INT_TYPES.into_iter().filter(|&t| ints_kind(t) != Some(IntsKind::Ternary))
}

/// The [`IntsKind`] of a type [`block_ints`] decodes, or `None`.
pub fn ints_kind(dtype: DType) -> Option<IntsKind> {
    use DType::*;
    Some(match dtype {
        IQ2_XXS | IQ2_XS | IQ2_S => IntsKind::Grid { mult: 0.125 },
        IQ3_XXS => IntsKind::Grid { mult: 0.25 },
        IQ3_S => IntsKind::Grid { mult: 1.0 },
        IQ1_S | IQ1_M => IntsKind::Iq1,
        TQ1_0 | TQ2_0 => IntsKind::Ternary,
        _ => return None,
    })
}

#[inline]
fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}

/// `0xFF` in byte j where bit j of `bits` is set, else `0x00`.
const fn byte_mask(bits: usize) -> u64 {
    let mut m = 0u64;
    let mut j = 0;
    while j < 8 {
        if bits & (1 << j) != 0 {
            m |= 0xFF << (8 * j);
        }
        j += 1;
    }
    m
}

/// [`byte_mask`] of each sign byte (`kmask_iq2xs` applied to all eight bits at once).
static SIGN_MASKS: [u64; 256] = {
    let mut t = [0u64; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = byte_mask(i);
        i += 1;
    }
    t
};

/// [`SIGN_MASKS`] of `KSIGNS_IQ2XS[i]` (seven sign bits and their parity as the eighth) in
/// one lookup instead of two dependent ones.
static KSIGN_MASKS: [u64; 128] = {
    let mut t = [0u64; 128];
    let mut i = 0usize;
    while i < 128 {
        t[i] = byte_mask(i | ((i.count_ones() as usize & 1) << 7));
        i += 1;
    }
    t
};

/// Eight unsigned grid bytes with the signs of `signs` (bit j: element j negative).
fn signed8(out: &mut [i8], grid: u64, signs: u8) {
    signed8_masked(out, grid, SIGN_MASKS[usize::from(signs)]);
}

/// [`signed8`] with the signs of the 7-bit `KSIGNS_IQ2XS` index `ks`.
fn signed8_ks(out: &mut [i8], grid: u64, ks: usize) {
    signed8_masked(out, grid, KSIGN_MASKS[ks & 127]);
}

/// Eight unsigned grid bytes (never 0: every grid value is positive) negated where the byte
/// of the mask `m` is 0xFF, eight at a time: `(g ^ 0xFF) + 1 = 256 - g` per byte, which never
/// carries into the next byte because `g > 0`.
#[inline]
fn signed8_masked(out: &mut [i8], grid: u64, m: u64) {
    debug_assert!(m == 0 || grid.to_le_bytes().iter().all(|&g| g != 0));
    let v = (grid ^ m).wrapping_add(m & 0x0101_0101_0101_0101);
    // One eight-byte store (a per-byte loop stored byte by byte).
    let out: &mut [i8; 8] = (&mut out[..8]).try_into().expect("eight values");
    *out = v.to_le_bytes().map(|b| b as i8);
}

/// Two four-value IQ3 grid entries as one eight-byte entry.
fn grid4x2(g1: u32, g2: u32) -> u64 {
    u64::from(g1) | u64::from(g2) << 32
}

/// Decodes one block of `dtype` (its `type_size()` bytes) into `out`. Returns `false` (and
/// leaves `out` alone) for a type [`ints_kind`] does not cover or a slice of the wrong size.
pub fn block_ints(dtype: DType, blk: &[u8], out: &mut BlockInts) -> bool {
    let Some(kind) = ints_kind(dtype) else {
        return false;
    };
    if blk.len() != dtype.type_size() {
        return false;
    }
    if kind != IntsKind::Iq1 {
        // (IQ1 sets every delta below.)
        out.deltas = [0; QK_K];
    }
    let v = &mut out.values;
    let sc = &mut out.scales;
    match dtype {
        DType::IQ2_XXS => {
            // d, qs[32] u16: per 32 values two u32, grid indexes then 4×7 sign indexes + scale.
            let qs: &[u8; 64] = blk[2..66].try_into().expect("66-byte block");
            for ib in 0..8 {
                // Eight bytes as one word: grid indexes, then the signs and scale.
                let word = u64::from_le_bytes(qs[8 * ib..8 * ib + 8].try_into().expect("8"));
                let (idx, aux) = ((word as u32).to_le_bytes(), (word >> 32) as u32);
                sc[2 * ib] = 2 * (aux >> 28) as i32 + 1;
                sc[2 * ib + 1] = sc[2 * ib];
                for l in 0..4 {
                    let ks = (aux >> (7 * l)) as usize;
                    signed8_ks(&mut v[32 * ib + 8 * l..], IQ2XXS_GRID[usize::from(idx[l])], ks);
                }
            }
        }
        DType::IQ2_XS => {
            // d, qs[32] u16 (9-bit grid index, 7-bit sign index), scales[8].
            for ib in 0..8 {
                let s = blk[66 + ib];
                (sc[2 * ib], sc[2 * ib + 1]) =
                    (2 * i32::from(s & 0xF) + 1, 2 * i32::from(s >> 4) + 1);
                for l in 0..4 {
                    let q = u16_at(blk, 2 + 2 * (4 * ib + l));
                    let g = IQ2XS_GRID[usize::from(q & 511)];
                    signed8_ks(&mut v[32 * ib + 8 * l..], g, usize::from(q >> 9));
                }
            }
        }
        DType::IQ2_S => {
            // d, qs[32] index low bits, signs[32], qh[8], scales[8].
            let (qs, signs, qh, scales) = (&blk[2..34], &blk[34..66], &blk[66..74], &blk[74..82]);
            for ib in 0..8 {
                let s = scales[ib];
                (sc[2 * ib], sc[2 * ib + 1]) =
                    (2 * i32::from(s & 0xF) + 1, 2 * i32::from(s >> 4) + 1);
                for l in 0..4 {
                    let idx = usize::from(qs[4 * ib + l])
                        | ((usize::from(qh[ib]) << (8 - 2 * l)) & 0x300);
                    signed8(&mut v[32 * ib + 8 * l..], IQ2S_GRID[idx], signs[4 * ib + l]);
                }
            }
        }
        DType::IQ3_XXS => {
            // d, qs[64] grid indexes, then per 32 values a u32 of 4×7 sign indexes + scale.
            for ib in 0..8 {
                let a = 66 + 4 * ib;
                let aux = u32::from_le_bytes([blk[a], blk[a + 1], blk[a + 2], blk[a + 3]]);
                sc[2 * ib] = 2 * (aux >> 28) as i32 + 1;
                sc[2 * ib + 1] = sc[2 * ib];
                for l in 0..4 {
                    let q = &blk[2 + 8 * ib + 2 * l..];
                    let g = grid4x2(IQ3XXS_GRID[usize::from(q[0])], IQ3XXS_GRID[usize::from(q[1])]);
                    signed8_ks(&mut v[32 * ib + 8 * l..], g, (aux >> (7 * l)) as usize);
                }
            }
        }
        DType::IQ3_S => {
            // d, qs[64], qh[8], signs[32], scales[4].
            let (qs, qh, signs, scales) =
                (&blk[2..66], &blk[66..74], &blk[74..106], &blk[106..110]);
            for ib in 0..8 {
                let s = 2 * i32::from((scales[ib / 2] >> (4 * (ib % 2))) & 0xF) + 1;
                (sc[2 * ib], sc[2 * ib + 1]) = (s, s);
                let h = usize::from(qh[ib]);
                for l in 0..4 {
                    let i1 = usize::from(qs[8 * ib + 2 * l]) | ((h << (8 - 2 * l)) & 256);
                    let i2 = usize::from(qs[8 * ib + 2 * l + 1]) | ((h << (7 - 2 * l)) & 256);
                    let g = grid4x2(IQ3S_GRID[i1], IQ3S_GRID[i2]);
                    signed8(&mut v[32 * ib + 8 * l..], g, signs[4 * ib + l]);
                }
            }
        }
        DType::IQ1_S => {
            // d, qs[32], qh[8] u16 (3 index bits per group, 3-bit scale, delta sign).
            for ib in 0..8 {
                let h = u16_at(blk, 34 + 2 * ib);
                let s = 2 * i32::from((h >> 12) & 7) + 1;
                (sc[2 * ib], sc[2 * ib + 1]) = (s, s);
                let delta = if h & 0x8000 != 0 { -1 } else { 1 };
                out.deltas[32 * ib..32 * ib + 32].fill(delta);
                for l in 0..4 {
                    let idx =
                        usize::from(blk[2 + 4 * ib + l]) | (usize::from((h >> (3 * l)) & 7) << 8);
                    for (o, g) in
                        v[32 * ib + 8 * l..][..8].iter_mut().zip(IQ1S_GRID[idx].to_le_bytes())
                    {
                        *o = g as i8;
                    }
                }
            }
        }
        DType::IQ1_M => {
            // qs[32], qh[16] (per group: 3 index bits and the delta sign), scales[8].
            let (qs, qh) = (&blk[..32], &blk[32..48]);
            let w: [u16; 4] = std::array::from_fn(|i| u16_at(blk, 48 + 2 * i));
            for ib in 0..8 {
                let s = w[ib / 2] >> (6 * (ib % 2));
                sc[2 * ib] = 2 * i32::from(s & 7) + 1;
                sc[2 * ib + 1] = 2 * i32::from((s >> 3) & 7) + 1;
                for l in 0..4 {
                    let nibble = qh[2 * ib + l / 2] >> (4 * (l % 2));
                    let idx = usize::from(qs[4 * ib + l]) | (usize::from(nibble & 7) << 8);
                    let at = 32 * ib + 8 * l;
                    out.deltas[at..at + 8].fill(if nibble & 8 != 0 { -1 } else { 1 });
                    for (o, g) in v[at..at + 8].iter_mut().zip(IQ1S_GRID[idx].to_le_bytes()) {
                        *o = g as i8;
                    }
                }
            }
        }
        DType::TQ1_0 => {
            // qs[48], qh[4], d: element order as `dequantize_row_tq1_0`.
            let trit = |q: u8, n: usize| unpack_trit(q, n) as i8;
            for n in 0..5 {
                for m in 0..32 {
                    v[32 * n + m] = trit(blk[m], n);
                }
                for m in 0..16 {
                    v[160 + 16 * n + m] = trit(blk[32 + m], n);
                }
            }
            for n in 0..4 {
                for j in 0..4 {
                    v[240 + 4 * n + j] = trit(blk[48 + j], n);
                }
            }
            *sc = [1; 16];
        }
        DType::TQ2_0 => {
            // qs[64], d: per 128 values, byte m holds elements m + 32n in bits 2n..2n+2.
            for half in 0..2 {
                for n in 0..4 {
                    for m in 0..32 {
                        let q = (blk[32 * half + m] >> (2 * n)) & 3;
                        v[128 * half + 32 * n + m] = q as i8 - 1;
                    }
                }
            }
            *sc = [1; 16];
        }
        _ => unreachable!("ints_kind covers exactly the types above"),
    }
    out.d = f16::from_bits(d_bits(dtype, blk)).to_f32();
    true
}

/// The f16 bits of the block scale `d` of a block of a type [`ints_kind`] covers: at byte 0,
/// at the block's end (TQ1_0, TQ2_0), or spread over IQ1_M's scale nibbles.
///
/// # Panics
/// If `blk` is shorter than the type's block.
#[inline]
pub fn d_bits(dtype: DType, blk: &[u8]) -> u16 {
    match dtype {
        DType::IQ1_M => iq1m_scale(std::array::from_fn(|i| u16_at(blk, 48 + 2 * i))),
        DType::TQ1_0 => u16_at(blk, 52),
        DType::TQ2_0 => u16_at(blk, 64),
        _ => u16_at(blk, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic pseudo-random bytes.
    fn bytes(n: usize, seed: u64) -> Vec<u8> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (s >> 56) as u8
            })
            .collect()
    }

    /// Every decoded block rebuilds the reference dequantizer's values: the integer form is
    /// the dequantizers' element order and arithmetic.
    #[test]
    fn ints_rebuild_the_dequantized_values() {
        use DType::*;
        for dtype in INT_TYPES {
            let size = dtype.type_size();
            for seed in 0..20 {
                let mut blk = bytes(size, seed * 31 + size as u64);
                // A finite, modest f16 scale where the type keeps one.
                let d = f16::from_f32(0.01 + seed as f32 * 0.003).to_bits().to_le_bytes();
                match dtype {
                    TQ1_0 => blk[52..54].copy_from_slice(&d),
                    TQ2_0 => blk[64..66].copy_from_slice(&d),
                    IQ1_M => {
                        // The f16 scale is the top nibbles of the four u16 at 48.
                        for i in 0..4 {
                            let nib = (u16::from_le_bytes(d) >> (4 * i)) & 0xF;
                            blk[49 + 2 * i] = (blk[49 + 2 * i] & 0x0F) | (nib as u8) << 4;
                        }
                    }
                    _ => blk[0..2].copy_from_slice(&d),
                }
                if dtype == TQ2_0 {
                    // Codes 0..=2 only (3 is not a trit).
                    for b in &mut blk[..64] {
                        for n in 0..4 {
                            if (*b >> (2 * n)) & 3 == 3 {
                                *b &= !(1 << (2 * n));
                            }
                        }
                    }
                }
                let want = crate::dequantize(dtype, &blk).expect("one block");
                let mut ints = BlockInts::default();
                assert!(block_ints(dtype, &blk, &mut ints));
                let kind = ints_kind(dtype).expect("covered");
                for (j, w) in want.iter().enumerate() {
                    let s = ints.scales[j / 16] as f32;
                    let got = match kind {
                        IntsKind::Grid { mult } => ints.d * mult * s * f32::from(ints.values[j]),
                        IntsKind::Iq1 => {
                            ints.d
                                * s
                                * (f32::from(ints.values[j]) + f32::from(ints.deltas[j]) / 8.0)
                        }
                        IntsKind::Ternary => ints.d * f32::from(ints.values[j]),
                    };
                    let tol = 1e-5 * w.abs().max(ints.d.abs());
                    assert!(
                        (got - w).abs() <= tol,
                        "{dtype} seed {seed} element {j}: {got} vs {w}"
                    );
                }
            }
        }
    }

    #[test]
    fn ksign_masks_are_the_sign_masks_of_ggml_ksigns() {
        use super::super::iquants::iq_tables::KSIGNS_IQ2XS;
        for (i, &ks) in KSIGNS_IQ2XS.iter().enumerate() {
            assert_eq!(KSIGN_MASKS[i], SIGN_MASKS[usize::from(ks)], "index {i}");
        }
    }

    /// [`signed8`] negates bytes without carries only because no grid byte is 0.
    #[test]
    fn no_signed_grid_has_a_zero_byte() {
        let u64s = IQ2XXS_GRID.iter().chain(&IQ2XS_GRID).chain(&IQ2S_GRID);
        assert!(u64s.flat_map(|g| g.to_le_bytes()).all(|b| b != 0));
        let u32s = IQ3XXS_GRID.iter().chain(&IQ3S_GRID);
        assert!(u32s.flat_map(|g| g.to_le_bytes()).all(|b| b != 0));
        for (i, m) in SIGN_MASKS.iter().enumerate() {
            for j in 0..8 {
                let neg = i & (1 << j) != 0;
                assert_eq!((m >> (8 * j)) & 0xFF, if neg { 0xFF } else { 0 });
            }
        }
    }

    #[test]
    fn other_types_and_sizes_are_refused() {
        let mut ints = BlockInts::default();
        assert!(!block_ints(DType::Q4_K, &[0; 144], &mut ints));
        assert!(!block_ints(DType::IQ2_XXS, &[0; 65], &mut ints));
    }
}
