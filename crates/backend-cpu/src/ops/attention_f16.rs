//! The row flash attention's cell loop for an F16 cache, with nothing between the cells but
//! arithmetic: the same operations as [`super::attention::RowAttention::attend`]'s generic
//! loop, in the same order, so the same bits.
//!
//! The generic loop calls a dot kernel, `vec_f16::scale` and `vec_f16::mad` per cell (each
//! checking the CPU's features) and keeps ggml's f16 accumulator in memory; at a 3k-cell context
//! that overhead made decoding slower than llama.cpp. Here, for head sizes the kernels cover
//! without a tail (K a multiple of a dot step, V of a vector), the accumulator lives in
//! registers as f32 values rounded to f16 after every update (`cvtps2ph` then `cvtph2ps`,
//! which is exactly ggml's store and load of `VKQ16`), the K·q dot is ggml_vec_dot_f16's order
//! (as `matmul::dot_f16`), and the mask is read with F16C. `expf` is still libm's, as ggml's.

// The AVX-512 intrinsics are stable since Rust 1.89, above the workspace MSRV; these functions
// run only at the AVX-512 level (checked by the caller).
#![allow(clippy::incompatible_msrv)]

/// What one row's cell loop needs.
pub(super) struct Row {
    /// q converted to f16 (`d` values).
    pub q: *const u16,
    /// K and V rows of cell 0 of the row's KV head, and the bytes between cells.
    pub k: *const u8,
    pub v: *const u8,
    pub k_stride: usize,
    pub v_stride: usize,
    /// The F16 mask row (n_kv values) and the ALiBi slope, if masked.
    pub mask: Option<*const u16>,
    pub slope: f32,
    pub kq_scale: f32,
    pub softcap: f32,
}

