//! The kernels' arithmetic without a GPU: `kernels/types.cuh` (the generic kernels' per-element
//! dequantization) and `kernels/vecdotq.cuh` (the MMVQ kernels' int8 dot products) compiled for
//! the CPU with the machine's C++ compiler, behind a shim for the few CUDA intrinsics they use,
//! and checked against `tessera_tensor`'s quantizers and dequantizers (ggml's, bit for bit):
//! every dequantized value equal, every int8 dot within a small fraction of the f64 dot.
//!
//! Skipped, with a note, where no C++ compiler is found (`CXX`, else `c++`, `g++`);
//! `REQUIRE_CXX=1` makes that a failure.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use tessera_backend_cuda::kernels::FILES;
use tessera_backend_cuda::types::{Class, TYPES};
use tessera_tensor::quant::{dequantize, quantize};
use tessera_tensor::DType;

/// The C++ headers, and CUDA's qualifiers as nothing.
const SHIM: &str = r#"
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#define __device__
#define __forceinline__ inline
#define __constant__
"#;

/// After prelude.cuh's typedefs and constants: host versions of its device functions.
const SHIM_FUNCTIONS: &str = r#"
static inline float __uint_as_float(u32 u) { float f; memcpy(&f, &u, 4); return f; }
static inline float __int_as_float(i32 i) { float f; memcpy(&f, &i, 4); return f; }
static inline u32 __float_as_uint(float f) { u32 u; memcpy(&u, &f, 4); return u; }
static inline float h2f(u16 h) {
    const u32 sign = (u32)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023;
    if (e == 0) {
        if (m == 0) return __uint_as_float(sign);
        float f = (float)m * (1.0f / 16777216.0f);  // subnormal: m * 2^-24
        return sign ? -f : f;
    }
    if (e == 31) return __uint_as_float(sign | 0x7f800000u | (m << 13));
    return __uint_as_float(sign | ((e + 112) << 23) | (m << 13));
}
static inline u16 f2h(float f) {
    // Round to nearest even, as cvt.rn.f16.f32.
    const u32 x = __float_as_uint(f), sign = (x >> 16) & 0x8000;
    const u32 ax = x & 0x7fffffff;
    if (ax >= 0x7f800000) return (u16)(sign | 0x7c00 | (ax > 0x7f800000 ? 0x200 : 0));
    if (ax >= 0x477ff000) return (u16)(sign | 0x7c00);
    if (ax < 0x38800000) {  // subnormal or zero in half
        const float a = __uint_as_float(ax) * 16777216.0f;
        return (u16)(sign | (u32)lrintf(a));
    }
    const u32 r = ax + 0x0fff + ((ax >> 13) & 1);
    return (u16)(sign | ((r - 0x38000000) >> 13));
}
static inline float bf2f(u16 h) { return __uint_as_float(((u32)h) << 16); }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline i32 dp4a(i32 a, i32 b, i32 c) {
    for (int k = 0; k < 4; ++k) c += (i32)(i8)(a >> (8 * k)) * (i32)(i8)(b >> (8 * k));
    return c;
}
static inline u16 rd16(const u8 *p) { return (u16)p[0] | ((u16)p[1] << 8); }
static inline u32 rd32(const u8 *p) {
    return (u32)p[0] | ((u32)p[1] << 8) | ((u32)p[2] << 16) | ((u32)p[3] << 24);
}
"#;

/// `deq TYPE N W`: the N values of row W through `ld_row`; `dot TYPE N W Y`: the sum over
/// the row's 32-value blocks and their four lanes of the type's int8 dot with Q8_1 row Y.
const MAIN: &str = r#"
static std::vector<u8> slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(2); }
    std::vector<u8> v;
    int c;
    while ((c = fgetc(f)) != EOF) v.push_back((u8)c);
    fclose(f);
    return v;
}
// As quant.cu's MMVQ: 32-value block i is sub-block i % SUB of weight block i / SUB.
#define DOT(T, BYTES, SUB, F) case T: for (int p = 0; p < 4; ++p) s += F(w + (i64)(i / SUB) * BYTES, i % SUB, y + (i64)i * 36, p); break;
int main(int argc, char **argv) {
    const int type = atoi(argv[2]);
    const long n = atol(argv[3]);
    std::vector<u8> wv = slurp(argv[4]);
    const u8 *w = wv.data();
    if (!strcmp(argv[1], "deq")) {
        for (long i = 0; i < n; ++i) printf("%08x\n", __float_as_uint(ld_row(type, w, i, 0)));
        return 0;
    }
    std::vector<u8> yv = slurp(argv[5]);
    const u8 *y = yv.data();
    double total = 0.0;
    for (long i = 0; i < n / 32; ++i) {
        float s = 0.0f;
        switch (type) {
            DOT(T_Q4_0, Q4_0_BYTES, 1, vdot_q4_0)
            DOT(T_Q4_1, Q4_1_BYTES, 1, vdot_q4_1)
            DOT(T_Q5_0, Q5_0_BYTES, 1, vdot_q5_0)
            DOT(T_Q5_1, Q5_1_BYTES, 1, vdot_q5_1)
            DOT(T_Q8_0, Q8_0_BYTES, 1, vdot_q8_0)
            DOT(T_IQ4_NL, IQ4_NL_BYTES, 1, vdot_iq4_nl)
            DOT(T_MXFP4, MXFP4_BYTES, 1, vdot_mxfp4)
            DOT(T_Q2_K, Q2_K_BYTES, 8, vdot_q2_k)
            DOT(T_Q4_K, Q4_K_BYTES, 8, vdot_q4_k)
            DOT(T_Q5_K, Q5_K_BYTES, 8, vdot_q5_k)
            DOT(T_Q6_K, Q6_K_BYTES, 8, vdot_q6_k)
            DOT(T_IQ4_XS, IQ4_XS_BYTES, 8, vdot_iq4_xs)
            default: fprintf(stderr, "no int8 dot for type %d\n", type); return 3;
        }
        total += s;
    }
    printf("%.9g\n", total);
    return 0;
}
"#;

