//! Conformance of the legacy (Q4_0 … Q8_1) and K-quant (Q2_K … Q8_K) reference kernels:
//!
//! - bytes of the quantizers against the `gguf` package (legacy types) and against llama.cpp
//!   itself (fixtures made by `tools/make_kquant_fixtures.py` through `llama_model_quantize`),
//! - dequantized values against the `gguf` package, exactly,
//! - round-trip error against the bounds of llama.cpp's `tests/test-quantize-fns.cpp`,
//! - Q8_K and Q8_1 (which neither reference writes) by their defining properties.

mod support;

use std::path::PathBuf;

use half::f16;
use support::{py_dequantize, py_quantize, test_rows, Rng};
use tessera_tensor::blocks::{BlockQ8K, BlockQ8_0, BlockQ8_1, QK_K};
use tessera_tensor::quant::{can_quantize, dequantize, quantize};
use tessera_tensor::DType;

const LEGACY: [DType; 5] = [DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0];
const KQUANTS: [DType; 5] = [DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K];

/// All `test_rows` for a few lengths (multiples of 256) and seeds, plus rows on a grid of
/// eighths (exact rounding ties) and bell-shaped rows (like real weights), as (label, row).
fn labelled_rows() -> Vec<(String, Vec<f32>)> {
    let mut out = Vec::new();
    for n in [256, 1024] {
        for seed in [1, 2, 3] {
            for (k, row) in test_rows(n, seed).into_iter().enumerate() {
                out.push((format!("test_rows({n}, {seed})[{k}]"), row));
            }
            let mut rng = Rng::new(100 + seed);
            let grid = (0..n).map(|_| (rng.next_u64() % 33) as f32 / 8.0 - 2.0).collect();
            out.push((format!("grid({n}, {seed})"), grid));
            let bell = (0..n).map(|_| (0..4).map(|_| rng.uniform(-0.05, 0.05)).sum()).collect();
            out.push((format!("bell({n}, {seed})"), bell));
        }
    }
    out
}

/// Bitwise float equality (so `-0.0 != 0.0` and NaNs compare by payload).
fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Panics with the first differing block of `row`, if any.
fn assert_same_blocks(dtype: DType, what: &str, want: &[u8], got: &[u8]) {
    assert_eq!(want.len(), got.len(), "{dtype} {what}: length");
    let ts = dtype.type_size();
    for (i, (w, g)) in want.chunks(ts).zip(got.chunks(ts)).enumerate() {
        assert_eq!(w, g, "{dtype} {what}: block {i} differs (reference first)");
    }
}

#[test]
fn legacy_quantize_matches_gguf_package_bytes() {
    let rows = labelled_rows();
    let all: Vec<f32> = rows.iter().flat_map(|(_, r)| r.iter().copied()).collect();
    for dtype in LEGACY {
        // One Python call per type: blocks are quantized independently.
        let want = py_quantize(dtype, &all);
        let got = quantize(dtype, &all).unwrap();
        let mut offset = 0;
        for (label, row) in &rows {
            let len = dtype.row_size(row.len() as u64).unwrap() as usize;
            let w = &want[offset..offset + len];
            assert_same_blocks(dtype, label, w, &quantize(dtype, row).unwrap());
            offset += len;
        }
        assert_eq!(want, got, "{dtype}: whole buffer");
    }
}

#[test]
fn legacy_dequantize_matches_gguf_package_values() {
    let rows = labelled_rows();
    let all: Vec<f32> = rows.iter().flat_map(|(_, r)| r.iter().copied()).collect();
    let mut rng = Rng::new(7);
    for dtype in LEGACY {
        // Real quantized data, then random blocks with finite scales (and mins).
        let mut bytes = py_quantize(dtype, &all);
        bytes.extend(random_blocks(dtype, 64, &mut rng));
        let want = py_dequantize(dtype, &bytes);
        let got = dequantize(dtype, &bytes).unwrap();
        assert!(
            same_bits(&want, &got),
            "{dtype}: first difference at {:?}",
            first_diff(&want, &got)
        );
    }
}

#[test]
fn kquant_dequantize_matches_gguf_package_values() {
    let mut rng = Rng::new(11);
    for dtype in KQUANTS {
        let mut bytes = random_blocks(dtype, 256, &mut rng);
        // ggml's own blocks too: realistic scales, including zero sub-blocks.
        bytes.extend(fixture_bytes(dtype));
        let want = py_dequantize(dtype, &bytes);
        let got = dequantize(dtype, &bytes).unwrap();
        assert!(
            same_bits(&want, &got),
            "{dtype}: first difference at {:?}",
            first_diff(&want, &got)
        );
    }
}

