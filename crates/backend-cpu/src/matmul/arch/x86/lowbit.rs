//! The AVX2 kernels of the grid i-quants and the ternary types: the arithmetic of ggml's AVX2
//! `ggml_vec_dot_*_q8_K`, which [`crate::matmul::arch::generic::lowbit`] describes beside the
//! generic order it shares its block decoding with.

use crate::matmul::arch::generic::lowbit::*;
#[cfg(doc)]
use crate::matmul::VecDot;
use tessera_tensor::blocks::QK_K;
use tessera_tensor::quant::ints::{d_bits, ints_kind, IntsKind};
use tessera_tensor::quant::iq_tables::{
    IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID,
};
use tessera_tensor::DType;

/// The eight sign bytes of a sign byte: `0xFF` (−1) where bit j is set, else `0x01`.
const fn sign_bytes(s: u8) -> u64 {
    let mut out = 0u64;
    let mut j = 0;
    while j < 8 {
        let b: u64 = if s & (1 << j) != 0 { 0xFF } else { 0x01 };
        out |= b << (8 * j);
        j += 1;
    }
    out
}

/// [`sign_bytes`] of every byte value (IQ2_S, IQ3_S keep whole sign bytes).
pub(in crate::matmul) static SIGNS: [u64; 256] = {
    let mut t = [0u64; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = sign_bytes(i as u8);
        i += 1;
    }
    t
};

/// [`sign_bytes`] of `ksigns_iq2xs[i]`: seven stored signs and an eighth that makes the count
/// of negatives even (ggml's `keven_signs_q2xs`).
pub(in crate::matmul) static KEVEN: [u64; 128] = {
    let mut t = [0u64; 128];
    let mut i = 0;
    while i < 128 {
        let parity = (i as u8).count_ones() as u8 & 1;
        t[i] = sign_bytes(i as u8 | parity << 7);
        i += 1;
    }
    t
};

pub(in crate::matmul) mod x86 {
    use super::*;
    use std::arch::x86_64::*;

    /// 32 elements of a grid block: the grid bytes (unsigned; IQ1: signed grid values), ±1
    /// sign bytes as four u64 (IQ1: the deltas), and the scales of the two 16-element halves.
    /// Plain integers, so [`chunk`] inlines into the kernels without target features (a
    /// target-feature `chunk` returning vectors was left out of line: 3x slower).
    pub(in crate::matmul) struct Chunk {
        pub grid: Grid,
        pub signs: [u64; 4],
        pub scales: (i16, i16),
    }

    /// The little-endian u16 at byte `i` (one bound check, one load).
    fn u16_at(b: &[u8], i: usize) -> u16 {
        u16::from_le_bytes(b[i..i + 2].try_into().expect("two bytes"))
    }

    /// The little-endian u32 at byte `i` (one bound check, one load: four indexed bytes
    /// compiled to four checked byte loads).
    fn u32_at(b: &[u8], i: usize) -> u32 {
        u32::from_le_bytes(b[i..i + 4].try_into().expect("four bytes"))
    }

    /// The little-endian u64 at byte `i` (one bound check, one load).
    fn u64_at(b: &[u8], i: usize) -> u64 {
        u64::from_le_bytes(b[i..i + 8].try_into().expect("eight bytes"))
    }

    /// A chunk's grid bytes: eight-value entries (IQ2, IQ1) or four-value ones (IQ3), first
    /// lowest, as ggml's `_mm256_set_epi64x` / `_mm256_set_epi32` build them.
    pub(in crate::matmul) enum Grid {
        U64([u64; 4]),
        U32([u32; 8]),
    }

    impl Grid {
        /// The 32 grid bytes as one vector.
        #[inline]
        #[target_feature(enable = "avx2")]
        fn vec(&self) -> __m256i {
            match self {
                Grid::U64(a) => set4(*a),
                Grid::U32(a) => {
                    let a = a.map(|v| v as i32);
                    _mm256_set_epi32(a[7], a[6], a[5], a[4], a[3], a[2], a[1], a[0])
                }
            }
        }
    }

