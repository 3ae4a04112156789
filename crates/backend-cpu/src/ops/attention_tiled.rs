//! The tiled FLASH_ATTN_EXT for batches of 64+ query rows (`ggml_compute_forward_flash_attn_ext_tiled`).
//!
//! llama.cpp switches to this algorithm when a micro-batch has at least [`Q_TILE`] query rows
//! and K and V are both F16 or both F32; it is a different computation from the row-at-a-time
//! kernel (f32 queries instead of f16, f32 accumulator), so Tessera follows it to give the
//! same bits:
//!
//! - Query rows go in tiles of up to [`Q_TILE`] rows of one head; KV cells in tiles of
//!   [`KV_TILE`]. A KV tile whose mask is -inf for every row of the query tile is skipped.
//! - Scores: `KQ[i][j] = Σ_d q[i][d]·k[j][d]` as one fused multiply-add chain in `d` order from
//!   zero (K converted to f32), then `·scale`, `tanh` and `·softcap` when soft-capping, then
//!   `+ slope·mask`.
//! - Online softmax per tile: `M' = max(M, max_j KQ)`; if it grew, the accumulator row and `S`
//!   are multiplied by `exp(M − M')`; the scores become `exp(KQ − M')` (ggml's vector `expf`),
//!   and `S` gains their sum, taken in f64 (`S = f32(f64(S) + Σ)`).
//! - `VKQ[i][c] = fma(P[i][j], v[j][c], VKQ[i][c])` for `j` in order, continuing across tiles;
//!   at the end `VKQ · (1/S)`.
//!
//! Every output element's chain of operations depends only on its own query row, so the
//! split over threads and tiles does not change any result.

use super::rowio::{load, with_rows};
use super::vexp;
use crate::{ComputeParams, SimdLevel, TensorRef};
use half::slice::HalfFloatSliceExt;
use tessera_tensor::DType;

/// Query rows per tile (ggml's `ggml_fa_tile_config::Q`): also the smallest batch that takes
/// this path.
pub(crate) const Q_TILE: usize = 64;
/// KV cells per tile (ggml's `ggml_fa_tile_config::KV`).
const KV_TILE: usize = 64;

/// The smallest batch that takes this path when batched kernels are preferred
/// ([`crate::ComputeParams::prefer_batched`]): from two rows, the tile's shared K and V
/// conversions and vector `exp` already beat the row-at-a-time kernel's per-cell work.
pub(crate) const PREFERRED_MIN_ROWS: usize = 2;

/// Whether this attention takes the tiled kernel: K and V both F16 or both F32, a V row length
/// that is a multiple of 16, and at least `min_rows` query rows (llama.cpp's rule: [`Q_TILE`];
/// [`PREFERRED_MIN_ROWS`] where batched kernels are preferred).
pub(crate) fn applies(q: &TensorRef, k: &TensorRef, v: &TensorRef, min_rows: usize) -> bool {
    q.dtype == DType::F32
        && matches!(k.dtype, DType::F16 | DType::F32)
        && k.dtype == v.dtype
        && k.nb[0] == k.dtype.type_size()
        && v.nb[0] == v.dtype.type_size()
        && q.ne[1] >= min_rows
        && v.ne[0] % 16 == 0
}

/// Per-thread buffers of one query tile.
struct Tile<'a> {
    /// Query rows, f32, `[Q_TILE][d]`.
    q: &'a mut [f32],
    /// Scores, then probabilities, `[Q_TILE][KV_TILE]`.
    kq: &'a mut [f32],
    /// `slope·mask`, `[Q_TILE][KV_TILE]`.
    mask: &'a mut [f32],
    /// The V accumulator, `[Q_TILE][dv]`.
    vkq: &'a mut [f32],
    /// A V tile as f32, `[KV_TILE][dv]`.
    v: &'a mut [f32],
    /// A K tile as f32, transposed: `[d][KV_TILE]`.
    kt: &'a mut [f32],
}

