//! Batched K-quant products the way llama.cpp's tiled matmul computes them (Q2_K..Q6_K
//! weights, 8+ activation rows; AVX-512 VNNI and AVX2 kernels).
//!
//! llama.cpp b11312 multiplies K-quant weights by 8 or more activation rows with its "tiled"
//! kernels instead of the per-row dot products, and their rounding differs, so Tessera follows
//! them to give the same bits. Per weight row, activation row and 256-value block `b`:
//!
//! - integers, exact: `s1 = Σ_sub scale·Σ (q − bias)·y` over the block's sub-blocks (`q` the
//!   unsigned code, `bias` 32 for Q6_K, 4 for Q3_K, 0 otherwise), and for the types with mins
//!   `s2 = Σ_sub min·Σ y` (from the Q8_K block sums);
//! - then, in f32: `r = f32(s1)·d`, `r = r − dmin·f32(s2)` (one fused multiply-add),
//!   `acc = fma(r, d_y, acc)`, blocks in order from `acc = 0`.
//!
//! Any summation order gives the same integers, so the kernel is free to pick its layout:
//! sixteen activation rows form a *band*, repacked so one 512-bit register holds four
//! consecutive activation bytes of each of the sixteen rows; a weight row's four codes are
//! broadcast and one `vpdpbusd` adds their products to sixteen outputs at once (no horizontal
//! sums). Sub-block scales are applied with one multiply per sub-block, the bias and min
//! corrections with `vpdpwssd` over pairs of 16-value block sums.
//!
//! Weight rows are unpacked to codes once per chunk and reused for every band of it; the
//! activation bands are repacked once per product by all threads (into the work buffer), not
//! once per chunk that reads them (at 16 threads a band was repacked by eight chunks).
//!
//! llama.cpp takes this path on every x86 build with AVX2 (its AVX2 microkernel: `maddubs`
//! products, `madd` with the scales, the same f32 epilogue with FMA), and its integers are exact
//! there too, so the AVX2 level gives the same bits as the VNNI one. [`x86::avx2`] reads the
//! same band in two halves of eight rows: `maddubs` of the broadcast codes (unsigned, at most
//! 63; IQ4_XS's signed values by the sign trick, at most 127 in magnitude) with the activation
//! bytes cannot saturate, and `madd` with ones finishes the four-byte
//! sums that `vpdpbusd` makes in one step.

// The AVX-512 intrinsics are stable since Rust 1.89; see the note in `avx512.rs`.
#![allow(clippy::incompatible_msrv)]

use super::arch::x86::kquant_tiled as x86;
use super::kquant_unpack::{fill_band, unpack_block};
use super::layouts::{Band, BandRef, Layout, Unpacked, BAND, QK, ROWS};
use super::Activations;
use crate::{ComputeParams, TensorRef};
use std::cell::RefCell;
use tessera_tensor::DType;

/// Activation rows per chunk.
const CHUNK1: usize = 4 * BAND;
/// Bytes of a Q8_K block: d (f32), qs (256 i8), bsums (16 i16).
pub(super) const Q8K_SIZE: usize = 292;

/// A tile kernel: four unpacked weight rows against one band, `out[row][band row]`.
///
/// # Safety
/// The CPU must have the kernel's instruction set; `u` and `band` must hold `nb` blocks.
type KernelFn = unsafe fn(usize, Layout, &[Unpacked], &BandRef, &mut [[f32; BAND]; ROWS]);

/// The [`Layout`] of `dtype`, where the type table gives it one.
pub(super) fn layout(dtype: DType) -> Option<Layout> {
    super::types::row(dtype)?.x86.tiled
}

/// Bytes of one band of `nb` blocks in a work buffer: codes, block-sum pairs, scales (each a
/// multiple of 64 bytes, so every band and array stays aligned).
fn band_bytes(nb: usize) -> usize {
    nb * (QK * BAND + 8 * BAND * 4 + BAND * 4)
}

