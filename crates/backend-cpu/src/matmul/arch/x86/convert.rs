//! The AVX2 activation conversions ([`crate::matmul::convert`], whose docs give ggml's
//! arithmetic they follow).

use std::arch::x86_64::*;

/// Quantizes 32 floats as ggml's AVX2 `quantize_row_q8_0`, returning (d as f32, the 32
/// quants as i32 lanes in order 0..8, 8..16, 16..24, 24..32, and the packed bytes).
///
/// # Safety
/// `x` holds 32 readable floats.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_block(x: *const f32) -> (f32, [__m256i; 4], __m256i) {
    // SAFETY: 32 floats at x.
    let v = unsafe { [0, 8, 16, 24].map(|o| _mm256_loadu_ps(x.add(o))) };
    let sign = _mm256_set1_ps(-0.0);
    let mut amax = _mm256_andnot_ps(sign, v[0]);
    for w in &v[1..] {
        amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, *w));
    }
    let mut m4 = _mm_max_ps(_mm256_extractf128_ps::<1>(amax), _mm256_castps256_ps128(amax));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    let max = _mm_cvtss_f32(m4);
    let d = max / 127.0;
    let id = if max != 0.0 { 127.0 / max } else { 0.0 };
    let mul = _mm256_set1_ps(id);
    let q = v.map(|w| {
        let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm256_mul_ps(w, mul),
        );
        _mm256_cvtps_epi32(r)
    });
    let lo = _mm256_packs_epi32(q[0], q[1]);
    let hi = _mm256_packs_epi32(q[2], q[3]);
    let bytes = _mm256_packs_epi16(lo, hi);
    let bytes = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    (d, q, bytes)
}

/// f32 → f16 bits with round to nearest even.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn f16_bits(x: f32) -> u16 {
    _mm_extract_epi16::<0>(_mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_set_ss(x))) as u16
}

/// AVX2 f32 → Q8_0 (ggml's x86 `quantize_row_q8_0`).
///
/// # Safety
/// The [`FromF32`](crate::matmul::FromF32) contract, and AVX2/FMA/F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn q8_0_avx2(x: *const f32, y: *mut u8, n: usize) {
    for i in 0..n / 32 {
        // SAFETY: block i of the row: 32 floats in, 34 bytes out.
        unsafe {
            let (d, _, bytes) = q8_block(x.add(32 * i));
            let out = y.add(34 * i);
            out.cast::<u16>().write_unaligned(f16_bits(d));
            _mm256_storeu_si256(out.add(2).cast(), bytes);
        }
    }
}

/// AVX2 f32 → Q8_1 (ggml's x86 `quantize_row_q8_1`).
///
/// # Safety
/// The [`FromF32`](crate::matmul::FromF32) contract, and AVX2/FMA/F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn q8_1_avx2(x: *const f32, y: *mut u8, n: usize) {
    for i in 0..n / 32 {
        // SAFETY: block i of the row: 32 floats in, 36 bytes out.
        unsafe {
            let (d, q, bytes) = q8_block(x.add(32 * i));
            let s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
            let sum = super::avx2::hsum_epi32(s);
            let out = y.add(36 * i);
            out.cast::<u16>().write_unaligned(f16_bits(d));
            out.add(2).cast::<u16>().write_unaligned(f16_bits(d * sum as f32));
            _mm256_storeu_si256(out.add(4).cast(), bytes);
        }
    }
}

/// AVX2 f32 → Q8_K, bit-exact with the reference `quantize_row_q8_K_ref`.
///
/// # Safety
/// The [`FromF32`](crate::matmul::FromF32) contract, and AVX2/FMA/F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn q8_k_avx2(x: *const f32, y: *mut u8, n: usize) {
    let sign = _mm256_set1_ps(-0.0);
    for i in 0..n / 256 {
        // SAFETY: block i of the row: 256 floats in.
        let v: [__m256; 32] =
            unsafe { std::array::from_fn(|k| _mm256_loadu_ps(x.add(256 * i + 8 * k))) };
        let out = y.wrapping_add(292 * i);
        let mut amax = _mm256_setzero_ps();
        for w in &v {
            amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, *w));
        }
        let mut m4 = _mm_max_ps(_mm256_extractf128_ps::<1>(amax), _mm256_castps256_ps128(amax));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        let amax = _mm_cvtss_f32(m4);
        if amax == 0.0 {
            // SAFETY: the 292-byte block i of the output row.
            unsafe { out.write_bytes(0, 292) };
            continue;
        }
        // The reference keeps the sign of the first element of largest magnitude.
        let target = _mm256_set1_ps(amax);
        let first = v
            .iter()
            .enumerate()
            .find_map(|(k, w)| {
                let hit = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(
                    _mm256_andnot_ps(sign, *w),
                    target,
                ));
                (hit != 0).then(|| 8 * k + hit.trailing_zeros() as usize)
            })
            .expect("the maximum is one of the values");
        // SAFETY: first < 256, inside block i.
        let max = unsafe { x.add(256 * i + first).read_unaligned() };
        let iscale = -127.0 / max;
        let mul = _mm256_set1_ps(iscale);
        let q: [__m256i; 32] = v.map(|w| {
            _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(w, mul)), _mm256_set1_epi32(127))
        });
        let perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        for g in 0..8 {
            let lo = _mm256_packs_epi32(q[4 * g], q[4 * g + 1]);
            let hi = _mm256_packs_epi32(q[4 * g + 2], q[4 * g + 3]);
            let bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(lo, hi), perm);
            // SAFETY: bytes 4 + 32g .. 4 + 32(g+1) of the output block.
            unsafe { _mm256_storeu_si256(out.add(4 + 32 * g).cast(), bytes) };
        }
        for j in 0..16 {
            let s = _mm256_add_epi32(q[2 * j], q[2 * j + 1]);
            let sum = super::avx2::hsum_epi32(s) as i16;
            // SAFETY: bsums[j] of the output block.
            unsafe { out.add(260 + 2 * j).cast::<i16>().write_unaligned(sum) };
        }
        // SAFETY: `d`, the first 4 bytes of the output block.
        unsafe { out.cast::<f32>().write_unaligned(1.0 / iscale) };
    }
}

/// AVX2 f32 → f16 (F16C, round to nearest even).
///
/// # Safety
/// The [`FromF32`](crate::matmul::FromF32) contract, and AVX2/FMA/F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn f16_avx2(x: *const f32, y: *mut u8, n: usize) {
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: elements i..i+8 of both rows.
        unsafe {
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(x.add(i)));
            _mm_storeu_si128(y.add(2 * i).cast(), h);
        }
        i += 8;
    }
    for j in i..n {
        // SAFETY: j < n, within both rows.
        unsafe { y.cast::<u16>().add(j).write_unaligned(f16_bits(x.add(j).read_unaligned())) };
    }
}