/// See the module documentation; same shapes and parameters as
/// [`flash_attn_ext`](super::attention::flash_attn_ext), for which [`applies`] holds.
///
/// The work goes in items of one query tile of the heads that share a KV head (all of them, or
/// a share where there are fewer items than threads): each K and V tile is converted once for
/// the item's heads, and where the mask is the same for every head (no ALiBi, one mask plane)
/// it is read once too. Each query row's chain of operations is the one it gets alone.
pub(crate) fn flash_attn_ext_tiled(
    p: &ComputeParams,
    dst: &TensorRef,
    [q, k, v]: [&TensorRef; 3],
    [mask, sinks]: [Option<TensorRef>; 2],
    [scale, max_bias, softcap]: [f32; 3],
) {
    let (d, dv, n_q, n_head, n_kv) = (q.ne[0], v.ne[0], q.ne[1], q.ne[2], k.ne[1]);
    let n_kvh = k.ne[2];
    let group = n_head / n_kvh;
    let kq_scale = if softcap != 0.0 { scale / softcap } else { scale };
    let fused = p.simd >= SimdLevel::Avx2 && crate::simd::has_fma();
    // Items: (query tile, KV head, share of its heads); the heads split only as far as the
    // threads need.
    let n_tiles = n_q.div_ceil(Q_TILE);
    let whole = n_tiles * n_kvh * q.ne[3];
    let per = group.div_ceil(p.nth.div_ceil(whole).clamp(1, group));
    let shares = group.div_ceil(per);
    let shared_mask = max_bias == 0.0 && mask.as_ref().is_none_or(|m| m.ne[2] == 1);
    let sizes = [per * Q_TILE * d, Q_TILE * KV_TILE, Q_TILE * KV_TILE, per * Q_TILE * dv];
    let tail = KV_TILE * dv + d * KV_TILE + d;
    let (ms_len, len) = (2 * per * Q_TILE, sizes.iter().sum::<usize>() + tail);
    with_rows([len, ms_len, 0, 0], |[buf, ms, _, _]| {
        let (qs, rest) = buf.split_at_mut(sizes[0]);
        let (kq, rest) = rest.split_at_mut(sizes[1]);
        let (mk, rest) = rest.split_at_mut(sizes[2]);
        let (vkqs, rest) = rest.split_at_mut(sizes[3]);
        let (vt, rest) = rest.split_at_mut(KV_TILE * dv);
        let (kt, q_scratch) = rest.split_at_mut(d * KV_TILE);
        let (m, s) = ms.split_at_mut(per * Q_TILE);
        for item in p.split(whole * shares) {
            let (share, rest) = (item % shares, item / shares);
            let (hk, rest) = (rest % n_kvh, rest / n_kvh);
            let (iq, i3) = ((rest % n_tiles) * Q_TILE, rest / n_tiles);
            let n = Q_TILE.min(n_q - iq);
            let h0 = hk * group + share * per;
            let heads = h0..(h0 + per).min((hk + 1) * group);
            for (hi, h) in heads.clone().enumerate() {
                let rows = qs[hi * Q_TILE * d..].chunks_exact_mut(d).take(n);
                for (i, row) in rows.enumerate() {
                    // SAFETY: (iq + i, h, i3) is a row of q (n stops at the head's last row).
                    unsafe { load(q.row_ptr(iq + i, h, i3), q.dtype, q.nb[0], row) };
                }
                vkqs[hi * Q_TILE * dv..][..n * dv].iter_mut().for_each(|x| *x = 0.0);
                m[hi * Q_TILE..][..Q_TILE].iter_mut().for_each(|x| *x = f32::NEG_INFINITY);
                s[hi * Q_TILE..][..Q_TILE].iter_mut().for_each(|x| *x = 0.0);
            }
            vt.iter_mut().for_each(|x| *x = 0.0);
            for ic in (0..n_kv).step_by(KV_TILE) {
                let kv = KV_TILE.min(n_kv - ic);
                let tile_rows = (iq, i3, n, ic, kv);
                let slope_of = |h| super::attention::alibi_slope(max_bias, h, n_head);
                if let (true, Some(mt)) = (shared_mask, &mask) {
                    if !fill_mask(mk, mt, tile_rows, heads.start, slope_of(heads.start)) {
                        continue;
                    }
                }
                let mut converted = false;
                for (hi, h) in heads.clone().enumerate() {
                    if let (false, Some(mt)) = (shared_mask, &mask) {
                        if !fill_mask(mk, mt, tile_rows, h, slope_of(h)) {
                            continue;
                        }
                    }
                    if !converted {
                        convert_kv(k, v, (ic, kv, hk, i3), kt, vt, q_scratch);
                        converted = true;
                    }
                    let mut t = Tile {
                        q: &mut qs[hi * Q_TILE * d..(hi + 1) * Q_TILE * d],
                        kq: &mut *kq,
                        mask: &mut *mk,
                        vkq: &mut vkqs[hi * Q_TILE * dv..(hi + 1) * Q_TILE * dv],
                        v: &mut *vt,
                        kt: &mut *kt,
                    };
                    let ms = (&mut m[hi * Q_TILE..][..Q_TILE], &mut s[hi * Q_TILE..][..Q_TILE]);
                    let has_mask = mask.is_some();
                    tile_step(&mut t, ms, (n, kv, d, dv), [kq_scale, softcap], has_mask, p, fused);
                }
            }
            for (hi, h) in heads.enumerate() {
                let (m, s) = (&m[hi * Q_TILE..][..n], &s[hi * Q_TILE..][..n]);
                let out = vkqs[hi * Q_TILE * dv..].chunks_exact_mut(dv);
                for (i, ((&si, &mi), row)) in s.iter().zip(m).zip(out).enumerate() {
                    let si = match &sinks {
                        Some(sk) => {
                            let sink = super::attention::sink_at(sk, h);
                            super::attention::apply_sink(sink, mi, si, row, fused)
                        }
                        None => si,
                    };
                    let inv = if si == 0.0 { 0.0 } else { 1.0 / si };
                    row.iter_mut().for_each(|x| *x *= inv);
                    // SAFETY: dst row (h, iq + i, i3) belongs to this item (one per query row).
                    unsafe {
                        super::rowio::store(dst.row_ptr(h, iq + i, i3), dst.dtype, dst.nb[0], row)
                    };
                }
            }
        }
    });
}