/// Work-buffer bytes for `rows` activation rows repacked once in bands, where `src0`'s type
/// takes the tiled path (0 otherwise): [`mul_mat`] fills them with every thread before the
/// chunks, so each band is repacked once, not once per chunk of weight rows that reads it.
pub(super) fn bands_size(src0: &TensorRef, rows: usize) -> usize {
    if layout(src0.dtype).is_none() || src0.ne[0] % QK != 0 {
        return 0;
    }
    rows.div_ceil(BAND) * band_bytes(src0.ne[0] / QK)
}

/// Where band `i` of the bands at `base` (`nb` blocks each, [`band_bytes`] apart) keeps its
/// three arrays: codes, then block-sum pairs (i32), then scales (f32), each at a multiple of 64
/// bytes from the band's start, with their lengths. Only addresses: reading or writing them is
/// the caller's (unsafe) business.
fn band_arrays(base: *mut u8, nb: usize, i: usize) -> [(*mut u8, usize); 3] {
    let (q, bs) = (nb * QK * BAND, nb * 8 * BAND);
    let at = base.wrapping_add(i * band_bytes(nb));
    [(at, q), (at.wrapping_add(q), bs), (at.wrapping_add(q + 4 * bs), nb * BAND)]
}

/// Band `i` of the bands at `base`, to read.
///
/// # Safety
/// `base` must hold band `i` ([`band_arrays`], 64-byte aligned), filled and not written while
/// the view lives.
unsafe fn band_at<'a>(base: *mut u8, nb: usize, i: usize) -> BandRef<'a> {
    let [(q, nq), (bs, nbs), (d, nd)] = band_arrays(base, nb, i);
    // SAFETY: the caller's region holds band i's three arrays, aligned for their types.
    unsafe {
        BandRef {
            q: std::slice::from_raw_parts(q, nq),
            bsums: std::slice::from_raw_parts(bs.cast::<i32>(), nbs),
            d: std::slice::from_raw_parts(d.cast::<f32>(), nd),
        }
    }
}

/// A thread's working memory on the tiled path.
#[derive(Default)]
struct Scratch {
    /// The weight rows the kernel takes at once, unpacked.
    units: Vec<Unpacked>,
    /// The chunk's activation rows, repacked in bands.
    bands: Vec<Band>,
}