#[test]
fn quantize_matches_llama_cpp_bytes() {
    let fixtures = Fixtures::load();
    assert!(
        fixtures.types.len() >= 10 && fixtures.tensors.len() >= 4,
        "fixture manifest too small"
    );
    let mut checked = 0;
    for ty in &fixtures.types {
        let dtype = dtype_named(ty);
        for t in &fixtures.tensors {
            let input = fixtures.input(t);
            let want = fixtures.quantized(t, ty);
            let row_bytes = dtype.row_size(t.cols as u64).unwrap() as usize;
            let mut got = Vec::with_capacity(want.len());
            for row in input.chunks_exact(t.cols) {
                got.extend(quantize(dtype, row).unwrap());
            }
            for (r, (w, g)) in want.chunks(row_bytes).zip(got.chunks(row_bytes)).enumerate() {
                assert_same_blocks(dtype, &format!("{} row {r}", t.name), w, g);
            }
            assert_eq!(want.len(), got.len());
            checked += 1;
        }
    }
    assert_eq!(checked, fixtures.types.len() * fixtures.tensors.len());
}

/// The fixture bytes must also be what the quantizer's own output type decodes: a check that
/// the fixtures are not degenerate (e.g. all-zero blocks that any quantizer would match).
#[test]
fn llama_cpp_fixtures_are_meaningful() {
    let fixtures = Fixtures::load();
    for ty in &fixtures.types {
        let dtype = dtype_named(ty);
        for t in &fixtures.tensors {
            let input = fixtures.input(t);
            let q = fixtures.quantized(t, ty);
            let y = dequantize(dtype, &q).unwrap();
            let nonzero_rows = input
                .chunks_exact(t.cols)
                .zip(y.chunks_exact(t.cols))
                .filter(|(x, _)| x.iter().any(|v| *v != 0.0))
                // Ternary types only represent {-d, 0, d}: general data decodes coarsely.
                .filter(|(x, y)| {
                    support::nmse(x, y)
                        < if matches!(dtype, DType::TQ1_0 | DType::TQ2_0) { 1.0 } else { 0.2 }
                })
                .count();
            assert!(
                nonzero_rows >= t.rows / 2,
                "{ty} {}: only {nonzero_rows} rows decode well",
                t.name
            );
        }
    }
}

// ---- round-trip error (llama.cpp tests/test-quantize-fns.cpp) ---------------------------------

/// `MAX_QUANTIZATION_TOTAL_ERROR` and its 2- and 3-bit variants.
fn max_total_error(dtype: DType) -> f64 {
    match dtype {
        DType::Q2_K => 0.0075,
        DType::Q3_K => 0.0040,
        _ => 0.002,
    }
}

/// `generate_data`: `0.1 + amplitude·cos(i + offset)`, in test-quantize-fns' precision.
fn generate_data(offset: f32, n: usize) -> Vec<f32> {
    (0..n).map(|i| (0.1 + f64::from(2.0 * (i as f32 + offset).cos())) as f32).collect()
}

/// test-quantize-fns' `array_rmse`: `sqrt(sum of squares) / n` (not a true RMS).
fn ggml_array_rmse(a: &[f32], b: &[f32]) -> f64 {
    let sum: f64 = a.iter().zip(b).map(|(x, y)| (f64::from(*x) - f64::from(*y)).powi(2)).sum();
    sum.sqrt() / a.len() as f64
}

fn round_trip_error(dtype: DType, x: &[f32]) -> f64 {
    let y = dequantize(dtype, &quantize(dtype, x).unwrap()).unwrap();
    ggml_array_rmse(x, &y)
}

const ALL_OWNED: [DType; 12] = [
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q8_1,
    DType::Q2_K,
    DType::Q3_K,
    DType::Q4_K,
    DType::Q5_K,
    DType::Q6_K,
    DType::Q8_K,
];

#[test]
fn round_trip_error_within_test_quantize_fns_bounds() {
    // test-quantize-fns quantizes 32·128 values of generate_data(0.0).
    let x = generate_data(0.0, 32 * 128);
    for dtype in ALL_OWNED {
        assert!(can_quantize(dtype), "{dtype}");
        let err = round_trip_error(dtype, &x);
        eprintln!("{dtype}: total quantization error {err:.6} (bound {})", max_total_error(dtype));
        assert!(err < max_total_error(dtype), "{dtype}: total quantization error {err}");
    }
}