/// KV cells `ic..ic + kv` of KV head `hk` (batch `i3`) as f32: K transposed into `kt`
/// (`[d][KV_TILE]`), V into `vt` (`[KV_TILE][dv]`), `row` a K row's scratch.
fn convert_kv(
    k: &TensorRef,
    v: &TensorRef,
    (ic, kv, hk, i3): (usize, usize, usize, usize),
    kt: &mut [f32],
    vt: &mut [f32],
    row: &mut [f32],
) {
    let dv = v.ne[0];
    for j in 0..kv {
        // SAFETY: (ic + j, hk, i3) is a row of k: d packed values.
        unsafe { row_f32(k.row_ptr(ic + j, hk, i3), k.dtype, row) };
        for (c, &x) in row.iter().enumerate() {
            kt[c * KV_TILE + j] = x;
        }
        // SAFETY: (ic + j, hk, i3) is a row of v: dv packed values.
        unsafe { row_f32(v.row_ptr(ic + j, hk, i3), v.dtype, &mut vt[j * dv..(j + 1) * dv]) };
    }
}

/// One KV tile for one head's query tile: scores, scale, soft-cap and mask, the online softmax
/// (`m`, `s`: the rows' running maximum and sum), and the V accumulation.
fn tile_step(
    t: &mut Tile<'_>,
    (m, s): (&mut [f32], &mut [f32]),
    (n, kv, d, dv): (usize, usize, usize, usize),
    [kq_scale, softcap]: [f32; 2],
    has_mask: bool,
    p: &ComputeParams,
    fused: bool,
) {
    scores(t, n, d, p.simd, fused);
    for (i, row) in t.kq.chunks_exact_mut(KV_TILE).take(n).enumerate() {
        row.iter_mut().for_each(|x| *x *= kq_scale);
        row[kv..].iter_mut().for_each(|x| *x = f32::NEG_INFINITY);
        if softcap != 0.0 {
            row.iter_mut().for_each(|x| *x = x.tanh() * softcap);
        }
        if has_mask {
            let mrow = &t.mask[i * KV_TILE..(i + 1) * KV_TILE];
            row.iter_mut().zip(mrow).for_each(|(x, &mv)| *x += mv);
        }
        let tile_max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        if tile_max == f32::NEG_INFINITY {
            row.iter_mut().for_each(|x| *x = 0.0);
            continue;
        }
        let m_new = m[i].max(tile_max);
        if m_new > m[i] {
            let ms = (m[i] - m_new).exp();
            t.vkq[i * dv..(i + 1) * dv].iter_mut().for_each(|x| *x *= ms);
            s[i] *= ms;
        }
        m[i] = m_new;
        s[i] = (f64::from(s[i]) + vexp::soft_max(row, m_new, p.simd)) as f32;
    }
    accumulate(t, n, kv, dv, p.simd, fused);
}