thread_local! {
    /// Per-thread unpacked weight rows and repacked bands.
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// This thread's share of `dst = src0 · src1ᵀ` by the tiled path, after the activations were
/// converted to Q8_K (`act`, in the work buffer) and the chunk counter set to `p.nth` (as
/// [`super::mul_mat`] does). The threads first repack the activations in bands after them in
/// the work buffer (which holds [`bands_size`] more bytes), each band once, and meet at a
/// barrier; then they claim chunks of weight rows x activation bands. `vnni` picks the AVX-512
/// VNNI kernel (the CPU must have it), else the AVX2 one (the CPU must have AVX2 and FMA: the
/// caller's SIMD level says so).
pub(super) fn mul_mat(
    p: &ComputeParams,
    dst: &TensorRef,
    src0: &TensorRef,
    act: &Activations,
    vnni: bool,
) {
    let lay = layout(src0.dtype).expect("planned for a tiled type");
    let kern: KernelFn = if vnni { x86::vnni } else { x86::avx2 };
    let (nr0, nr1) = (src0.ne[1], act.src1.n_rows());
    let nb = src0.ne[0] / QK;
    assert!(act.converted, "the tiled path reads Q8_K rows converted into the work buffer");
    let at = (act.row_size * nr1).next_multiple_of(64);
    let nbands = nr1.div_ceil(BAND);
    assert!(p.wsize >= at + bands_size(src0, nr1), "kquant tiled: work buffer too small");
    let row_size = nb * Q8K_SIZE;
    // SAFETY: the work buffer holds the converted rows, then `nbands` bands (asserted above);
    // each thread writes only its own bands, and nobody reads them before the barrier.
    let base = unsafe { p.wdata.add(at) };
    for i in (p.ith..nbands).step_by(p.nth) {
        let rows: Vec<&[u8]> = (i * BAND..((i + 1) * BAND).min(nr1))
            // SAFETY: converted Q8_K rows of `row_size` bytes in the work buffer.
            .map(|r| unsafe { std::slice::from_raw_parts(act.row(r), row_size) })
            .collect();
        let [(q, nq), (bs, nbs), (d, nd)] = band_arrays(base, nb, i);
        // SAFETY: band i's arrays in the work buffer (see above), aligned for their types;
        // this thread's alone until the barrier.
        let (qv, bv, dv) = unsafe {
            (
                std::slice::from_raw_parts_mut(q, nq),
                std::slice::from_raw_parts_mut(bs.cast::<i32>(), nbs),
                std::slice::from_raw_parts_mut(d.cast::<f32>(), nd),
            )
        };
        fill_band(qv, bv, dv, nb, &rows);
    }
    p.sync.barrier();
    // SAFETY: every band was filled before the barrier and is only read from here on.
    let bands: Vec<BandRef> = (0..nbands).map(|i| unsafe { band_at(base, nb, i) }).collect();
    let nchunk1 = nr1.div_ceil(CHUNK1);
    let nchunk0 = (4 * p.nth).div_ceil(nchunk1).clamp(1, nr0.div_ceil(ROWS));
    let dr0 = nr0.div_ceil(nchunk0).next_multiple_of(ROWS);
    let total = nchunk0 * nchunk1;
    SCRATCH.with(|cell| {
        let scratch = &mut *cell.borrow_mut();
        scratch.units.resize_with(ROWS, Unpacked::default);
        let out = |r: usize| {
            let (i1, i2, i3) = act.src1.row_coords(r);
            // SAFETY: dst row (i1, i2, i3) exists (shape checked by mul_mat).
            unsafe { dst.row_ptr(i1, i2, i3) }.cast::<f32>()
        };
        super::for_each_claimed(p, total, |current| {
            let (c0, c1) = (current % nchunk0, current / nchunk0);
            let rows0 = (dr0 * c0).min(nr0)..(dr0 * (c0 + 1)).min(nr0);
            let rows1 = (CHUNK1 * c1)..(CHUNK1 * (c1 + 1)).min(nr1);
            let chunk_bands = &bands[rows1.start / BAND..rows1.end.div_ceil(BAND)];
            chunk(src0, &out, (lay, kern), nb, rows0, rows1, chunk_bands, &mut scratch.units);
        });
    });
}

/// Whether llama.cpp's MUL_MAT_ID takes the tiled path for an expert of type `dtype` that
/// `rows` activation rows were routed to (a tiled type, at least 8 rows: decided per expert).
pub(super) fn applies_to_expert(dtype: DType, rows: usize) -> bool {
    layout(dtype).is_some() && rows >= 8
}

/// This thread's share of one 2-D weight (an expert's matrix) against gathered activation
/// rows by the tiled path: `pairs[i] = (converted Q8_K activation row, its output row)`. A
/// contiguous range of weight rows per thread (multiples of the kernel's four), every pair in
/// it; each output's bits are the tiled kernel's whatever rows share its band.
pub(super) fn mul_mat_gathered(
    p: &ComputeParams,
    src0: &TensorRef,
    pairs: &[(*const u8, *mut f32)],
    vnni: bool,
) {
    let lay = layout(src0.dtype).expect("checked by applies_to_expert");
    let kern: KernelFn = if vnni { x86::vnni } else { x86::avx2 };
    let nr0 = src0.ne[1];
    let nb = src0.ne[0] / QK;
    let quads = nr0.div_ceil(ROWS);
    let share = |i: usize| (quads * i / p.nth * ROWS).min(nr0);
    let rows0 = share(p.ith)..share(p.ith + 1);
    if rows0.is_empty() {
        return;
    }
    let out = |r: usize| pairs[r].1;
    let row_size = nb * Q8K_SIZE;
    SCRATCH.with(|cell| {
        let Scratch { units, bands } = &mut *cell.borrow_mut();
        units.resize_with(ROWS, Unpacked::default);
        bands.resize_with(CHUNK1 / BAND, Band::default);
        for s in (0..pairs.len()).step_by(CHUNK1) {
            let rows1 = s..(s + CHUNK1).min(pairs.len());
            let starts: Vec<usize> = rows1.clone().step_by(BAND).collect();
            for (band, &b0) in bands.iter_mut().zip(&starts) {
                let rows: Vec<&[u8]> = (b0..(b0 + BAND).min(rows1.end))
                    // SAFETY: converted Q8_K rows of `row_size` bytes (the caller's pairs).
                    .map(|r| unsafe { std::slice::from_raw_parts(pairs[r].0, row_size) })
                    .collect();
                band.fill(nb, &rows);
            }
            let refs: Vec<BandRef> = bands[..starts.len()].iter().map(Band::as_ref).collect();
            chunk(src0, &out, (lay, kern), nb, rows0.clone(), rows1, &refs, units);
        }
    });
}

/// One chunk: weight rows `rows0` against activation rows `rows1` (at most [`CHUNK1`]), whose
/// bands (repacked, one per 16 rows from `rows1.start`) are `bands`; `out_row(r)` is the
/// output row activation row `r` fills.
#[allow(clippy::too_many_arguments)]
fn chunk(
    src0: &TensorRef,
    out_row: &dyn Fn(usize) -> *mut f32,
    (lay, kern): (Layout, KernelFn),
    nb: usize,
    rows0: std::ops::Range<usize>,
    rows1: std::ops::Range<usize>,
    bands: &[BandRef],
    units: &mut [Unpacked],
) {
    let starts: Vec<usize> = rows1.clone().step_by(BAND).collect();
    let src0_row = src0.row_size();
    for r0 in rows0.clone().step_by(ROWS) {
        let n0 = ROWS.min(rows0.end - r0);
        for (i, u) in units.iter_mut().enumerate() {
            u.resize(nb, lay.nsub);
            // Rows past the end repeat the last one (computed, not stored).
            let r = r0 + i.min(n0 - 1);
            // SAFETY: row r of the 2-D src0 (the plan checked), `src0_row` bytes.
            let w = unsafe { std::slice::from_raw_parts(src0.data.add(r * src0.nb[1]), src0_row) };
            let bsz = src0.dtype.type_size();
            for b in 0..nb {
                unpack_block(src0.dtype, &w[b * bsz..(b + 1) * bsz], u, b);
            }
        }
        for (band, &s) in bands.iter().zip(&starts) {
            let mut out = [[0f32; BAND]; ROWS];
            // SAFETY: the caller's level has the kernel's instructions (`mul_mat`); the buffers
            // hold `nb` blocks each.
            unsafe { kern(nb, lay, units, band, &mut out) };
            for (c, r1) in (s..(s + BAND).min(rows1.end)).enumerate() {
                let o = out_row(r1);
                for (i, row) in out.iter().enumerate().take(n0) {
                    // SAFETY: r0 + i < ne0 of the dst row; this thread owns the chunk.
                    unsafe { o.add(r0 + i).write(row[c]) };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_tensor::quant;

    /// Deterministic pseudo-random bytes and floats.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn f32s(&mut self, n: usize) -> Vec<f32> {
            (0..n).map(|_| (self.next() % 2001) as f32 / 1000.0 - 1.0).collect()
        }
        /// Random blocks of `dtype` (every byte pattern), with finite f16 scales.
        fn blocks(&mut self, dtype: DType, nb: usize) -> Vec<u8> {
            let ts = dtype.type_size();
            let mut out = Vec::new();
            for _ in 0..nb {
                loop {
                    let b: Vec<u8> = (0..ts).map(|_| self.next() as u8).collect();
                    let v = quant::dequantize(dtype, &b).unwrap();
                    if v.iter().all(|x| x.is_finite() && x.abs() < 1e6) {
                        out.extend(b);
                        break;
                    }
                }
            }
            out
        }
    }

    const TYPES: [DType; 6] =
        [DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_XS];

    // The grid i-quants (the integer form's types but the two ternary ones, which llama.cpp
    // does not tile): unpacked from the integer form `tessera_tensor` tests against the
    // dequantizers.
    use tessera_tensor::quant::ints::grid_types;

    /// `nb` random blocks of `dtype`, their dequantized values and their unpacked form.
    fn unpack_random(rng: &mut Rng, dtype: DType, nb: usize) -> (Vec<f32>, Unpacked) {
        let lay = layout(dtype).unwrap();
        let bytes = rng.blocks(dtype, nb);
        let want = quant::dequantize(dtype, &bytes).unwrap();
        let mut u = Unpacked::default();
        u.resize(nb, lay.nsub);
        let ts = dtype.type_size();
        for b in 0..nb {
            unpack_block(dtype, &bytes[b * ts..(b + 1) * ts], &mut u, b);
        }
        (want, u)
    }

    /// Rebuilds every value from the unpacked integers with the dequantizer's own formula
    /// and compares bit for bit: codes, scales, mins and corrections are right.
    #[test]
    fn unpacked_integers_rebuild_the_dequantized_values() {
        let mut rng = Rng(7);
        for dtype in TYPES {
            let lay = layout(dtype).unwrap();
            let (want, u) = unpack_random(&mut rng, dtype, 6);
            let bias = match dtype {
                DType::Q6_K => 32,
                DType::Q3_K => 4,
                DType::IQ4_XS => 128,
                _ => 0,
            };
            for (e, &w) in want.iter().enumerate() {
                let (b, i) = (e / QK, e % QK);
                let sub = i / (QK / lay.nsub);
                let scale = u.scales[b * lay.nsub + sub];
                let half = |t: usize| {
                    let p = u.corr[b * 8 + t / 2] as u32;
                    i32::from((if t % 2 == 0 { p } else { p >> 16 }) as u16 as i16)
                };
                let code = i32::from(u.codes[b * QK + i]);
                let got = if lay.mins {
                    let min = half(i / 16);
                    (u.d[b] * scale as f32) * code as f32 - u.dmin[b] * min as f32
                } else {
                    assert_eq!(half(i / 16), -bias * scale, "{dtype} correction of {e}");
                    (u.d[b] * scale as f32) * (code - bias) as f32
                };
                assert_eq!(got.to_bits(), w.to_bits(), "{dtype} element {e}: {got} vs {w}");
            }
        }
    }

    /// The grid i-quants' codes, scales, corrections and `d` rebuild the dequantized values
    /// (to f32 rounding: ggml's dequantizers round `d·scale` differently from its tiled `d`).
    #[test]
    fn grid_types_unpack_to_the_dequantized_values() {
        let mut rng = Rng(5);
        for dtype in grid_types() {
            let lay = layout(dtype).unwrap();
            let (want, u) = unpack_random(&mut rng, dtype, 4);
            for (e, &w) in want.iter().enumerate() {
                let (b, i) = (e / QK, e % QK);
                let scale = u.scales[b * lay.nsub + i / (QK / lay.nsub)];
                let p = u.corr[b * 8 + i / 32] as u32;
                let half = (if (i / 16) % 2 == 0 { p } else { p >> 16 }) as u16 as i16;
                assert_eq!(i32::from(half), -128 * scale, "{dtype} correction of {e}");
                let got = u.d[b] * scale as f32 * (i32::from(u.codes[b * QK + i]) - 128) as f32;
                assert!(
                    (got - w).abs() <= 1e-5 * w.abs().max(u.d[b].abs()),
                    "{dtype} {e}: {got} vs {w}"
                );
            }
        }
    }

    /// Both kernels against the tiled arithmetic written out in scalar code, bit for bit.
    #[test]
    fn kernels_match_the_scalar_tiled_arithmetic() {
        let level = crate::SimdLevel::detect();
        let mut kernels: Vec<(&str, KernelFn)> = Vec::new();
        if level >= crate::SimdLevel::Avx2 {
            kernels.push(("avx2", x86::avx2));
        }
        if level >= crate::SimdLevel::Avx512 && crate::has_vnni() {
            kernels.push(("vnni", x86::vnni));
        }
        if kernels.is_empty() {
            eprintln!("skipped: no AVX2");
            return;
        }
        for (name, kern) in kernels {
            check_kernel(name, kern);
        }
    }

    fn check_kernel(name: &str, kern: KernelFn) {
        let mut rng = Rng(11);
        let nb = 3;
        let rows: Vec<Vec<u8>> =
            (0..11).map(|_| quant::quantize(DType::Q8_K, &rng.f32s(nb * QK)).unwrap()).collect();
        let refs: Vec<&[u8]> = rows.iter().map(|r| r.as_slice()).collect();
        let mut band = Band::default();
        band.fill(nb, &refs);
        for dtype in TYPES.into_iter().chain(grid_types()) {
            let lay = layout(dtype).unwrap();
            let mut units: Vec<Unpacked> = (0..ROWS).map(|_| Unpacked::default()).collect();
            let ts = dtype.type_size();
            for u in &mut units {
                u.resize(nb, lay.nsub);
                let bytes = rng.blocks(dtype, nb);
                for b in 0..nb {
                    unpack_block(dtype, &bytes[b * ts..(b + 1) * ts], u, b);
                }
            }
            let mut out = [[f32::NAN; BAND]; ROWS];
            // SAFETY: the CPU has the kernel's level (checked by the caller); buffers of nb
            // blocks.
            unsafe { kern(nb, lay, &units, &band.as_ref(), &mut out) };
            for (r, u) in units.iter().enumerate() {
                for (c, row) in rows.iter().enumerate() {
                    let mut acc = 0f32;
                    for b in 0..nb {
                        let blk = &row[b * Q8K_SIZE..(b + 1) * Q8K_SIZE];
                        let dy = f32::from_le_bytes(blk[..4].try_into().unwrap());
                        let y = |i: usize| i64::from(blk[4 + i] as i8);
                        let bsum = |t: usize| {
                            i64::from(i16::from_le_bytes([blk[260 + 2 * t], blk[261 + 2 * t]]))
                        };
                        let sub_len = QK / lay.nsub;
                        let mut s1 = 0i64;
                        for sub in 0..lay.nsub {
                            let raw: i64 = (0..sub_len)
                                .map(|k| {
                                    i64::from(u.codes[b * QK + sub * sub_len + k])
                                        * y(sub * sub_len + k)
                                })
                                .sum();
                            s1 += i64::from(u.scales[b * lay.nsub + sub]) * raw;
                        }
                        let corr: i64 = (0..16)
                            .map(|t| {
                                let p = u.corr[b * 8 + t / 2] as u32;
                                let h = (if t % 2 == 0 { p } else { p >> 16 }) as u16 as i16;
                                i64::from(h) * bsum(t)
                            })
                            .sum();
                        let r = if lay.mins {
                            let r = s1 as i32 as f32 * u.d[b];
                            (-u.dmin[b]).mul_add(corr as i32 as f32, r)
                        } else {
                            (s1 + corr) as i32 as f32 * u.d[b]
                        };
                        acc = r.mul_add(dy, acc);
                    }
                    assert_eq!(out[r][c].to_bits(), acc.to_bits(), "{name} {dtype} [{r}][{c}]");
                }
                for (c, &v) in out[r].iter().enumerate().skip(rows.len()) {
                    assert_eq!(v, 0.0, "{name} {dtype}: padding row {c}");
                }
            }
        }
    }
}