/// Runs the loop over `cells` if a kernel covers `(d, dv)` at `simd`: leaves the f32 V sum in
/// `acc` and returns (max, sum); `None` where none does (the caller's loop runs).
///
/// # Safety
/// `row`'s pointers must be valid for every cell of `cells` (K rows of `d` f16 values, V rows
/// of `acc.len()` f16 values, `d` query values, the mask over the cells).
pub(super) unsafe fn attend(
    row: &Row,
    d: usize,
    acc: &mut [f32],
    cells: std::ops::Range<usize>,
    simd: crate::SimdLevel,
) -> Option<(f32, f32)> {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::SimdLevel;
        let dv = acc.len();
        let fma = crate::simd::has_fma() && std::is_x86_feature_detected!("f16c");
        // The AVX-512 level implies F, BW, VL and DQ (SimdLevel::detect).
        if simd >= SimdLevel::Avx512 && std::is_x86_feature_detected!("avx512f") && fma {
            // SAFETY: features checked; pointers per the caller.
            return unsafe {
                match (d % 64, dv) {
                    (0, 64) => Some(x86::avx512::<4>(row, d, acc, cells)),
                    (0, 128) => Some(x86::avx512::<8>(row, d, acc, cells)),
                    (0, 256) => Some(x86::avx512::<16>(row, d, acc, cells)),
                    _ => None,
                }
            };
        }
        if simd >= SimdLevel::Avx2 && fma {
            // SAFETY: as above.
            return unsafe {
                match (d % 32, dv) {
                    (0, 64) => Some(x86::avx2::<8>(row, d, acc, cells)),
                    (0, 128) => Some(x86::avx2::<16>(row, d, acc, cells)),
                    (0, 256) => Some(x86::avx2::<32>(row, d, acc, cells)),
                    _ => None,
                }
            };
        }
    }
    let _ = (row, d, acc, cells, simd);
    None
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Row;
    use crate::matmul::reduce_add;
    use std::arch::x86_64::*;

    /// Mask value of cell `ic` times the slope (0 without a mask).
    #[inline]
    #[target_feature(enable = "f16c")]
    unsafe fn mask(row: &Row, ic: usize) -> f32 {
        match row.mask {
            // SAFETY: the mask row covers the cells (caller); F16C is enabled by the callers.
            Some(m) => {
                // SAFETY: as above.
                let h = unsafe { m.add(ic).read_unaligned() };
                row.slope * _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h))))
            }
            None => 0.0,
        }
    }

    /// The online-softmax step of a score: (ms, vs), `max` updated (ggml's branch).
    #[inline(always)]
    fn softmax_step(s: f32, max: &mut f32) -> (f32, f32) {
        if s > *max {
            let ms = if *max == f32::NEG_INFINITY { 0.0 } else { (*max - s).exp() };
            *max = s;
            (ms, 1.0)
        } else {
            (1.0, (s - *max).exp())
        }
    }

    /// The score of a K·q dot (scaled, soft-capped, masked).
    #[inline(always)]
    fn score(row: &Row, dot: f32, mv: f32) -> f32 {
        let mut s = dot * row.kq_scale;
        if row.softcap != 0.0 {
            s = row.softcap * s.tanh();
        }
        s + mv
    }

    /// AVX-512, `NV` vectors of 16 in a V row, `d` a multiple of 64.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
    pub(super) unsafe fn avx512<const NV: usize>(
        row: &Row,
        d: usize,
        out: &mut [f32],
        cells: std::ops::Range<usize>,
    ) -> (f32, f32) {
        let mut acc = [_mm512_setzero_ps(); NV];
        let (mut max, mut sum) = (f32::NEG_INFINITY, 0f32);
        for ic in cells {
            // SAFETY: caller (every pointer covers the cells).
            let mv = unsafe { mask(row, ic) };
            if mv == f32::NEG_INFINITY {
                continue;
            }
            // SAFETY: as above.
            let (kp, vp) = unsafe {
                (row.k.add(ic * row.k_stride).cast::<u16>(), row.v.add(ic * row.v_stride))
            };
            // ggml_vec_dot_f16 (matmul::arch::x86::dot_f16::dot_avx512's order).
            let mut a = [_mm512_setzero_ps(); 4];
            let mut i = 0;
            while i < d {
                for (j, aj) in a.iter_mut().enumerate() {
                    // SAFETY: 16 values at i + 16j < d.
                    unsafe {
                        let vx = _mm512_cvtph_ps(_mm256_loadu_si256(kp.add(i + 16 * j).cast()));
                        let vy = _mm512_cvtph_ps(_mm256_loadu_si256(row.q.add(i + 16 * j).cast()));
                        *aj = _mm512_fmadd_ps(vx, vy, *aj);
                    }
                }
                i += 64;
            }
            // dot_avx512's fold, then _mm512_reduce_add_ps's order (the matmul's reduce_add).
            let a01 = _mm512_add_ps(_mm512_add_ps(a[0], a[2]), _mm512_add_ps(a[1], a[3]));
            let dot = reduce_add(a01);
            let s = score(row, dot, mv);
            let (ms, vs) = softmax_step(s, &mut max);
            if ms != 1.0 {
                let m = _mm512_set1_ps(ms);
                for x in acc.iter_mut() {
                    *x = _mm512_cvtph_ps(_mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(
                        _mm512_mul_ps(*x, m),
                    ));
                }
            }
            let w = _mm512_set1_ps(vs);
            for (j, x) in acc.iter_mut().enumerate() {
                // SAFETY: 16 values at 16j < dv of the V row.
                let vv = unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(vp.add(32 * j).cast())) };
                *x = _mm512_cvtph_ps(_mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(
                    _mm512_fmadd_ps(vv, w, *x),
                ));
            }
            sum = sum.mul_add(ms, vs);
        }
        for (j, x) in acc.iter().enumerate() {
            // SAFETY: out holds 16·NV floats (the caller's dv).
            unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(16 * j), *x) };
        }
        (max, sum)
    }

    /// [`super::attend_group`] at AVX-512: `d` a multiple of 64, `dv` of 16 (both <= 256).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
    pub(super) unsafe fn group_avx512(
        rows: &[Row],
        d: usize,
        dv: usize,
        acc: &mut [f32],
        out: &mut [(f32, f32)],
        cells: std::ops::Range<usize>,
    ) {
        let g = rows.len();
        // The queries as f32 (exact: they are f16 values), each `d` long.
        let mut qf = vec![0f32; g * d];
        for (h, r) in rows.iter().enumerate() {
            for i in (0..d).step_by(16) {
                // SAFETY: 16 of the d f16 query values; qf has room.
                unsafe {
                    let v = _mm512_cvtph_ps(_mm256_loadu_si256(r.q.add(i).cast()));
                    _mm512_storeu_ps(qf.as_mut_ptr().add(h * d + i), v);
                }
            }
        }
        acc.iter_mut().for_each(|a| *a = 0.0);
        let mut state = vec![(f32::NEG_INFINITY, 0f32); g];
        let mut kf = [0f32; 256];
        let mut vf = [0f32; 256];
        let mut step = vec![(1f32, 1f32); g];
        let r0 = &rows[0];
        for ic in cells {
            // SAFETY: caller (the mask, slope, K and V are the group's).
            let mv = unsafe { mask(r0, ic) };
            if mv == f32::NEG_INFINITY {
                continue;
            }
            // SAFETY: as above.
            let (kp, vp) = unsafe {
                (r0.k.add(ic * r0.k_stride).cast::<u16>(), r0.v.add(ic * r0.v_stride).cast::<u16>())
            };
            for i in (0..d).step_by(16) {
                // SAFETY: 16 of the d values of the K row.
                unsafe {
                    let v = _mm512_cvtph_ps(_mm256_loadu_si256(kp.add(i).cast()));
                    _mm512_storeu_ps(kf.as_mut_ptr().add(i), v);
                }
            }
            for (h, r) in rows.iter().enumerate() {
                // ggml_vec_dot_f16's order, as `avx512`.
                let q = &qf[h * d..(h + 1) * d];
                let mut a = [_mm512_setzero_ps(); 4];
                let mut i = 0;
                while i < d {
                    for (j, aj) in a.iter_mut().enumerate() {
                        // SAFETY: 16 values at i + 16j < d of kf and q.
                        unsafe {
                            let vx = _mm512_loadu_ps(kf.as_ptr().add(i + 16 * j));
                            let vy = _mm512_loadu_ps(q.as_ptr().add(i + 16 * j));
                            *aj = _mm512_fmadd_ps(vx, vy, *aj);
                        }
                    }
                    i += 64;
                }
                // dot_avx512's fold, then _mm512_reduce_add_ps's order (the matmul's reduce_add).
                let a01 = _mm512_add_ps(_mm512_add_ps(a[0], a[2]), _mm512_add_ps(a[1], a[3]));
                let dot = reduce_add(a01);
                let s = score(r, dot, mv);
                step[h] = softmax_step(s, &mut state[h].0);
            }
            for i in (0..dv).step_by(16) {
                // SAFETY: 16 of the dv values of the V row.
                unsafe {
                    let v = _mm512_cvtph_ps(_mm256_loadu_si256(vp.add(i).cast()));
                    _mm512_storeu_ps(vf.as_mut_ptr().add(i), v);
                }
            }
            for (h, &(ms, vs)) in step.iter().enumerate() {
                let ah = &mut acc[h * dv..(h + 1) * dv];
                let (m, w) = (_mm512_set1_ps(ms), _mm512_set1_ps(vs));
                for i in (0..dv).step_by(16) {
                    // SAFETY: 16 values at i < dv of the head's accumulator and of vf.
                    unsafe {
                        let p = ah.as_mut_ptr().add(i);
                        let mut x = _mm512_loadu_ps(p);
                        if ms != 1.0 {
                            x = _mm512_cvtph_ps(_mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(
                                _mm512_mul_ps(x, m),
                            ));
                        }
                        let vv = _mm512_loadu_ps(vf.as_ptr().add(i));
                        x = _mm512_cvtph_ps(_mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(
                            _mm512_fmadd_ps(vv, w, x),
                        ));
                        _mm512_storeu_ps(p, x);
                    }
                }
                state[h].1 = state[h].1.mul_add(ms, vs);
            }
        }
        out.copy_from_slice(&state);
    }

    /// AVX2, `NV` vectors of 8 in a V row, `d` a multiple of 32.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn avx2<const NV: usize>(
        row: &Row,
        d: usize,
        out: &mut [f32],
        cells: std::ops::Range<usize>,
    ) -> (f32, f32) {
        let mut acc = [_mm256_setzero_ps(); NV];
        let (mut max, mut sum) = (f32::NEG_INFINITY, 0f32);
        for ic in cells {
            // SAFETY: caller (every pointer covers the cells).
            let mv = unsafe { mask(row, ic) };
            if mv == f32::NEG_INFINITY {
                continue;
            }
            // SAFETY: as above.
            let (kp, vp) = unsafe {
                (row.k.add(ic * row.k_stride).cast::<u16>(), row.v.add(ic * row.v_stride))
            };
            // ggml_vec_dot_f16 (dot_f16::dot_avx2's order).
            let mut a = [_mm256_setzero_ps(); 4];
            let mut i = 0;
            while i < d {
                for (j, aj) in a.iter_mut().enumerate() {
                    // SAFETY: 8 values at i + 8j < d.
                    unsafe {
                        let vx = _mm256_cvtph_ps(_mm_loadu_si128(kp.add(i + 8 * j).cast()));
                        let vy = _mm256_cvtph_ps(_mm_loadu_si128(row.q.add(i + 8 * j).cast()));
                        *aj = _mm256_fmadd_ps(vx, vy, *aj);
                    }
                }
                i += 32;
            }
            let a01 = _mm256_add_ps(_mm256_add_ps(a[0], a[2]), _mm256_add_ps(a[1], a[3]));
            let t0 = _mm_add_ps(_mm256_castps256_ps128(a01), _mm256_extractf128_ps::<1>(a01));
            let t1 = _mm_hadd_ps(t0, t0);
            let dot = _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
            let s = score(row, dot, mv);
            let (ms, vs) = softmax_step(s, &mut max);
            if ms != 1.0 {
                let m = _mm256_set1_ps(ms);
                for x in acc.iter_mut() {
                    *x = _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(
                        _mm256_mul_ps(*x, m),
                    ));
                }
            }
            let w = _mm256_set1_ps(vs);
            for (j, x) in acc.iter_mut().enumerate() {
                // SAFETY: 8 values at 8j < dv of the V row.
                let vv = unsafe { _mm256_cvtph_ps(_mm_loadu_si128(vp.add(16 * j).cast())) };
                *x = _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(
                    _mm256_fmadd_ps(vv, w, *x),
                ));
            }
            sum = sum.mul_add(ms, vs);
        }
        for (j, x) in acc.iter().enumerate() {
            // SAFETY: out holds 8·NV floats (the caller's dv).
            unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(8 * j), *x) };
        }
        (max, sum)
    }
}

