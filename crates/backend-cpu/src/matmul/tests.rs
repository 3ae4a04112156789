//! Tests of the matmul kernels: every weight type × SIMD level × shape against an f64
//! reference of `dequantize(src0) · src1` (NMSE ≤ 5e-4, llama.cpp's MUL_MAT threshold), SIMD
//! dot products against the scalar ones, four-row kernels against one-row kernels, activation
//! quantization against ggml's semantics, thread-count independence and strided activations.

use super::*;
use crate::ThreadSync;
use half::f16;
use std::sync::atomic::AtomicUsize;
use std::sync::Barrier;

/// llama.cpp's NMSE threshold for MUL_MAT.
const MAX_NMSE: f64 = 5e-4;

/// xorshift64*, deterministic.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in [-1, 1).
    fn f32(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    pub(super) fn f32s(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.f32()).collect()
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| (self.next() >> 56) as u8).collect()
    }
}

/// The weight types to test: every type `mul_mat` supports.
fn weight_types() -> Vec<DType> {
    DType::ALL.into_iter().filter(|&t| supports(t, DType::F32)).collect()
}

/// `n` values of `dtype` as bytes: quantized from uniform [-1, 1) values when the type has a
/// quantizer (`random` = false), otherwise random blocks whose dequantized values are finite
/// and moderate (small integers for the integer types).
fn weights(dtype: DType, n: usize, rng: &mut Rng, random: bool) -> Vec<u8> {
    let small_int = |rng: &mut Rng| (rng.f32() * 100.0).round();
    match dtype {
        DType::I8 => (0..n).map(|_| small_int(rng) as i8 as u8).collect(),
        DType::I16 => (0..n).flat_map(|_| (small_int(rng) as i16).to_le_bytes()).collect(),
        DType::I32 => (0..n).flat_map(|_| (small_int(rng) as i32).to_le_bytes()).collect(),
        DType::I64 => (0..n).flat_map(|_| (small_int(rng) as i64).to_le_bytes()).collect(),
        DType::F64 => (0..n).flat_map(|_| f64::from(rng.f32()).to_le_bytes()).collect(),
        t if !t.is_quantized() || (!random && quant::can_quantize(t)) => {
            quant::quantize(t, &rng.f32s(n)).expect("quantize")
        }
        t => {
            let (bs, ts) = (t.block_size(), t.type_size());
            let mut out = Vec::with_capacity(n / bs * ts);
            let mut vals = vec![0f32; bs];
            for _ in 0..n / bs {
                loop {
                    let b = rng.bytes(ts);
                    quant::dequantize_row(t, &b, &mut vals).expect("dequantize");
                    if vals.iter().all(|v| v.is_finite() && v.abs() < 1e4) {
                        out.extend_from_slice(&b);
                        break;
                    }
                }
            }
            out
        }
    }
}

/// A host tensor: 8-byte aligned storage plus the layout `TensorRef` describes.
struct Host {
    buf: Vec<u64>,
    dtype: DType,
    ne: [usize; 4],
    nb: [usize; 4],
    /// Marked as a weight llama.cpp would repack (`TensorRef::repacked`).
    repacked: bool,
}

impl Host {
    /// A packed tensor holding `bytes`.
    fn packed(dtype: DType, ne: [usize; 4], bytes: &[u8]) -> Host {
        let row = dtype.type_size() * ne[0] / dtype.block_size();
        let nb = [dtype.type_size(), row, row * ne[1], row * ne[1] * ne[2]];
        Host::with_layout(dtype, ne, nb, bytes.len(), |buf| {
            buf[..bytes.len()].copy_from_slice(bytes)
        })
    }

    fn with_layout(
        dtype: DType,
        ne: [usize; 4],
        nb: [usize; 4],
        size: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Host {
        let mut buf = vec![0u64; size.div_ceil(8)];
        // SAFETY: u64 storage viewed as its bytes (no padding, any bit pattern valid).
        fill(unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast(), 8 * buf.len()) });
        Host { buf, dtype, ne, nb, repacked: false }
    }

    fn tref(&self) -> TensorRef {
        let t = TensorRef::new(self.buf.as_ptr().cast_mut().cast(), self.dtype, self.ne, self.nb);
        TensorRef { repacked: self.repacked, ..t }
    }
}

/// A barrier and chunk counter for `n` test threads.
struct TestSync {
    barrier: Barrier,
    counter: AtomicUsize,
}

impl ThreadSync for TestSync {
    fn barrier(&self) {
        self.barrier.wait();
    }
    fn chunk_counter(&self) -> &AtomicUsize {
        &self.counter
    }
}

