//! The kernels against the dequantized values and against a scalar model of ggml's AVX2 order.

use super::*;
// The AVX2 bodies are tested here, against the models of ggml's lanes written beside the
// generic ones.
#[cfg(target_arch = "x86_64")]
use crate::matmul::arch::x86::lowbit::{x86, KEVEN, SIGNS};
use half::f16;

/// Deterministic pseudo-random generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

/// `nb` random blocks of `dtype` with finite, modest f16 scales (TQ2_0: codes 0..=2 only).
fn weights(dtype: DType, nb: usize, rng: &mut Rng) -> Vec<u8> {
    let size = dtype.type_size();
    let mut out = Vec::with_capacity(nb * size);
    for _ in 0..nb {
        let mut blk: Vec<u8> = (0..size).map(|_| rng.next() as u8).collect();
        let d = f16::from_f32(0.002 + (rng.next() % 100) as f32 * 1e-4).to_bits();
        match dtype {
            DType::TQ1_0 => blk[52..54].copy_from_slice(&d.to_le_bytes()),
            DType::TQ2_0 => {
                blk[64..66].copy_from_slice(&d.to_le_bytes());
                for b in &mut blk[..64] {
                    for k in 0..4 {
                        if (*b >> (2 * k)) & 3 == 3 {
                            *b &= !(1 << (2 * k));
                        }
                    }
                }
            }
            DType::IQ1_M => {
                for k in 0..4 {
                    let nib = ((d >> (4 * k)) & 0xF) as u8;
                    blk[49 + 2 * k] = (blk[49 + 2 * k] & 0x0F) | nib << 4;
                }
            }
            _ => blk[..2].copy_from_slice(&d.to_le_bytes()),
        }
        out.extend_from_slice(&blk);
    }
    out
}

/// `nb` random Q8_K blocks (values in −127..=127, their block sums, a positive scale).
fn activations(nb: usize, rng: &mut Rng) -> Vec<u8> {
    let mut out = Vec::with_capacity(nb * Q8K_SIZE);
    for _ in 0..nb {
        let d = 1e-3 + (rng.next() % 1000) as f32 * 1e-5;
        let qs: Vec<i8> = (0..QK_K).map(|_| ((rng.next() % 255) as i32 - 127) as i8).collect();
        out.extend_from_slice(&d.to_le_bytes());
        out.extend(qs.iter().map(|&q| q as u8));
        for t in 0..16 {
            let s: i16 = qs[16 * t..16 * t + 16].iter().map(|&q| i16::from(q)).sum();
            out.extend_from_slice(&s.to_le_bytes());
        }
    }
    out
}

/// The f64 dot product of the dequantized rows.
fn reference(dtype: DType, x: &[u8], y: &[u8]) -> f64 {
    let xs = tessera_tensor::dequantize(dtype, x).expect("whole blocks");
    let mut sum = 0f64;
    for (i, chunk) in xs.chunks(QK_K).enumerate() {
        // SAFETY: y holds the row's blocks.
        let q = unsafe { q8k(y.as_ptr(), i) };
        for (xv, &yv) in chunk.iter().zip(q.qs) {
            sum += f64::from(*xv) * f64::from(yv) * f64::from(q.d);
        }
    }
    sum
}

/// ggml's AVX2 order written out in scalar code from [`block_ints`]: lane `l` of a block holds
/// elements `4l..4l+4` of every 32-element chunk (ternary: minus `Σ y` of elements
/// `32l..32l+32`), one FMA per block and lane, `hsum_float_8`, then the type's constant.
fn avx2_model(dtype: DType, n: usize, x: &[u8], y: &[u8]) -> f32 {
    let kind = ints_kind(dtype).expect("covered");
    let size = dtype.type_size();
    let mut ints = BlockInts::default();
    let (mut acc, mut acc2, mut acc1) = ([0f32; 8], [0f32; 8], 0f32);
    for i in 0..n / QK_K {
        block_ints(dtype, &x[i * size..(i + 1) * size], &mut ints);
        // SAFETY: y holds the row's blocks.
        let q = unsafe { q8k(y.as_ptr(), i) };
        let lane = |v: &[i8; QK_K], l: usize, scaled: bool| -> i32 {
            (0..8)
                .flat_map(|c| (0..4).map(move |k| 32 * c + 4 * l + k))
                .map(|j| {
                    let s = if scaled { ints.scales[j / 16] } else { 1 };
                    s * i32::from(v[j]) * i32::from(q.qs[j])
                })
                .sum()
        };
        let d = ints.d * q.d;
        for l in 0..8 {
            match kind {
                IntsKind::Grid { .. } => {
                    acc[l] = d.mul_add(lane(&ints.values, l, true) as f32, acc[l])
                }
                IntsKind::Iq1 => {
                    acc[l] = d.mul_add(lane(&ints.values, l, true) as f32, acc[l]);
                    if dtype == DType::IQ1_M {
                        acc2[l] = d.mul_add(lane(&ints.deltas, l, true) as f32, acc2[l]);
                    }
                }
                IntsKind::Ternary => {
                    let ysum = q.bsum(2 * l) + q.bsum(2 * l + 1);
                    let codes: i32 = lane(&ints.values, l, false)
                        + (0..8)
                            .flat_map(|c| (0..4).map(move |k| 32 * c + 4 * l + k))
                            .map(|j| i32::from(q.qs[j]))
                            .sum::<i32>();
                    acc[l] = ((codes - ysum) as f32).mul_add(d, acc[l]);
                }
            }
        }
        if dtype == DType::IQ1_S {
            let dsum = scaled_sum(&ints, &ints.deltas, q.qs);
            acc1 = (dsum as f32).mul_add(d, acc1);
        }
    }
    let hsum = |a: [f32; 8]| {
        let r: [f32; 4] = std::array::from_fn(|k| a[k + 4] + a[k]);
        (r[0] + r[2]) + (r[1] + r[3])
    };
    match kind {
        IntsKind::Grid { mult } => mult * hsum(acc),
        IntsKind::Iq1 if dtype == DType::IQ1_M => hsum(acc2).mul_add(0.125, hsum(acc)),
        IntsKind::Iq1 => hsum(acc) + 0.125 * acc1,
        IntsKind::Ternary => hsum(acc),
    }
}