fn file(name: &str) -> &'static str {
    FILES.iter().find(|(n, _)| *n == name).map(|(_, s)| *s).expect("a kernel file")
}

/// The C++ compiler, if any.
fn compiler() -> Option<String> {
    let candidates = std::env::var("CXX").into_iter().chain(["c++".into(), "g++".into()]);
    candidates
        .into_iter()
        .find(|c| Command::new(c).arg("--version").output().is_ok_and(|o| o.status.success()))
}

/// Builds the harness in `dir`; `None` (after a note) without a compiler.
fn harness(dir: &Path) -> Option<PathBuf> {
    let Some(cxx) = compiler() else {
        assert!(
            std::env::var("REQUIRE_CXX").as_deref() != Ok("1"),
            "REQUIRE_CXX=1 and no C++ compiler (CXX, c++, g++)"
        );
        eprintln!("host_kernels: no C++ compiler found; skipped");
        return None;
    };
    // prelude.cuh's typedefs and constants (its device functions are the shim's), then the
    // two headers.
    let prelude: String = file("prelude.cuh")
        .lines()
        .filter(|l| {
            l.starts_with("typedef")
                || (l.starts_with("#define") && !l.contains("INFINITY") && !l.contains(" WARP "))
        })
        .map(|l| format!("{l}\n"))
        .collect();
    let src = format!(
        "{SHIM}\n{prelude}\n{SHIM_FUNCTIONS}\n{}\n{}\n{MAIN}",
        file("types.cuh"),
        file("vecdotq.cuh")
    );
    let cpp = dir.join("harness.cpp");
    std::fs::write(&cpp, src).unwrap();
    let exe = dir.join("harness");
    let out = Command::new(&cxx)
        .args(["-std=c++17", "-O1", "-ffp-contract=off", "-w", "-o"])
        .arg(&exe)
        .arg(&cpp)
        .output()
        .unwrap();
    assert!(out.status.success(), "{cxx} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    Some(exe)
}

/// Deterministic values in [-1, 1) with a few large ones (the blocks' scales matter).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let v = ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0;
            if i % 37 == 0 {
                v * 4.0
            } else {
                v
            }
        })
        .collect()
}

fn run(exe: &Path, args: &[&str]) -> String {
    let out = Command::new(exe).args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> String {
    let p = dir.join(name);
    std::fs::File::create(&p).unwrap().write_all(bytes).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn dequantization_and_int8_dots_match_ggml() {
    let dir = std::env::temp_dir().join(format!("tessera-host-kernels-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let Some(exe) = harness(&dir) else { return };
    let n = 512;
    let mut checked = 0;
    for row in TYPES.iter().filter(|r| r.class == Class::Block) {
        let t = row.dtype;
        for seed in 0..4u64 {
            let w = quantize(t, &values(n, seed * 31 + t.id() as u64))
                .unwrap_or_else(|e| panic!("{t}: {e}"));
            let wf = write(&dir, "w.bin", &w);
            let want = dequantize(t, &w).unwrap();
            // Every value of the generic kernels' dequantization, bit for bit.
            let got: Vec<u32> = run(&exe, &["deq", &t.id().to_string(), &n.to_string(), &wf])
                .lines()
                .map(|l| u32::from_str_radix(l, 16).unwrap())
                .collect();
            assert_eq!(got.len(), n, "{t}");
            for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                assert_eq!(*g, e.to_bits(), "{t} value {i}: {} != {e}", f32::from_bits(*g));
            }
            let Some(_) = row.mmvq else { continue };
            // The int8 dot against activations quantized to Q8_1, as the kernels read them.
            let y = quantize(DType::Q8_1, &values(n, seed + 1000)).unwrap();
            let yf = write(&dir, "y.bin", &y);
            let yd = dequantize(DType::Q8_1, &y).unwrap();
            let exact: f64 = want.iter().zip(&yd).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
            let scale: f64 =
                want.iter().zip(&yd).map(|(a, b)| (f64::from(*a) * f64::from(*b)).abs()).sum();
            let got: f64 = run(&exe, &["dot", &t.id().to_string(), &n.to_string(), &wf, &yf])
                .trim()
                .parse()
                .unwrap();
            // The offsets' sums come from Q8_1's f16 sum where llama.cpp's do (Q4_0, Q4_1,
            // Q5_0, Q5_1): a few thousandths of the magnitude at most.
            let err = (got - exact).abs() / scale.max(1e-9);
            assert!(err < 2e-3, "{t} seed {seed}: int8 dot {got}, f64 {exact} (error {err:.2e})");
            checked += 1;
        }
    }
    assert!(checked >= 40, "only {checked} int8 dots checked");
    let _ = std::fs::remove_dir_all(&dir);
}