#[test]
fn round_trip_error_within_bounds_on_random_rows() {
    // The same measure and bounds on other data of the same size and amplitude: shifted
    // cosines and uniform / Gaussian-ish random values in [-2, 2].
    let n = 32 * 128;
    let mut rng = Rng::new(5);
    let mut rows = vec![generate_data(1.0, n), generate_data(3.0, n)];
    for _ in 0..4 {
        rows.push((0..n).map(|_| rng.uniform(-2.0, 2.0)).collect());
        rows.push(
            (0..n).map(|_| (0..4).map(|_| rng.uniform(-1.0, 1.0)).sum::<f32>() * 0.5).collect(),
        );
    }
    for dtype in ALL_OWNED {
        let mut worst = 0f64;
        for (k, x) in rows.iter().enumerate() {
            let err = round_trip_error(dtype, x);
            worst = worst.max(err);
            assert!(
                err < max_total_error(dtype),
                "{dtype} row {k}: total quantization error {err}"
            );
        }
        eprintln!("{dtype}: worst error {worst:.6} (bound {})", max_total_error(dtype));
    }
}

#[test]
fn round_trip_keeps_zero_blocks_zero() {
    for dtype in ALL_OWNED {
        let x = vec![0f32; 512];
        let y = dequantize(dtype, &quantize(dtype, &x).unwrap()).unwrap();
        assert!(y.iter().all(|&v| v == 0.0), "{dtype}");
    }
}

// ---- Q8_K and Q8_1: properties ------------------------------------------------------------

fn q8_k_blocks(x: &[f32]) -> Vec<BlockQ8K> {
    quantize(DType::Q8_K, x)
        .unwrap()
        .chunks_exact(std::mem::size_of::<BlockQ8K>())
        .map(bytemuck::pod_read_unaligned)
        .collect()
}

#[test]
fn q8_k_scale_sign_convention_and_bsums() {
    for (label, row) in labelled_rows() {
        for (b, x) in q8_k_blocks(&row).iter().zip(row.chunks_exact(QK_K)) {
            let (mut max, mut amax) = (0f32, 0f32);
            for &v in x {
                if v.abs() > amax {
                    (amax, max) = (v.abs(), v);
                }
            }
            if amax == 0.0 {
                assert_eq!(b.d, 0.0, "{label}");
                assert!(b.qs.iter().all(|&q| q == 0), "{label}");
                continue;
            }
            // d = 1 / (-127 / max): the sign of d is opposite to max's, and max itself is -127.
            assert_eq!(b.d, 1.0 / (-127.0 / max), "{label}");
            let imax = x.iter().position(|&v| v == max).unwrap();
            assert_eq!(b.qs[imax], -127, "{label}");
            for (j, s) in b.bsums.iter().enumerate() {
                let sum: i32 = b.qs[16 * j..16 * j + 16].iter().map(|&q| i32::from(q)).sum();
                assert_eq!(i32::from(*s), sum, "{label} bsums[{j}]");
            }
            // Each quant is x / d to the nearest integer (ties to even).
            let iscale = -127.0 / max;
            for (&q, &v) in b.qs.iter().zip(x) {
                assert_eq!(
                    i32::from(q),
                    ((iscale * v).round_ties_even() as i32).min(127),
                    "{label}"
                );
            }
        }
        // Round trip: at most half a step off.
        let y = dequantize(DType::Q8_K, &quantize(DType::Q8_K, &row).unwrap()).unwrap();
        for (xb, yb) in row.chunks_exact(QK_K).zip(y.chunks_exact(QK_K)) {
            let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
            let step = amax / 127.0;
            for (a, b) in xb.iter().zip(yb) {
                assert!(
                    (a - b).abs() <= 0.5 * step * 1.0001 + f32::MIN_POSITIVE,
                    "{label}: {a} vs {b}"
                );
            }
        }
    }
}