/// A packed F16 or F32 row of `out.len()` values as f32 (F16C where the CPU has it).
///
/// # Safety
/// `row` must hold `out.len()` packed values of `dtype`, 2-byte aligned for F16.
unsafe fn row_f32(row: *const u8, dtype: DType, out: &mut [f32]) {
    if dtype == DType::F16 {
        // SAFETY: caller (the tensor's rows are aligned to its element size).
        let h = unsafe { std::slice::from_raw_parts(row.cast::<half::f16>(), out.len()) };
        h.convert_to_f32_slice(out);
    } else {
        // SAFETY: caller.
        unsafe { load(row, dtype, 4, out) };
    }
}

/// Fills `out` with head `h`'s mask (times `slope`) for query rows `iq..iq + n` and cells
/// `ic..ic + kv` (padding with -inf); false when every one of them is -inf (the tile can be
/// skipped).
fn fill_mask(
    out: &mut [f32],
    m: &TensorRef,
    (iq, i3, n, ic, kv): (usize, usize, usize, usize, usize),
    h: usize,
    slope: f32,
) -> bool {
    let mut any = false;
    for (i, row) in out.chunks_exact_mut(KV_TILE).take(n).enumerate() {
        // SAFETY: the mask has >= n_q rows and broadcasts over dims 2 and 3; its rows hold
        // n_kv >= ic + kv elements.
        let mrow = unsafe { m.row_ptr(iq + i, h % m.ne[2], i3 % m.ne[3]).add(ic * m.nb[0]) };
        if m.nb[0] == m.dtype.type_size() {
            // SAFETY: kv packed values (checked stride).
            unsafe { row_f32(mrow, m.dtype, &mut row[..kv]) };
        } else {
            // SAFETY: kv values nb[0] bytes apart.
            unsafe { load(mrow, m.dtype, m.nb[0], &mut row[..kv]) };
        }
        for x in row[..kv].iter_mut() {
            *x *= slope;
            any |= *x != f32::NEG_INFINITY;
        }
        row[kv..].iter_mut().for_each(|x| *x = f32::NEG_INFINITY);
    }
    any
}

/// `t.kq[i][j] = Σ_c q[i][c]·kt[c][j]` for the first `n` rows, each a fused multiply-add chain
/// in `c` order from zero (separate multiply and add without FMA).
fn scores(t: &mut Tile<'_>, n: usize, d: usize, simd: SimdLevel, fused: bool) {
    #[cfg(target_arch = "x86_64")]
    if fused && simd >= SimdLevel::Avx512 {
        // SAFETY: the level is one this CPU runs (the caller lowered it).
        return unsafe { scores_avx512(t, n, d) };
    }
    #[cfg(target_arch = "x86_64")]
    if fused {
        // SAFETY: the CPU has AVX2 and FMA.
        return unsafe { scores_fma(t, n, d) };
    }
    let _ = simd;
    scores_generic::<2, 32>(t, n, d, |a, b, c| a * b + c);
}

/// The body of [`scores`], inlined into each instruction-set variant: `R` query rows against
/// `W` cells at a time, so each K value loaded serves `R` chains and the `R·W/lanes`
/// accumulators stay in registers (8 of AVX2's 16, 16 of AVX-512's 32). Rows past the last
/// whole group go one at a time; the blocking does not change any chain.
#[inline(always)]
fn scores_generic<const R: usize, const W: usize>(
    t: &mut Tile<'_>,
    n: usize,
    d: usize,
    fma: impl Fn(f32, f32, f32) -> f32 + Copy,
) {
    let whole = n - n % R;
    for i in (0..whole).step_by(R) {
        scores_block::<R, W>(t, i, d, fma);
    }
    for i in whole..n {
        scores_block::<1, W>(t, i, d, fma);
    }
}