/// [`attend`] for the query heads sharing one KV head (`rows`, same K, V, mask and slope), at
/// once: each cell's K and V rows are widened once for all of them, the queries once for the
/// whole range; each head's arithmetic is [`attend`]'s (the same bits). Leaves head `h`'s f32 V
/// sum in `acc[h·dv..]` and its (max, sum) in `out[h]`; `false` where no kernel covers the
/// shapes (the caller runs the heads one by one).
///
/// # Safety
/// As [`attend`] for every row; `acc` holds `rows.len() · dv` floats, `out` `rows.len()`.
pub(super) unsafe fn attend_group(
    rows: &[Row],
    d: usize,
    dv: usize,
    acc: &mut [f32],
    out: &mut [(f32, f32)],
    cells: std::ops::Range<usize>,
    simd: crate::SimdLevel,
) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let fma = crate::simd::has_fma() && std::is_x86_feature_detected!("f16c");
        let ok = simd >= crate::SimdLevel::Avx512
            && std::is_x86_feature_detected!("avx512f")
            && fma
            && d % 64 == 0
            && dv % 16 == 0
            && dv <= 256
            && d <= 256;
        if ok {
            // SAFETY: features and shapes checked; pointers per the caller.
            unsafe { x86::group_avx512(rows, d, dv, acc, out, cells) };
            return true;
        }
    }
    let _ = (rows, d, dv, acc, out, cells, simd);
    false
}