/// A NaN no kernel produces, around and (before the run) inside dst.
const SENTINEL: u32 = 0x7fc0_5a5a;

/// Runs `mul_mat` on `nth` threads; checks no write lands outside dst; returns dst.
fn run(src0: &Host, src1: &Host, nth: usize, simd: SimdLevel) -> Vec<f32> {
    run_with(src0, src1, nth, simd, false)
}

/// [`run`], in batch-invariant mode or not.
fn run_with(
    src0: &Host,
    src1: &Host,
    nth: usize,
    simd: SimdLevel,
    batch_invariant: bool,
) -> Vec<f32> {
    const PAD: usize = 19;
    let (a, b) = (src0.tref(), src1.tref());
    let ne = [a.ne[1], b.ne[1], b.ne[2], b.ne[3]];
    let n: usize = ne.iter().product();
    let mut out = vec![f32::from_bits(SENTINEL); n + 2 * PAD];
    let nb = [4, 4 * ne[0], 4 * ne[0] * ne[1], 4 * ne[0] * ne[1] * ne[2]];
    let d = TensorRef::new(out[PAD..].as_mut_ptr().cast(), DType::F32, ne, nb);
    let wsize = work_size(&a, &b);
    let mut work = vec![0u64; wsize.div_ceil(8)];
    let wdata = work.as_mut_ptr() as usize;
    let sync = TestSync { barrier: Barrier::new(nth), counter: AtomicUsize::new(0) };
    std::thread::scope(|s| {
        for ith in 0..nth {
            let sync = &sync;
            s.spawn(move || {
                let p = ComputeParams {
                    ith,
                    nth,
                    wdata: wdata as *mut u8,
                    wsize,
                    sync,
                    simd,
                    batch_invariant,
                    prefer_batched: false,
                };
                mul_mat(&p, &d, &a, &b);
            });
        }
    });
    assert!(
        out[..PAD].iter().chain(&out[PAD + n..]).all(|v| v.to_bits() == SENTINEL),
        "write outside dst"
    );
    let dst = out[PAD..PAD + n].to_vec();
    assert!(dst.iter().all(|v| v.to_bits() != SENTINEL), "dst element not written");
    dst
}

/// f64 reference: `dst[i3][i2][i1][i0] = Σ_k w(i0, i2/r2, i3/r3)[k] · x(i1, i2, i3)[k]`, from
/// the dequantized weights and the activations as f32.
fn reference(w: &[f32], wne: [usize; 4], x: &[f32], xne: [usize; 4]) -> Vec<f64> {
    let k = wne[0];
    let (r2, r3) = (xne[2] / wne[2], xne[3] / wne[3]);
    let mut out = Vec::with_capacity(wne[1] * xne[1] * xne[2] * xne[3]);
    for i3 in 0..xne[3] {
        for i2 in 0..xne[2] {
            for i1 in 0..xne[1] {
                let xr = &x[((i3 * xne[2] + i2) * xne[1] + i1) * k..][..k];
                for i0 in 0..wne[1] {
                    let wr = &w[(((i3 / r3) * wne[2] + i2 / r2) * wne[1] + i0) * k..][..k];
                    out.push(wr.iter().zip(xr).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum());
                }
            }
        }
    }
    out
}

