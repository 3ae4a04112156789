//! The x86 kernels of the K-quant tiled path ([`crate::matmul::kquant_tiled`], whose docs give
//! the arithmetic): four unpacked weight rows against one band of sixteen activation rows,
//! with AVX-512 VNNI ([`vnni`]) or AVX2 ([`avx2`]), the same integers and f32 epilogue.

// The AVX-512 intrinsics are stable since Rust 1.89; see the note in `avx512.rs`.
#![allow(clippy::incompatible_msrv)]

use crate::matmul::layouts::{BandRef, Layout, Unpacked, BAND, QK, ROWS};
use std::arch::x86_64::*;

/// Asserts that the four weight rows `u` and the band hold `nb` blocks (the kernels' bounds).
fn check(nb: usize, lay: Layout, u: &[Unpacked], band: &BandRef) {
    assert!(u.len() >= ROWS && band.q.len() >= nb * QK * BAND && band.d.len() >= nb * BAND);
    assert!(band.bsums.len() >= nb * 8 * BAND);
    for w in &u[..ROWS] {
        assert!(
            w.codes.len() >= nb * QK && w.scales.len() >= nb * lay.nsub && w.corr.len() >= nb * 8
        );
        assert!(w.d.len() >= nb && w.dmin.len() >= nb);
    }
}

/// Four unpacked weight rows against one band: `out[row][band row]`.
///
/// # Safety
/// The CPU must have AVX-512 F/BW/VL/DQ and VNNI; `u` and `band` must hold `nb` blocks.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
pub(in crate::matmul) unsafe fn vnni(
    nb: usize,
    lay: Layout,
    u: &[Unpacked],
    band: &BandRef,
    out: &mut [[f32; BAND]; ROWS],
) {
    check(nb, lay, u, band);
    let zero = _mm512_setzero_si512();
    let groups = 64 / lay.nsub;
    let mut acc = [_mm512_setzero_ps(); ROWS];
    for b in 0..nb {
        // SAFETY: 16 f32 of block b (asserted above).
        let dy = unsafe { _mm512_loadu_ps(band.d.as_ptr().add(b * BAND)) };
        let mut s1 = [zero; ROWS];
        for sub in 0..lay.nsub {
            let mut raw = [zero; ROWS];
            for g in 0..groups {
                let gi = b * 64 + sub * groups + g;
                // SAFETY: group gi < nb·64 of the band (asserted above): 64 bytes.
                let a = unsafe { _mm512_loadu_si512(band.q.as_ptr().add(gi * 64).cast()) };
                for (r, w) in raw.iter_mut().zip(u) {
                    // SAFETY: codes gi·4..gi·4+4 < nb·256 (asserted above).
                    let c = unsafe { w.codes.as_ptr().add(gi * 4).cast::<i32>().read_unaligned() };
                    *r = _mm512_dpbusd_epi32(*r, _mm512_set1_epi32(c), a);
                }
            }
            for ((s, r), w) in s1.iter_mut().zip(raw).zip(u) {
                let sc = _mm512_set1_epi32(w.scales[b * lay.nsub + sub]);
                *s = _mm512_add_epi32(*s, _mm512_mullo_epi32(r, sc));
            }
        }
        let mut corr = [zero; ROWS];
        for tp in 0..8 {
            // SAFETY: pair tp of block b: 16 i32 (asserted above).
            let bs =
                unsafe { _mm512_loadu_si512(band.bsums.as_ptr().add((b * 8 + tp) * BAND).cast()) };
            for (c, w) in corr.iter_mut().zip(u) {
                *c = _mm512_dpwssd_epi32(*c, _mm512_set1_epi32(w.corr[b * 8 + tp]), bs);
            }
        }
        for (((a, s), c), w) in acc.iter_mut().zip(s1).zip(corr).zip(u) {
            let mut r;
            if lay.mins {
                r = _mm512_mul_ps(_mm512_cvtepi32_ps(s), _mm512_set1_ps(w.d[b]));
                r = _mm512_fnmadd_ps(_mm512_set1_ps(w.dmin[b]), _mm512_cvtepi32_ps(c), r);
            } else {
                let s = _mm512_add_epi32(s, c);
                r = _mm512_mul_ps(_mm512_cvtepi32_ps(s), _mm512_set1_ps(w.d[b]));
            }
            *a = _mm512_fmadd_ps(r, dy, *a);
        }
    }
    for (o, a) in out.iter_mut().zip(acc) {
        // SAFETY: 16 f32.
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), a) };
    }
}