    /// Four u64 as one vector, the first lowest.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn set4(a: [u64; 4]) -> __m256i {
        _mm256_set_epi64x(a[3] as i64, a[2] as i64, a[1] as i64, a[0] as i64)
    }

    /// Chunk `ib` (32 elements) of a block of `TYPES[T]` (not the ternary types).
    #[inline(always)]
    pub(in crate::matmul) fn chunk<const T: usize>(b: &[u8], ib: usize) -> Chunk {
        let odd = |s: u32| (2 * s + 1) as i16;
        match TYPES[T] {
            DType::IQ2_XXS => {
                let (idx, aux) = (u32_at(b, 2 + 8 * ib).to_le_bytes(), u32_at(b, 6 + 8 * ib));
                let s = odd(aux >> 28);
                Chunk {
                    grid: Grid::U64(std::array::from_fn(|l| IQ2XXS_GRID[usize::from(idx[l])])),
                    signs: std::array::from_fn(|l| KEVEN[((aux >> (7 * l)) & 127) as usize]),
                    scales: (s, s),
                }
            }
            DType::IQ2_XS => {
                let qs = u64_at(b, 2 + 8 * ib);
                let q = |l: usize| (qs >> (16 * l)) as u16;
                let s = u32::from(b[66 + ib]);
                Chunk {
                    grid: Grid::U64(std::array::from_fn(|l| IQ2XS_GRID[usize::from(q(l) & 511)])),
                    signs: std::array::from_fn(|l| KEVEN[usize::from(q(l) >> 9)]),
                    scales: (odd(s & 0xF), odd(s >> 4)),
                }
            }
            DType::IQ2_S => {
                let (qh, s) = (usize::from(b[66 + ib]), u32::from(b[74 + ib]));
                let (qs, sg) =
                    (u32_at(b, 2 + 4 * ib).to_le_bytes(), u32_at(b, 34 + 4 * ib).to_le_bytes());
                let idx = |l: usize| usize::from(qs[l]) | ((qh << (8 - 2 * l)) & 0x300);
                Chunk {
                    grid: Grid::U64(std::array::from_fn(|l| IQ2S_GRID[idx(l)])),
                    signs: std::array::from_fn(|l| SIGNS[usize::from(sg[l])]),
                    scales: (odd(s & 0xF), odd(s >> 4)),
                }
            }
            DType::IQ3_XXS => {
                let (aux, qs) = (u32_at(b, 66 + 4 * ib), u64_at(b, 2 + 8 * ib).to_le_bytes());
                let s = odd(aux >> 28);
                Chunk {
                    grid: Grid::U32(std::array::from_fn(|k| IQ3XXS_GRID[usize::from(qs[k])])),
                    signs: std::array::from_fn(|l| KEVEN[((aux >> (7 * l)) & 127) as usize]),
                    scales: (s, s),
                }
            }
            DType::IQ3_S => {
                let (h, qs) = (usize::from(b[66 + ib]), u64_at(b, 2 + 8 * ib).to_le_bytes());
                let sg = u32_at(b, 74 + 4 * ib).to_le_bytes();
                let g = |j: usize| {
                    let (l, k) = (j / 2, j % 2);
                    let low = usize::from(qs[j]);
                    IQ3S_GRID[low | ((h << (8 - 2 * l - k)) & 256)]
                };
                let s = odd(u32::from((b[106 + ib / 2] >> (4 * (ib % 2))) & 0xF));
                Chunk {
                    grid: Grid::U32(std::array::from_fn(g)),
                    signs: std::array::from_fn(|l| SIGNS[usize::from(sg[l])]),
                    scales: (s, s),
                }
            }
            DType::IQ1_S => {
                let (h, qs) = (u16_at(b, 34 + 2 * ib), u32_at(b, 2 + 4 * ib).to_le_bytes());
                let idx = |l: usize| usize::from(qs[l]) | (usize::from((h >> (3 * l)) & 7) << 8);
                let s = odd(u32::from((h >> 12) & 7));
                let delta = if h & 0x8000 != 0 { -1 } else { 1 };
                Chunk {
                    grid: Grid::U64(std::array::from_fn(|l| IQ1S_GRID[idx(l)])),
                    signs: [if delta < 0 { u64::MAX } else { 0x0101_0101_0101_0101 }; 4],
                    scales: (s, s),
                }
            }
            DType::IQ1_M => {
                let (qh, qs) = (u16_at(b, 32 + 2 * ib), u32_at(b, 4 * ib).to_le_bytes());
                let nib = |l: usize| (qh >> (4 * l)) as u8;
                let idx = |l: usize| usize::from(qs[l]) | (usize::from(nib(l) & 7) << 8);
                let sc = u16_at(b, 48 + 2 * (ib / 2)) >> (6 * (ib % 2));
                let delta =
                    |l: usize| if nib(l) & 8 != 0 { u64::MAX } else { 0x0101_0101_0101_0101 };
                Chunk {
                    grid: Grid::U64(std::array::from_fn(|l| IQ1S_GRID[idx(l)])),
                    signs: std::array::from_fn(delta),
                    scales: (odd(u32::from(sc & 7)), odd(u32::from((sc >> 3) & 7))),
                }
            }
            _ => unreachable!("the grid types only"),
        }
    }

    /// f16 bits to f32 with F16C (the same value as any exact conversion).
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    fn f16(bits: u16) -> f32 {
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
    }

    /// `q·3 mod 256` per byte, by adds (ggml's).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn times3(q: __m256i) -> __m256i {
        _mm256_add_epi8(q, _mm256_add_epi8(q, q))
    }

    /// `q·9 mod 256` per byte: `q·8` by a 16-bit shift with the bits that crossed into the
    /// next byte masked off, plus `q` (ggml's).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn times9(q: __m256i) -> __m256i {
        _mm256_add_epi8(_mm256_and_si256(_mm256_slli_epi16::<3>(q), _mm256_set1_epi8(-8)), q)
    }

    /// Trit codes (0..=2) of 32 bytes already multiplied by their power of 3: `(q·3) >> 8`,
    /// read as ggml's AVX2 does without multiplies (`avg(q', avg(q', 0)) >> 6` with
    /// `q' = q − 1` saturating).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn digit(q: __m256i) -> __m256i {
        let q = _mm256_subs_epu8(q, _mm256_set1_epi8(1));
        let q = _mm256_avg_epu8(q, _mm256_avg_epu8(q, _mm256_setzero_si256()));
        _mm256_and_si256(_mm256_srli_epi16::<6>(q), _mm256_set1_epi8(3))
    }

    /// The eight 32-element chunks of a TQ1_0 block as trit codes, in element order, as
    /// ggml's AVX2 kernel forms them: trit `n` of `qs[0..32]` is chunk `n`; trits 0..5 of
    /// `qs[32..48]` are elements `160 + 16n..`; trits 0..4 of `qh[0..4]` are elements
    /// `240 + 4n + j` (the one place with 16-bit multiplies).
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(in crate::matmul) fn tq1_codes(b: &[u8]) -> [__m256i; 8] {
        assert!(b.len() >= 54);
        // SAFETY: bytes 0..32 and 32..48 of the block (asserted above).
        let (head, tail) = unsafe {
            (_mm256_loadu_si256(b.as_ptr().cast()), _mm_loadu_si128(b.as_ptr().add(32).cast()))
        };
        let (h1, h2) = (times3(head), times9(head));
        let (h3, h4) = (times9(h1), times9(h2));
        // The tail's five powers, two per register (the same byte arithmetic on both halves).
        let t = _mm256_set_m128i(tail, tail);
        let t01 = _mm256_blend_epi32::<0xF0>(t, times3(t));
        let t23 = times9(t01);
        let t4 = times9(times9(t));
        let qh = _mm256_cvtepu8_epi16(_mm_set1_epi32(u32_at(b, 48) as i32));
        let q5 = _mm256_and_si256(
            _mm256_mullo_epi16(
                qh,
                _mm256_set_epi16(27, 27, 27, 27, 9, 9, 9, 9, 3, 3, 3, 3, 1, 1, 1, 1),
            ),
            _mm256_set1_epi16(0xFF),
        );
        let q5 = _mm_packus_epi16(_mm256_castsi256_si128(q5), _mm256_extracti128_si256::<1>(q5));
        let t45 = _mm256_set_m128i(q5, _mm256_castsi256_si128(t4));
        [
            digit(head),
            digit(h1),
            digit(h2),
            digit(h3),
            digit(h4),
            digit(t01),
            digit(t23),
            digit(t45),
        ]
    }

    /// The two halves' scales as sixteen i16 (eight of each).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn scales16((lo, hi): (i16, i16)) -> __m256i {
        _mm256_set_m128i(_mm_set1_epi16(hi), _mm_set1_epi16(lo))
    }

    /// `madd(maddubs(mag, y·sign), scales)`: eight i32 lanes of scaled four-element sums.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn lanes(mag: __m256i, sign: __m256i, y: __m256i, scales: __m256i) -> __m256i {
        _mm256_madd_epi16(_mm256_maddubs_epi16(mag, _mm256_sign_epi8(y, sign)), scales)
    }

    /// The 32 activation bytes of chunk `ib`.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn y32(q: &Q8K, ib: usize) -> __m256i {
        let c = &q.qs[32 * ib..32 * ib + 32];
        // SAFETY: 32 readable bytes.
        unsafe { _mm256_loadu_si256(c.as_ptr().cast()) }
    }

    /// ggml's AVX2 kernel (`ggml_vec_dot_*_q8_K`, `__AVX2__` branch) for `TYPES[T]`.
    ///
    /// # Safety
    /// The [`VecDot`] contract, and AVX2/FMA.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::matmul) unsafe fn kernel<const T: usize>(
        n: usize,
        x: *const u8,
        y: *const u8,
    ) -> f32 {
        let dtype = TYPES[T];
        let kind = ints_kind(dtype).expect("TYPES are covered");
        let size = dtype.type_size();
        let mut acc = _mm256_setzero_ps();
        let mut acc2 = _mm256_setzero_ps();
        let mut acc1 = 0f32;
        for i in 0..n / QK_K {
            // SAFETY: block i < n / 256 of each row.
            let (b, q) = unsafe { (block(x, i, size), q8k(y, i)) };
            match kind {
                IntsKind::Grid { .. } => {
                    // Two chunks per step, two sums (as ggml): independent work to overlap.
                    let (mut sumi, mut sumi2) = (_mm256_setzero_si256(), _mm256_setzero_si256());
                    for ib in (0..8).step_by(2) {
                        let (c1, c2) = (chunk::<T>(b, ib), chunk::<T>(b, ib + 1));
                        let p1 =
                            lanes(c1.grid.vec(), set4(c1.signs), y32(&q, ib), scales16(c1.scales));
                        let p2 = lanes(
                            c2.grid.vec(),
                            set4(c2.signs),
                            y32(&q, ib + 1),
                            scales16(c2.scales),
                        );
                        sumi = _mm256_add_epi32(sumi, p1);
                        sumi2 = _mm256_add_epi32(sumi2, p2);
                    }
                    let sumi = _mm256_add_epi32(sumi, sumi2);
                    let d = f16(d_bits(dtype, b)) * q.d;
                    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
                }
                IntsKind::Iq1 => {
                    let (mut s1, mut s2) = (_mm256_setzero_si256(), _mm256_setzero_si256());
                    let mut dsum = 0i32;
                    for ib in 0..8 {
                        let c = chunk::<T>(b, ib);
                        let (g, sg) = (c.grid.vec(), set4(c.signs));
                        let (yv, sc) = (y32(&q, ib), scales16(c.scales));
                        s1 = _mm256_add_epi32(s1, lanes(_mm256_abs_epi8(g), g, yv, sc));
                        if dtype == DType::IQ1_M {
                            let ones = _mm256_set1_epi8(1);
                            s2 = _mm256_add_epi32(s2, lanes(ones, sg, yv, sc));
                        } else {
                            // The chunk's delta bytes: all −1 or all +1 (one sign per 32).
                            let sign = if c.signs[0] == u64::MAX { -1 } else { 1 };
                            dsum += (q.bsum(2 * ib) + q.bsum(2 * ib + 1))
                                * sign
                                * i32::from(c.scales.0);
                        }
                    }
                    let d = q.d * f16(d_bits(dtype, b));
                    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(s1), acc);
                    acc2 = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(s2), acc2);
                    acc1 = (dsum as f32).mul_add(d, acc1);
                }
                IntsKind::Ternary => {
                    // Sums in i16, as ggml's: at most 8·2·2·127 + 16·127 in magnitude.
                    let mut sum16 = _mm256_setzero_si256();
                    if dtype == DType::TQ2_0 {
                        for half in 0..2 {
                            // SAFETY: 32 of the block's 64 code bytes.
                            let raw =
                                unsafe { _mm256_loadu_si256(b.as_ptr().add(32 * half).cast()) };
                            for k in 0..4 {
                                let codes = _mm256_and_si256(
                                    _mm256_srl_epi16(raw, _mm_cvtsi32_si128(2 * k as i32)),
                                    _mm256_set1_epi8(3),
                                );
                                let p = _mm256_maddubs_epi16(codes, y32(&q, 4 * half + k));
                                sum16 = _mm256_add_epi16(sum16, p);
                            }
                        }
                    } else {
                        for (ib, codes) in tq1_codes(b).into_iter().enumerate() {
                            let p = _mm256_maddubs_epi16(codes, y32(&q, ib));
                            sum16 = _mm256_add_epi16(sum16, p);
                        }
                    }
                    // The codes are value + 1: take the block sums off (i16 lane t holds bytes
                    // 2t, 2t + 1 of every chunk; i32 lane l then has Σ y of elements 32l..32l+32
                    // taken off, as ggml's).
                    let bsums = &q.raw[260..292];
                    // SAFETY: the block's 16 i16 block sums (32 bytes).
                    let bs = unsafe { _mm256_loadu_si256(bsums.as_ptr().cast()) };
                    let sumi = _mm256_madd_epi16(_mm256_sub_epi16(sum16, bs), _mm256_set1_epi16(1));
                    let d = q.d * f16(d_bits(dtype, b));
                    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(d), acc);
                }
            }
        }
        let h = crate::matmul::avx2::hsum_ps(acc);
        match kind {
            IntsKind::Grid { mult } => mult * h,
            IntsKind::Iq1 if dtype == DType::IQ1_M => {
                crate::matmul::avx2::hsum_ps(acc2).mul_add(0.125, h)
            }
            IntsKind::Iq1 => h + 0.125 * acc1,
            IntsKind::Ternary => h,
        }
    }
}

/// [`x86::kernel`] as a [`VecDot`].
///
/// # Safety
/// The [`VecDot`] contract, and AVX2/FMA/F16C (the caller's level).
pub(in crate::matmul) unsafe fn avx2<const T: usize>(n: usize, x: *const u8, y: *const u8) -> f32 {
    // SAFETY: forwarded.
    unsafe { x86::kernel::<T>(n, x, y) }
}
