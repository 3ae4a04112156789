//! Shared helpers for the conformance tests: the `gguf` Python package as the reference, and
//! deterministic test data.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use tessera_tensor::DType;

/// The `gguf` package's spelling of a type (`GGMLQuantizationType` member name).
pub fn py_name(dtype: DType) -> String {
    format!("{dtype:?}")
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/py/gguf_ref.py")
}

fn run_py(op: &str, dtype: DType, input: &[u8]) -> Vec<u8> {
    let dir = std::env::temp_dir().join(format!(
        "tessera-gguf-ref-{}-{}",
        std::process::id(),
        std::thread::current().name().unwrap_or("t").replace("::", "_")
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let (inp, out) = (dir.join(format!("{op}-{dtype}.in")), dir.join(format!("{op}-{dtype}.out")));
    std::fs::write(&inp, input).unwrap();
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let status = Command::new(&python)
        .arg(script())
        .args([op, &py_name(dtype)])
        .arg(&inp)
        .arg(&out)
        .status()
        .unwrap_or_else(|e| {
            panic!("cannot run {python}: {e} (the conformance tests need `pip install gguf numpy`)")
        });
    assert!(
        status.success(),
        "gguf_ref.py {op} {dtype} failed (is `pip install gguf numpy` done?)"
    );
    let bytes = std::fs::read(&out).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    bytes
}

/// ggml's bytes for `x` quantized to `dtype`, by the `gguf` package.
pub fn py_quantize(dtype: DType, x: &[f32]) -> Vec<u8> {
    let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    run_py("quantize", dtype, &bytes)
}

/// `data` of type `dtype` dequantized by the `gguf` package.
pub fn py_dequantize(dtype: DType, data: &[u8]) -> Vec<f32> {
    run_py("dequantize", dtype, data)
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

/// A small deterministic generator (xorshift64*), so tests need no seed files.
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32)
    }
    /// Random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

/// Test rows with the shapes that catch quantizer bugs: uniform, wide-range, one outlier per
/// block, all zeros, tiny values, constant blocks and negative-only data.
pub fn test_rows(n: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut r = Rng::new(seed);
    let mut rows = vec![
        (0..n).map(|_| r.uniform(-1.0, 1.0)).collect::<Vec<_>>(),
        (0..n).map(|_| r.uniform(-100.0, 100.0)).collect(),
        (0..n)
            .map(|i| if i % 37 == 0 { r.uniform(-50.0, 50.0) } else { r.uniform(-0.5, 0.5) })
            .collect(),
        vec![0.0; n],
        (0..n).map(|_| r.uniform(-1e-6, 1e-6)).collect(),
        (0..n).map(|i| ((i / 32) as f32) * 0.25 - 1.0).collect(),
        (0..n).map(|_| r.uniform(-3.0, -0.1)).collect(),
        (0..n).map(|i| 0.1 + 2.0 * (i as f32).cos()).collect(),
    ];
    for row in &mut rows {
        row.truncate(n);
    }
    rows
}

/// Normalized mean squared error sum((a-b)^2) / sum(a^2), as llama.cpp's test-backend-ops.
pub fn nmse(reference: &[f32], x: &[f32]) -> f64 {
    let (mut num, mut den) = (0f64, 0f64);
    for (a, b) in reference.iter().zip(x) {
        num += (*a as f64 - *b as f64).powi(2);
        den += (*a as f64).powi(2);
    }
    if den == 0.0 {
        num
    } else {
        num / den
    }
}

/// Root mean squared error `sqrt(sum((a-b)^2) / n)` (test-quantize-fns' `array_rmse` divides
/// the root by n instead; tests that use its bounds compute that form themselves).
pub fn rmse(a: &[f32], b: &[f32]) -> f64 {
    let s: f64 = a.iter().zip(b).map(|(x, y)| (*x as f64 - *y as f64).powi(2)).sum();
    (s / a.len() as f64).sqrt()
}