/// Query rows `i..i + R` of [`scores_generic`].
#[inline(always)]
fn scores_block<const R: usize, const W: usize>(
    t: &mut Tile<'_>,
    i: usize,
    d: usize,
    fma: impl Fn(f32, f32, f32) -> f32,
) {
    let q: &[f32] = &t.q[i * d..(i + R) * d];
    for h in (0..KV_TILE).step_by(W) {
        let mut acc = [[0f32; W]; R];
        for c in 0..d {
            let krow: &[f32; W] =
                t.kt[c * KV_TILE + h..c * KV_TILE + h + W].try_into().expect("W values");
            for (r, acc) in acc.iter_mut().enumerate() {
                let qv = q[r * d + c];
                for (a, &kv) in acc.iter_mut().zip(krow) {
                    *a = fma(qv, kv, *a);
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            t.kq[(i + r) * KV_TILE + h..(i + r) * KV_TILE + h + W].copy_from_slice(acc);
        }
    }
}

/// [`scores`] with AVX-512.
///
/// # Safety
/// The CPU must have AVX-512 F and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn scores_avx512(t: &mut Tile<'_>, n: usize, d: usize) {
    scores_generic::<4, 64>(t, n, d, f32::mul_add);
}

/// [`scores`] with AVX2 and FMA.
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn scores_fma(t: &mut Tile<'_>, n: usize, d: usize) {
    scores_generic::<2, 32>(t, n, d, f32::mul_add);
}

/// `t.vkq[i][c] = fma(kq[i][j], v[j][c], vkq[i][c])` for `j` in `0..kv`, the first `n` rows.
fn accumulate(t: &mut Tile<'_>, n: usize, kv: usize, dv: usize, simd: SimdLevel, fused: bool) {
    #[cfg(target_arch = "x86_64")]
    if fused && simd >= SimdLevel::Avx512 {
        // SAFETY: the level is one this CPU runs (the caller lowered it).
        return unsafe { accumulate_avx512(t, n, kv, dv) };
    }
    #[cfg(target_arch = "x86_64")]
    if fused {
        // SAFETY: the CPU has AVX2 and FMA.
        return unsafe { accumulate_fma(t, n, kv, dv) };
    }
    let _ = simd;
    accumulate_generic::<2, 32>(t, n, kv, dv, |a, b, c| a * b + c);
}

/// The body of [`accumulate`]: `R` query rows and `W` output columns at a time (16 where
/// `dv` is not a multiple of `W`) kept in registers over the cells, each V value loaded
/// serving `R` chains; rows past the last whole group one at a time.
#[inline(always)]
fn accumulate_generic<const R: usize, const W: usize>(
    t: &mut Tile<'_>,
    n: usize,
    kv: usize,
    dv: usize,
    fma: impl Fn(f32, f32, f32) -> f32 + Copy,
) {
    let whole = n - n % R;
    let wide = dv % W == 0;
    for i in (0..whole).step_by(R) {
        if wide {
            accumulate_block::<R, W>(t, i, kv, dv, fma);
        } else {
            accumulate_block::<R, 16>(t, i, kv, dv, fma);
        }
    }
    for i in whole..n {
        if wide {
            accumulate_block::<1, W>(t, i, kv, dv, fma);
        } else {
            accumulate_block::<1, 16>(t, i, kv, dv, fma);
        }
    }
}

/// Query rows `i..i + R` of [`accumulate_generic`], `W` columns per pass.
#[inline(always)]
fn accumulate_block<const R: usize, const W: usize>(
    t: &mut Tile<'_>,
    i: usize,
    kv: usize,
    dv: usize,
    fma: impl Fn(f32, f32, f32) -> f32,
) {
    let p: &[f32] = &t.kq[i * KV_TILE..(i + R) * KV_TILE];
    let out = &mut t.vkq[i * dv..(i + R) * dv];
    for c0 in (0..dv).step_by(W) {
        let mut acc = [[0f32; W]; R];
        for (r, acc) in acc.iter_mut().enumerate() {
            acc.copy_from_slice(&out[r * dv + c0..r * dv + c0 + W]);
        }
        for j in 0..kv {
            let vrow: &[f32; W] = t.v[j * dv + c0..j * dv + c0 + W].try_into().expect("W values");
            for (r, acc) in acc.iter_mut().enumerate() {
                let w = p[r * KV_TILE + j];
                for (a, &x) in acc.iter_mut().zip(vrow) {
                    *a = fma(w, x, *a);
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            out[r * dv + c0..r * dv + c0 + W].copy_from_slice(acc);
        }
    }
}

/// [`accumulate`] with AVX-512.
///
/// # Safety
/// The CPU must have AVX-512 F and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn accumulate_avx512(t: &mut Tile<'_>, n: usize, kv: usize, dv: usize) {
    accumulate_generic::<4, 64>(t, n, kv, dv, f32::mul_add);
}

/// [`accumulate`] with AVX2 and FMA.
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn accumulate_fma(t: &mut Tile<'_>, n: usize, kv: usize, dv: usize) {
    accumulate_generic::<2, 32>(t, n, kv, dv, f32::mul_add);
}