#[test]
fn q8_1_is_q8_0_plus_d_times_sum() {
    for (label, row) in labelled_rows() {
        let q0 = quantize(DType::Q8_0, &row).unwrap();
        let q1 = quantize(DType::Q8_1, &row).unwrap();
        let b0 = q0.chunks_exact(34).map(bytemuck::pod_read_unaligned::<BlockQ8_0>);
        let b1 = q1.chunks_exact(36).map(bytemuck::pod_read_unaligned::<BlockQ8_1>);
        for ((a, b), x) in b0.zip(b1).zip(row.chunks_exact(32)) {
            assert_eq!((a.d, a.qs), (b.d, b.qs), "{label}");
            // s uses the f32 d (amax / 127), not its f16 rounding.
            let d = x.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
            let sum: i32 = b.qs.iter().map(|&q| i32::from(q)).sum();
            assert_eq!(b.s, f16::from_f32(sum as f32 * d), "{label}");
        }
        let y0 = dequantize(DType::Q8_0, &q0).unwrap();
        let y1 = dequantize(DType::Q8_1, &q1).unwrap();
        assert!(same_bits(&y0, &y1), "{label}");
    }
}

// ---- helpers ----------------------------------------------------------------------------

fn first_diff(a: &[f32], b: &[f32]) -> Option<(usize, f32, f32)> {
    a.iter()
        .zip(b)
        .enumerate()
        .find(|(_, (x, y))| x.to_bits() != y.to_bits())
        .map(|(i, (x, y))| (i, *x, *y))
}

/// A finite, moderate f16 (|v| in about [2^-14, 2^4), either sign, sometimes zero).
fn sane_f16(rng: &mut Rng) -> [u8; 2] {
    if rng.next_u64() % 16 == 0 {
        return [0, 0];
    }
    let v = rng.uniform(-1.0, 1.0) * 2f32.powi((rng.next_u64() % 18) as i32 - 14);
    f16::from_f32(v).to_le_bytes()
}

/// `n` blocks of random bytes whose f16 scale fields (`d`, and `m`/`dmin`/`s` where present)
/// are replaced by finite values.
fn random_blocks(dtype: DType, n: usize, rng: &mut Rng) -> Vec<u8> {
    // Byte offsets of the f16 fields in each block (ggml-common.h layouts).
    let f16_fields: &[usize] = match dtype {
        DType::Q4_0 | DType::Q5_0 | DType::Q8_0 => &[0],
        DType::Q4_1 | DType::Q5_1 | DType::Q8_1 => &[0, 2],
        DType::Q2_K => &[80, 82],
        DType::Q3_K => &[108],
        DType::Q4_K | DType::Q5_K => &[0, 2],
        DType::Q6_K => &[208],
        _ => panic!("no layout for {dtype}"),
    };
    let ts = dtype.type_size();
    let mut bytes = rng.bytes(n * ts);
    for block in bytes.chunks_exact_mut(ts) {
        for &off in f16_fields {
            block[off..off + 2].copy_from_slice(&sane_f16(rng));
        }
    }
    bytes
}

fn dtype_named(name: &str) -> DType {
    DType::ALL
        .into_iter()
        .find(|d| support::py_name(*d) == name)
        .unwrap_or_else(|| panic!("unknown fixture type {name}"))
}

/// The llama.cpp fixtures of `tests/fixtures/ggml_kquants` (see its `manifest.json`).
struct Fixtures {
    dir: PathBuf,
    types: Vec<String>,
    tensors: Vec<FixtureTensor>,
}

struct FixtureTensor {
    name: String,
    rows: usize,
    cols: usize,
}

impl Fixtures {
    fn load() -> Self {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ggml_kquants");
        let text = std::fs::read_to_string(dir.join("manifest.json"))
            .expect("fixtures missing: run crates/tensor/tools/make_kquant_fixtures.py");
        let m: serde_json::Value = serde_json::from_str(&text).unwrap();
        let types =
            m["types"].as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_owned()).collect();
        let tensors = m["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| FixtureTensor {
                name: t["name"].as_str().unwrap().to_owned(),
                rows: t["rows"].as_u64().unwrap() as usize,
                cols: t["cols"].as_u64().unwrap() as usize,
            })
            .collect();
        Fixtures { dir, types, tensors }
    }

    fn input(&self, t: &FixtureTensor) -> Vec<f32> {
        let bytes = std::fs::read(self.dir.join(format!("{}.f32", t.name))).unwrap();
        assert_eq!(bytes.len(), t.rows * t.cols * 4, "{}", t.name);
        bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect()
    }

    fn quantized(&self, t: &FixtureTensor, ty: &str) -> Vec<u8> {
        std::fs::read(self.dir.join(format!("{}.{ty}", t.name))).unwrap()
    }
}

/// Every fixture tensor of `dtype`, concatenated.
fn fixture_bytes(dtype: DType) -> Vec<u8> {
    let f = Fixtures::load();
    let ty = support::py_name(dtype);
    f.tensors.iter().flat_map(|t| f.quantized(t, &ty)).collect()
}