#[test]
fn generic_kernels_match_the_dequantized_dot() {
    let mut rng = Rng(7);
    for &dtype in &TYPES {
        for nb in [1, 3, 8] {
            let (x, y) = (weights(dtype, nb, &mut rng), activations(nb, &mut rng));
            let f = crate::matmul::types::row(dtype).expect("covered").scalar;
            // SAFETY: nb blocks of each.
            let got = unsafe { f(nb * QK_K, x.as_ptr(), y.as_ptr()) };
            let want = reference(dtype, &x, &y);
            let scale: f64 = {
                let xs = tessera_tensor::dequantize(dtype, &x).expect("whole blocks");
                xs.iter().map(|v| f64::from(v.abs())).sum::<f64>() * 0.2
            };
            assert!(
                (f64::from(got) - want).abs() <= 1e-5 * scale.max(1e-6),
                "{dtype} nb {nb}: {got} vs {want}"
            );
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn avx2_kernels_follow_ggml_lanes() {
    if !crate::SimdLevel::available().contains(&crate::SimdLevel::Avx2) {
        return;
    }
    let mut rng = Rng(11);
    for &dtype in &TYPES {
        for nb in [1, 2, 5, 16] {
            let (x, y) = (weights(dtype, nb, &mut rng), activations(nb, &mut rng));
            let f = crate::matmul::types::row(dtype).and_then(|r| r.x86.avx2).expect("covered").one;
            // SAFETY: nb blocks of each; the CPU has AVX2 (checked above).
            let got = unsafe { f(nb * QK_K, x.as_ptr(), y.as_ptr()) };
            let want = avx2_model(dtype, nb * QK_K, &x, &y);
            assert_eq!(got.to_bits(), want.to_bits(), "{dtype} nb {nb}: {got} vs {want}");
            let generic = crate::matmul::types::row(dtype).expect("covered").scalar;
            // SAFETY: as above.
            let g = unsafe { generic(nb * QK_K, x.as_ptr(), y.as_ptr()) };
            assert!((g - got).abs() <= 1e-4 * g.abs().max(1e-3), "{dtype} nb {nb}: {g} vs {got}");
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn sign_tables_match_ggml() {
    use tessera_tensor::quant::iq_tables::KSIGNS_IQ2XS;
    for (i, &s) in KSIGNS_IQ2XS.iter().enumerate() {
        assert_eq!(KEVEN[i], SIGNS[usize::from(s)], "keven_signs {i}");
    }
}

/// TQ1_0's byte arithmetic (ggml's adds, masked shifts and averages) reads every byte value
/// in every position as ggml's reference: trit `n` of byte `q` is `((q·3ⁿ mod 256)·3) >> 8`.
#[cfg(target_arch = "x86_64")]
#[test]
fn tq1_codes_read_every_byte_as_ggml() {
    if !std::arch::is_x86_feature_detected!("avx2") {
        return;
    }
    let trit = |q: u8, n: u32| ((u16::from(q.wrapping_mul(3u8.pow(n))) * 3) >> 8) as u8;
    for start in 0..256 {
        let b: Vec<u8> = (0..54).map(|i| ((start + 37 * i) % 256) as u8).collect();
        // SAFETY: the CPU has AVX2 (checked above).
        let codes = unsafe { x86::tq1_codes(&b) };
        let mut got = [0u8; 256];
        for (chunk, c) in got.chunks_exact_mut(32).zip(codes) {
            // SAFETY: 32 bytes into a 32-byte chunk.
            unsafe {
                std::arch::x86_64::_mm256_storeu_si256(chunk.as_mut_ptr().cast(), c);
            }
        }
        let mut want = [0u8; 256];
        for n in 0..5 {
            for m in 0..32 {
                want[32 * n + m] = trit(b[m], n as u32);
            }
            for m in 0..16 {
                want[160 + 16 * n + m] = trit(b[32 + m], n as u32);
            }
        }
        for n in 0..4 {
            for j in 0..4 {
                want[240 + 4 * n + j] = trit(b[48 + j], n as u32);
            }
        }
        assert_eq!(got, want, "bytes from {start}");
    }
}