/// The little-endian bytes of `x`.
fn f32_bytes(x: &[f32]) -> Vec<u8> {
    x.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// A block of type `B` read from exactly its bytes.
fn read_block<B: Copy>(bytes: &[u8]) -> B {
    assert_eq!(bytes.len(), std::mem::size_of::<B>());
    // SAFETY: the blocks are plain-old-data structs of exactly these bytes.
    unsafe { bytes.as_ptr().cast::<B>().read_unaligned() }
}

fn nmse(got: &[f32], want: &[f64]) -> f64 {
    let err: f64 = got.iter().zip(want).map(|(&g, &w)| (f64::from(g) - w).powi(2)).sum();
    let norm: f64 = want.iter().map(|w| w * w).sum();
    err / norm.max(f64::MIN_POSITIVE)
}

/// (K, M, N, ne02, ne12, ne03, ne13) cases: square-ish, broadcast over dim 2, matrix-vector,
/// broadcast over dim 3, a single output.
const SHAPES: [(usize, usize, usize, usize, usize, usize, usize); 5] = [
    (256, 33, 7, 1, 1, 1, 1),
    (512, 17, 5, 2, 4, 1, 1),
    (256, 70, 1, 1, 1, 1, 1),
    (512, 3, 19, 1, 2, 1, 2),
    (256, 1, 1, 1, 1, 1, 1),
];

#[test]
fn every_type_level_and_shape_matches_f64_reference() {
    let mut rng = Rng(0x1234_5678);
    let levels = SimdLevel::available();
    let mut failures = Vec::new();
    for dtype in weight_types() {
        for &(k, m, n, ne02, ne12, ne03, ne13) in &SHAPES {
            let wne = [k, m, ne02, ne03];
            let xne = [k, n, ne12, ne13];
            let wbytes = weights(dtype, k * m * ne02 * ne03, &mut rng, false);
            let w = quant::dequantize(dtype, &wbytes).expect("dequantize");
            let x = rng.f32s(k * n * ne12 * ne13);
            // Q8_K activations are quantized the same way at every level: the reference takes
            // them as the kernels see them, so a single output's rounding noise (the last
            // shape) cannot pass for a kernel error.
            let seen = if vec_dot_type(dtype) == DType::Q8_K {
                quant::dequantize(DType::Q8_K, &quant::quantize(DType::Q8_K, &x).expect("q8_k"))
                    .expect("q8_k")
            } else {
                x.clone()
            };
            let want = reference(&w, wne, &seen, xne);
            let src0 = Host::packed(dtype, wne, &wbytes);
            let src1 = Host::packed(DType::F32, xne, &f32_bytes(&x));
            for &simd in &levels {
                let one = run(&src0, &src1, 1, simd);
                let e = nmse(&one, &want);
                if e.is_nan() || e > MAX_NMSE {
                    failures.push(format!("{dtype} {simd} {wne:?}x{xne:?}: nmse {e:e}"));
                }
                for nth in [2, 3] {
                    let many = run(&src0, &src1, nth, simd);
                    if many.iter().zip(&one).any(|(a, b)| a.to_bits() != b.to_bits()) {
                        failures.push(format!(
                            "{dtype} {simd} {wne:?}x{xne:?}: {nth} threads differ from 1"
                        ));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Weight types with kernels of their own.
fn dot_types() -> Vec<DType> {
    DType::ALL.into_iter().filter(|&t| types::row(t).is_some()).collect()
}

/// `Σ |x|·|y|` in f64 of a weight row and a converted activation row (the scale of the
/// rounding error any order of summation makes).
fn abs_dot(dtype: DType, x: &[u8], vdt: DType, y: &[u8]) -> f64 {
    let (a, b) = (quant::dequantize(dtype, x).unwrap(), quant::dequantize(vdt, y).unwrap());
    a.iter().zip(&b).map(|(&a, &b)| f64::from(a.abs()) * f64::from(b.abs())).sum()
}

/// Converts f32 values to `vdt` at level `simd`.
fn convert_row(vdt: DType, simd: SimdLevel, x: &[f32]) -> Vec<u8> {
    let mut out = vec![0u8; converted_row_size(vdt, x.len()) + 1];
    // SAFETY: x holds x.len() floats; out has room for the converted row; the level is one
    // this CPU has (from `available`).
    unsafe { convert::from_f32(vdt, simd)(x.as_ptr(), out.as_mut_ptr(), x.len()) };
    out.pop();
    out
}

#[test]
fn simd_dots_agree_with_scalar_and_tiled_kernels_with_one_row() {
    let mut rng = Rng(42);
    let mut failures = Vec::new();
    for dtype in dot_types() {
        let vdt = vec_dot_type(dtype);
        let bs = dtype.block_size();
        let mut lengths = vec![256, 512, 4096];
        if bs == 1 {
            lengths.extend([1, 7, 31, 33, 100, 1000]);
        } else if bs == 32 {
            lengths.extend([32, 96, 224]);
        }
        for &n in &lengths {
            for random in [false, true] {
                let x = weights(dtype, n, &mut rng, random);
                let y_f32: Vec<Vec<f32>> = (0..8).map(|_| rng.f32s(n)).collect();
                let Kernel::Dot { dot: scalar_dot, .. } = kernel(dtype, SimdLevel::Scalar) else {
                    unreachable!()
                };
                for simd in SimdLevel::available() {
                    let ys: Vec<Vec<u8>> =
                        y_f32.iter().map(|y| convert_row(vdt, simd, y)).collect();
                    let Kernel::Dot { dot, dot4, tile, .. } = kernel(dtype, simd) else {
                        unreachable!()
                    };
                    // SAFETY: rows of n elements of the kernel's types; the level runs here.
                    let one: Vec<f32> =
                        ys.iter().map(|y| unsafe { dot(n, x.as_ptr(), y.as_ptr()) }).collect();
                    for (y, &got) in ys.iter().zip(&one) {
                        // SAFETY: as above, at the scalar level.
                        let want = unsafe { scalar_dot(n, x.as_ptr(), y.as_ptr()) };
                        let tol = 1e-5 * abs_dot(dtype, &x, vdt, y);
                        let diff = f64::from((got - want).abs());
                        if diff.is_nan() || diff > tol {
                            failures.push(format!("{dtype} {simd} n={n} random={random}: {got} vs scalar {want} (tol {tol:e})"));
                        }
                    }
                    if let Some(tile) = tile {
                        // Four weight rows: the tested one and three others.
                        let others: Vec<Vec<u8>> =
                            (0..3).map(|_| weights(dtype, n, &mut rng, random)).collect();
                        let xs = [
                            x.as_ptr(),
                            others[0].as_ptr(),
                            others[1].as_ptr(),
                            others[2].as_ptr(),
                        ];
                        let ptrs: [*const u8; 8] = std::array::from_fn(|j| ys[j].as_ptr());
                        // out[c][r]: activation row c, weight row r.
                        let mut out = [[f32::NAN; 4]; 8];
                        let outs: [*mut f32; 8] = std::array::from_fn(|c| out[c].as_mut_ptr());
                        // SAFETY: as above, for each of the weight and activation rows; each
                        // outs[c] has room for four results.
                        unsafe { (tile.f)(n, xs, &ptrs, &outs) };
                        for r in 0..4 {
                            for (c, col) in out[..tile.cols].iter().enumerate() {
                                let got = &col[r];
                                // SAFETY: as above.
                                let want = unsafe { dot(n, xs[r], ptrs[c]) };
                                if got.to_bits() != want.to_bits() {
                                    failures.push(format!(
                                        "{dtype} {simd} n={n}: tile [{r}][{c}] {got} != one-row {want}"
                                    ));
                                }
                            }
                        }
                    }
                    if let Some(dot4) = dot4 {
                        let ptrs = [0, 1, 2, 3].map(|j| ys[j].as_ptr());
                        // SAFETY: as above, for each of the four rows.
                        let four = unsafe { dot4(n, x.as_ptr(), ptrs) };
                        if four.iter().zip(&one).any(|(a, b)| a.to_bits() != b.to_bits()) {
                            failures.push(format!(
                                "{dtype} {simd} n={n}: four-row {four:?} != one-row {one:?}"
                            ));
                        }
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// ggml's x86 SIMD Q8_0 quantization of one block, in plain Rust: `d = amax/127` as f16,
/// multiplier `127/amax`, round half to even.
fn ggml_simd_q8(x: &[f32]) -> (f32, [i8; 32]) {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    (amax / 127.0, std::array::from_fn(|j| (x[j] * id).round_ties_even() as i8))
}

#[test]
fn simd_activation_quantization_follows_ggml() {
    let mut rng = Rng(7);
    let mut x = rng.f32s(32 * 64);
    // Exact ties: amax 127 makes the multiplier exactly 1.
    x[..8].copy_from_slice(&[127.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5]);
    x[32..64].fill(0.0);
    for simd in SimdLevel::available().into_iter().filter(|&s| s > SimdLevel::Scalar) {
        let q8_0 = convert_row(DType::Q8_0, simd, &x);
        let q8_1 = convert_row(DType::Q8_1, simd, &x);
        for (b, xb) in x.chunks_exact(32).enumerate() {
            let (d, q) = ggml_simd_q8(xb);
            let blk: BlockQ8_0 = read_block(&q8_0[34 * b..34 * b + 34]);
            assert_eq!((blk.d, blk.qs), (f16::from_f32(d), q), "{simd} Q8_0 block {b}");
            let blk: BlockQ8_1 = read_block(&q8_1[36 * b..36 * b + 36]);
            let sum: i32 = q.iter().map(|&v| i32::from(v)).sum();
            assert_eq!(
                (blk.d, blk.s, blk.qs),
                (f16::from_f32(d), f16::from_f32(d * sum as f32), q),
                "{simd} Q8_1 block {b}"
            );
        }
        assert_eq!(
            q8_0[2..10],
            [127, 0, 2, 2, 0, -2i8 as u8, -2i8 as u8, 4],
            "{simd}: round half to even"
        );
    }
    // The scalar level is ggml's reference: ties away from zero.
    let q = convert_row(DType::Q8_0, SimdLevel::Scalar, &x);
    assert_eq!(q[2..10], [127, 1, 2, 3, -1i8 as u8, -2i8 as u8, -3i8 as u8, 4]);
}

use tessera_tensor::blocks::{BlockQ8_0, BlockQ8_1};

#[test]
fn simd_q8_k_quantization_is_the_reference_bit_for_bit() {
    let mut rng = Rng(99);
    let mut x = rng.f32s(256 * 8);
    x[256..512].fill(0.0); // an all-zero block
    x[512..768].iter_mut().for_each(|v| *v = (*v * 8.0).round() / 2.0); // many ties
    x[768 + 3] = -2.0; // first of largest magnitude is negative...
    x[768 + 9] = 2.0; // ...and a later one positive
    x[1024..1280].iter_mut().for_each(|v| *v *= 1e-30); // tiny values
    let want = convert_row(DType::Q8_K, SimdLevel::Scalar, &x);
    for simd in SimdLevel::available() {
        assert_eq!(convert_row(DType::Q8_K, simd, &x), want, "{simd}");
    }
}

#[test]
fn f16_and_bf16_activation_conversion_rounds_to_nearest_even() {
    let mut rng = Rng(5);
    let x: Vec<f32> =
        rng.f32s(1003).into_iter().chain([65520.0, 1e-8, f32::INFINITY, -0.0]).collect();
    let want_f16: Vec<u8> =
        x.iter().flat_map(|&v| f16::from_f32(v).to_bits().to_le_bytes()).collect();
    let want_bf16: Vec<u8> = x.iter().flat_map(|&v| quant::f32_to_bf16(v).to_le_bytes()).collect();
    for simd in SimdLevel::available() {
        assert_eq!(convert_row(DType::F16, simd, &x), want_f16, "{simd}");
        assert_eq!(convert_row(DType::BF16, simd, &x), want_bf16, "{simd}");
    }
}

/// F32 activations in a non-packed layout: rows padded (nb1 > row size) and dims 1/2
/// swapped, or elements strided (a transposed matrix).
fn strided_src1(x: &[f32], xne: [usize; 4], transposed: bool) -> Host {
    let k = xne[0];
    let (nb, size) = if transposed {
        // Element (i0, i1, i2): at ((i2 * k + i0) * ne1 + i1) * 4.
        let nb = [4 * xne[1], 4, 4 * xne[1] * k, 4 * xne[1] * k * xne[2]];
        (nb, 4 * x.len())
    } else {
        // Rows padded to k + 3 floats, dims 1 and 2 swapped in memory.
        let row = 4 * (k + 3);
        let nb = [4, row * xne[2], row, row * xne[1] * xne[2]];
        (nb, row * xne[1] * xne[2] * xne[3])
    };
    Host::with_layout(DType::F32, xne, nb, size, |buf| {
        for i2 in 0..xne[2] {
            for i1 in 0..xne[1] {
                for i0 in 0..k {
                    let v = x[(i2 * xne[1] + i1) * k + i0];
                    let at = i0 * nb[0] + i1 * nb[1] + i2 * nb[2];
                    buf[at..at + 4].copy_from_slice(&v.to_le_bytes());
                }
            }
        }
    })
}

#[test]
fn strided_and_half_precision_activations() {
    let mut rng = Rng(11);
    let (k, m, n, ne2) = (256, 21, 6, 3);
    for dtype in [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q4_K,
        DType::Q6_K,
        DType::IQ2_XXS,
    ] {
        let wne = [k, m, 1, 1];
        let xne = [k, n, ne2, 1];
        let wbytes = weights(dtype, k * m, &mut rng, false);
        let w = quant::dequantize(dtype, &wbytes).unwrap();
        let x = rng.f32s(k * n * ne2);
        let src0 = Host::packed(dtype, wne, &wbytes);
        let x16: Vec<f32> = x.iter().map(|&v| f16::from_f32(v).to_f32()).collect();
        let xb16: Vec<f32> =
            x.iter().map(|&v| f32::from_bits(u32::from(quant::f32_to_bf16(v)) << 16)).collect();
        let cases = [
            ("padded+permuted", strided_src1(&x, xne, false), &x),
            ("transposed", strided_src1(&x, xne, true), &x),
            ("f16", Host::packed(DType::F16, xne, &quant::quantize(DType::F16, &x).unwrap()), &x16),
            (
                "bf16",
                Host::packed(DType::BF16, xne, &quant::quantize(DType::BF16, &x).unwrap()),
                &xb16,
            ),
        ];
        for (what, src1, values) in &cases {
            let want = reference(&w, wne, values, xne);
            for simd in SimdLevel::available() {
                for nth in [1, 2] {
                    let e = nmse(&run(&src0, src1, nth, simd), &want);
                    assert!(e <= MAX_NMSE, "{dtype} {what} {simd} {nth} threads: nmse {e:e}");
                }
            }
        }
    }
}

#[test]
fn flash_attention_dots_match_f64() {
    let mut rng = Rng(3);
    for n in [0, 1, 7, 16, 31, 33, 100, 257] {
        let (a, b) = (rng.f32s(n), rng.f32s(n));
        let (ah, bh): (Vec<f16>, Vec<f16>) = (
            a.iter().map(|&v| f16::from_f32(v)).collect(),
            b.iter().map(|&v| f16::from_f32(v)).collect(),
        );
        let want32: f64 = a.iter().zip(&b).map(|(&x, &y)| f64::from(x) * f64::from(y)).sum();
        let want16: f64 =
            ah.iter().zip(&bh).map(|(x, y)| f64::from(x.to_f32()) * f64::from(y.to_f32())).sum();
        for simd in SimdLevel::ALL {
            let got32 = dot_f32(n, a.as_ptr(), b.as_ptr(), simd);
            let got16 = dot_f16(n, ah.as_ptr(), bh.as_ptr(), simd);
            assert!(
                (f64::from(got32) - want32).abs() <= 1e-5 * (1.0 + n as f64),
                "f32 n={n} {simd}"
            );
            assert!(
                (f64::from(got16) - want16).abs() <= 1e-5 * (1.0 + n as f64),
                "f16 n={n} {simd}"
            );
        }
    }
}

#[test]
fn supports_and_work_size() {
    for dtype in DType::ALL {
        let expected = quant::can_dequantize(dtype);
        assert_eq!(supports(dtype, DType::F32), expected, "{dtype}");
        assert_eq!(supports(dtype, DType::F16), expected, "{dtype}");
        assert!(!supports(dtype, DType::I32), "{dtype}");
        assert!(!supports(dtype, DType::Q8_0), "{dtype}");
    }
    let t = |dtype: DType, ne: [usize; 4]| Host::packed(dtype, ne, &[]).tref();
    let x = t(DType::F32, [4096, 3, 2, 1]);
    assert_eq!(work_size(&t(DType::F32, [4096, 8, 1, 1]), &x), 0);
    assert_eq!(work_size(&t(DType::F64, [4096, 8, 1, 1]), &x), 0);
    assert_eq!(
        work_size(&t(DType::IQ2_XXS, [4096, 8, 1, 1]), &x),
        (16 * 292 * 6usize).next_multiple_of(64)
    );
    assert_eq!(work_size(&t(DType::F16, [4096, 8, 1, 1]), &x), 4096 * 2 * 6);
    assert_eq!(
        work_size(&t(DType::Q4_0, [4096, 8, 1, 1]), &x),
        (128 * 34 * 6usize).next_multiple_of(64)
    );
    assert_eq!(
        work_size(&t(DType::Q5_1, [4096, 8, 1, 1]), &x),
        (128 * 36 * 6usize).next_multiple_of(64)
    );
    assert_eq!(
        work_size(&t(DType::Q4_K, [4096, 8, 1, 1]), &x),
        (16 * 292 * 6usize).next_multiple_of(64)
    );
    assert_eq!(work_size(&t(DType::F16, [4096, 8, 1, 1]), &t(DType::F16, [4096, 3, 2, 1])), 0);
}

/// The VNNI matrix-vector kernels give the one-row kernels' bits, for quantized and random
/// weight blocks (every byte value of a Q8_0 weight included) and several row lengths.
#[cfg(target_arch = "x86_64")]
#[test]
fn vnni_matvec_matches_one_row_dots() {
    if cpu_level() < SimdLevel::Avx512 || !cpu_vnni() {
        eprintln!("skipped: no AVX-512 VNNI on this CPU");
        return;
    }
    let mut rng = Rng(7);
    let mut failures = Vec::new();
    for dtype in [DType::Q4_0, DType::Q5_0, DType::Q8_0, DType::IQ4_NL, DType::Q4_1, DType::Q5_1] {
        let mv = types::row(dtype).and_then(|r| r.x86.vnni_matvec).expect("a matvec kernel");
        let Kernel::Dot { dot, .. } = kernel(dtype, SimdLevel::Avx512) else { unreachable!() };
        for n in [32, 96, 640, 4096] {
            for random in [false, true] {
                let rows = 5;
                let x: Vec<u8> =
                    (0..rows).flat_map(|_| weights(dtype, n, &mut rng, random)).collect();
                let nb01 = x.len() / rows;
                let y = convert_row(vec_dot_type(dtype), SimdLevel::Avx512, &rng.f32s(n));
                let mut aux = Vec::new();
                let mut out = vec![f32::NAN; rows];
                // SAFETY: `rows` weight rows of n values, a Q8_0 row of n values, VNNI (above).
                unsafe {
                    mv.prepare(n, y.as_ptr(), &mut aux);
                    mv.run(n, x.as_ptr(), nb01, y.as_ptr(), &aux, &mut out);
                }
                for (r, got) in out.iter().enumerate() {
                    // SAFETY: row r of x and the activation row, at a level this CPU runs.
                    let want = unsafe { dot(n, x.as_ptr().add(r * nb01), y.as_ptr()) };
                    if got.to_bits() != want.to_bits() {
                        failures.push(format!(
                            "{dtype} n={n} random={random} row {r}: {got} != {want}"
                        ));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A matrix-vector product (one activation row: the row-range loop with prefetching, or the
/// VNNI kernels) gives the bits the chunked loop gives that row inside a batch, at every level
/// and thread count. F16 and BF16 are the exceptions, as in llama.cpp: one column takes
/// `ggml_vec_dot_f16` / `ggml_vec_dot_bf16`, two or more tinyBLAS's order.
#[test]
fn matrix_vector_products_give_the_batched_bits() {
    // (Also products with 2-7 activation rows.)
    let mut rng = Rng(0x5eed);
    let mut failures = Vec::new();
    for dtype in weight_types().into_iter().filter(|&d| !matches!(d, DType::F16 | DType::BF16)) {
        let (k, m) = (512, 37);
        let wbytes = weights(dtype, k * m, &mut rng, false);
        let src0 = Host::packed(dtype, [k, m, 1, 1], &wbytes);
        let x = rng.f32s(k);
        let copies = |n: usize| {
            let v: Vec<f32> = (0..n).flat_map(|_| x.iter().copied()).collect();
            Host::packed(DType::F32, [k, n, 1, 1], &f32_bytes(&v))
        };
        // The same row eight times: the chunked loop (one-row dots, or tiles with their
        // bits); one row takes the matrix-vector kernels, 2-7 rows their few-rows loop. The
        // K-quants and IQ4_XS take llama.cpp's tiled order from 8 rows on, so theirs is the one-row dot
        // through the chunked loop (scalar level) or its prefetching loop.
        let kquant = tiled(dtype);
        let reference = if kquant { copies(1) } else { copies(8) };
        for simd in SimdLevel::available() {
            let want = run(&src0, &reference, 1, simd);
            for n in [1, 2, 3, 7] {
                for nth in [1, 2, 3] {
                    let got = run(&src0, &copies(n), nth, simd);
                    let bad = got.chunks(m).any(|row| {
                        row.iter().zip(&want[..m]).any(|(a, b)| a.to_bits() != b.to_bits())
                    });
                    if bad {
                        failures.push(format!("{dtype} {simd} {n} rows {nth} threads"));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The types llama.cpp multiplies by 8+ activation rows with its tiled kernels (another
/// order): the K-quants, IQ4_XS and the grid i-quants.
fn tiled(dtype: DType) -> bool {
    use DType::*;
    matches!(
        dtype,
        Q2_K | Q3_K
            | Q4_K
            | Q5_K
            | Q6_K
            | IQ4_XS
            | IQ2_XXS
            | IQ2_XS
            | IQ2_S
            | IQ3_XXS
            | IQ3_S
            | IQ1_S
            | IQ1_M
    )
}

/// A product with 2-40 different activation rows gives each row the bits it gets alone (the
/// few-rows kernels read every weight block once for all rows, in passes of up to 16 rows
/// over blocks of weight rows: a mixed-up row, pass, accumulator or output would show here,
/// where copies of one row would hide it), at every level and thread count, for each weight
/// type; the K-quants and IQ4_XS only below 8 rows (from 8 on they take llama.cpp's tiled
/// order).
#[test]
fn few_rows_products_give_each_row_its_own_bits() {
    let mut rng = Rng(0xfe77);
    let mut failures = Vec::new();
    for dtype in weight_types().into_iter().filter(|&d| !matches!(d, DType::F16 | DType::BF16)) {
        let (k, m) = (512, 37);
        let wbytes = weights(dtype, k * m, &mut rng, false);
        let src0 = Host::packed(dtype, [k, m, 1, 1], &wbytes);
        let rows: Vec<Vec<f32>> = (0..40).map(|_| rng.f32s(k)).collect();
        let act = |rows: &[Vec<f32>]| {
            let v: Vec<f32> = rows.iter().flatten().copied().collect();
            Host::packed(DType::F32, [k, rows.len(), 1, 1], &f32_bytes(&v))
        };
        let kquant = tiled(dtype);
        let counts: &[usize] =
            if kquant { &[2, 3, 4, 5, 6, 7] } else { &[2, 3, 4, 5, 6, 7, 8, 11, 16, 17, 40] };
        for simd in SimdLevel::available() {
            let alone: Vec<Vec<f32>> =
                rows.iter().map(|r| run(&src0, &act(std::slice::from_ref(r)), 1, simd)).collect();
            for &n in counts {
                for nth in [1, 2, 3] {
                    let got = run(&src0, &act(&rows[..n]), nth, simd);
                    for (r1, out) in got.chunks(m).enumerate() {
                        if out.iter().zip(&alone[r1]).any(|(a, b)| a.to_bits() != b.to_bits()) {
                            failures
                                .push(format!("{dtype} {simd} {n} rows {nth} threads: row {r1}"));
                        }
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Products with repacked weights give ggml's repacked chains on every output, whichever
/// kernel computes it (eight-row GEMV, tiled K-quant epilogue, one-row chains beside the
/// aligned groups of a chunk): the GEMM chain for activation rows `0..ne11 - ne11 % 4`, the
/// GEMV chain for the rest, at every thread count (three threads cut the rows off the groups
/// of eight). The weights are given interleaved (`interleaved`), as the loader stores them.
#[cfg(target_arch = "x86_64")]
#[test]
fn repacked_products_follow_the_repacked_chains() {
    let mut rng = Rng(0x8e9a);
    let mut failures = Vec::new();
    for dtype in [DType::Q4_0, DType::IQ4_NL, DType::MXFP4, DType::Q4_K, DType::Q2_K] {
        let (k, m) = (512, 40);
        // The weights as the loader hands them over (eight rows interleaved); the chains read
        // the file's layout.
        let plain = weights(dtype, k * m, &mut rng, false);
        let bytes = if interleaved::interleaves(dtype) {
            interleaved::interleave(dtype, &plain, m, k).expect("whole groups of eight rows")
        } else {
            plain.clone()
        };
        let mut src0 = Host::packed(dtype, [k, m, 1, 1], &bytes);
        src0.repacked = true;
        let row = src0.nb[1];
        let (gemv, gemm) = types::row(dtype).and_then(|r| r.x86.repack).expect("a repacked").chains;
        for n in [1, 2, 3, 4, 5, 6, 7, 9, 12, 17] {
            let x = rng.f32s(k * n);
            let src1 = Host::packed(DType::F32, [k, n, 1, 1], &f32_bytes(&x));
            for simd in SimdLevel::available().into_iter().filter(|&l| l >= SimdLevel::Avx2) {
                let full = n - n % 4;
                let want: Vec<f32> = (0..n * m)
                    .map(|i| {
                        let (i1, i0) = (i / m, i % m);
                        let y = convert_row(vec_dot_type(dtype), simd, &x[k * i1..k * (i1 + 1)]);
                        let chain = if i1 < full { gemm } else { gemv };
                        let w = plain.as_ptr().wrapping_add(i0 * row);
                        // SAFETY: weight row i0 and one converted activation row of k values;
                        // AVX2 (the level is one this CPU has).
                        unsafe { chain(k, w, y.as_ptr()) }
                    })
                    .collect();
                for nth in [1, 2, 3] {
                    let got = run(&src0, &src1, nth, simd);
                    if got.iter().zip(&want).any(|(a, b)| a.to_bits() != b.to_bits()) {
                        failures.push(format!("{dtype} n={n} {simd} {nth} threads"));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// In batch-invariant mode every activation row gets the bits it gets alone, for every weight
/// type, level, thread count and batch size (the K-quants' tiled order and F16/BF16's
/// tinyBLAS order included, which the default mode takes from 8 and 2 rows).
#[test]
fn batch_invariant_rows_get_the_bits_they_get_alone() {
    let mut rng = Rng(0xba7c);
    let mut failures = Vec::new();
    for dtype in weight_types() {
        let (k, m) = (512, 19);
        let wbytes = weights(dtype, k * m, &mut rng, false);
        let src0 = Host::packed(dtype, [k, m, 1, 1], &wbytes);
        let rows: Vec<Vec<f32>> = (0..70).map(|_| rng.f32s(k)).collect();
        let batch = |n: usize| {
            let v: Vec<f32> = rows[..n].iter().flatten().copied().collect();
            Host::packed(DType::F32, [k, n, 1, 1], &f32_bytes(&v))
        };
        for simd in SimdLevel::available() {
            let alone: Vec<Vec<f32>> = (0..70)
                .map(|r| {
                    let one = Host::packed(DType::F32, [k, 1, 1, 1], &f32_bytes(&rows[r]));
                    run_with(&src0, &one, 1, simd, true)
                })
                .collect();
            for n in [2, 8, 13, 70] {
                let got = run_with(&src0, &batch(n), 2, simd, true);
                for (r, row) in got.chunks(m).enumerate() {
                    if row.iter().zip(&alone[r]).any(|(a, b)| a.to_bits() != b.to_bits()) {
                        failures.push(format!("{dtype} {simd} {n} rows: row {r} differs"));
                        break;
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