/// [`vnni`] with AVX2: the band in two halves of eight rows, `vpdpbusd` as `maddubs` + `madd`
/// (exact: see the module notes), `vpdpwssd` as `madd` + add; the same f32 epilogue.
///
/// # Safety
/// The CPU must have AVX2 and FMA; `u` and `band` must hold `nb` blocks.
#[target_feature(enable = "avx2,fma")]
pub(in crate::matmul) unsafe fn avx2(
    nb: usize,
    lay: Layout,
    u: &[Unpacked],
    band: &BandRef,
    out: &mut [[f32; BAND]; ROWS],
) {
    check(nb, lay, u, band);
    let zero = _mm256_setzero_si256();
    let ones = _mm256_set1_epi16(1);
    let flip = _mm256_set1_epi8(0x80u8 as i8);
    let groups = 64 / lay.nsub;
    for half in 0..2 {
        let lane = half * (BAND / 2);
        let mut acc = [_mm256_setzero_ps(); ROWS];
        for b in 0..nb {
            // SAFETY: 8 f32 of block b at `lane` (asserted above).
            let dy = unsafe { _mm256_loadu_ps(band.d.as_ptr().add(b * BAND + lane)) };
            let mut s1 = [zero; ROWS];
            for sub in 0..lay.nsub {
                let mut raw = [zero; ROWS];
                for g in 0..groups {
                    let gi = b * 64 + sub * groups + g;
                    // SAFETY: group gi < nb·64 of the band (asserted above): 64 bytes, this
                    // half's 32 at 4·lane.
                    let a = unsafe {
                        _mm256_loadu_si256(band.q.as_ptr().add(gi * 64 + 4 * lane).cast())
                    };
                    for (r, w) in raw.iter_mut().zip(u) {
                        // SAFETY: codes gi·4..gi·4+4 < nb·256 (asserted above).
                        let c =
                            unsafe { w.codes.as_ptr().add(gi * 4).cast::<i32>().read_unaligned() };
                        let prod = if lay.signed {
                            // The signed values (codes − 128): |q| times y with q's signs, a
                            // pair at most 2 · 127 · 128 (exact).
                            let q = _mm256_xor_si256(_mm256_set1_epi32(c), flip);
                            _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(a, q))
                        } else {
                            _mm256_maddubs_epi16(_mm256_set1_epi32(c), a)
                        };
                        *r = _mm256_add_epi32(*r, _mm256_madd_epi16(prod, ones));
                    }
                }
                for ((s, r), w) in s1.iter_mut().zip(raw).zip(u) {
                    let sc = _mm256_set1_epi32(w.scales[b * lay.nsub + sub]);
                    *s = _mm256_add_epi32(*s, _mm256_mullo_epi32(r, sc));
                }
            }
            let mut corr = [zero; ROWS];
            // Signed values carry no bias: the correction (−128·scale·Σy) is already out.
            let pairs = if lay.signed { 0 } else { 8 };
            for tp in 0..pairs {
                // SAFETY: pair tp of block b: 16 i32, this half's 8 at `lane` (asserted above).
                let bs = unsafe {
                    _mm256_loadu_si256(band.bsums.as_ptr().add((b * 8 + tp) * BAND + lane).cast())
                };
                for (c, w) in corr.iter_mut().zip(u) {
                    let m = _mm256_madd_epi16(_mm256_set1_epi32(w.corr[b * 8 + tp]), bs);
                    *c = _mm256_add_epi32(*c, m);
                }
            }
            for (((a, s), c), w) in acc.iter_mut().zip(s1).zip(corr).zip(u) {
                let mut r;
                if lay.mins {
                    r = _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(w.d[b]));
                    r = _mm256_fnmadd_ps(_mm256_set1_ps(w.dmin[b]), _mm256_cvtepi32_ps(c), r);
                } else {
                    let s = _mm256_add_epi32(s, c);
                    r = _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(w.d[b]));
                }
                *a = _mm256_fmadd_ps(r, dy, *a);
            }
        }
        for (o, a) in out.iter_mut().zip(acc) {
            // SAFETY: 8 f32 at `lane` of a 16-float row.
            unsafe { _mm256_storeu_ps(o.as_mut_ptr().add(lane), a) };
        }
    }
}
