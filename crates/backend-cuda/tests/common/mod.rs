//! What the host-compiled kernel tests share: the shim that lets `kernels/*.cuh` and simple
//! kernels compile as C++ for the CPU, the compiler lookup, and file helpers.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use tessera_backend_cuda::kernels::FILES;

/// The C++ headers, and CUDA's qualifiers as nothing.
pub const SHIM: &str = r#"
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
pub const SHIM_FUNCTIONS: &str = r#"
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
// Programmatic dependent launch and the L2 prefetch: nothing on the host (one thread runs a
// grid's blocks in order).
static inline void pdl_start() {}
static inline void prefetch_l2(const u8 *, i64) {}
// Another block's writes, its count, and reading them back (blocks run one after another).
static inline float ld_cg(const float *p) { return *p; }
static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline u32 atomicAdd(u32 *p, u32 v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
static inline i32 dp4a(i32 a, i32 b, i32 c) {
    for (int k = 0; k < 4; ++k) c += (i32)(i8)(a >> (8 * k)) * (i32)(i8)(b >> (8 * k));
    return c;
}
"#;

/// CUDA's launch coordinates as host globals and a warp of one thread (`WARP` 1: a warp's
/// loop over a row is one thread's, its sum the identity), to run whole grids of simple
/// kernels on the CPU.
pub const LAUNCH_SHIM: &str = r#"
#define __global__
#define __align__(n) alignas(n)
#define WARP 1
struct Dim3 { unsigned x, y, z; };
static Dim3 blockIdx, threadIdx, blockDim, gridDim;
static inline float warp_sum(float x) { return x; }
"#;

pub fn file(name: &str) -> &'static str {
    FILES.iter().find(|(n, _)| *n == name).map(|(_, s)| *s).expect("a kernel file")
}

/// The C++ compiler, if any.
pub fn compiler() -> Option<String> {
    let candidates = std::env::var("CXX").into_iter().chain(["c++".into(), "g++".into()]);
    candidates
        .into_iter()
        .find(|c| Command::new(c).arg("--version").output().is_ok_and(|o| o.status.success()))
}

/// prelude.cuh's typedefs and macros (with their continuation lines; its device functions are
/// the shim's).
pub fn prelude() -> String {
    let mut out = String::new();
    let mut continued = false;
    for l in file("prelude.cuh").lines() {
        let keep = continued
            || l.starts_with("typedef")
            || (l.starts_with("#define") && !l.contains("INFINITY") && !l.contains(" WARP "));
        if keep {
            out.push_str(l);
            out.push('\n');
        }
        continued = keep && l.ends_with('\\');
    }
    out
}

/// Compiles `src` (C++) into `dir/name`; `None` (after a note) without a compiler.
pub fn build(dir: &Path, name: &str, src: &str) -> Option<PathBuf> {
    let Some(cxx) = compiler() else {
        assert!(
            std::env::var("REQUIRE_CXX").as_deref() != Ok("1"),
            "REQUIRE_CXX=1 and no C++ compiler (CXX, c++, g++)"
        );
        eprintln!("{name}: no C++ compiler found; skipped");
        return None;
    };
    let cpp = dir.join(format!("{name}.cpp"));
    std::fs::write(&cpp, src).unwrap();
    let exe = dir.join(name);
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
pub fn values(n: usize, seed: u64) -> Vec<f32> {
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

pub fn run(exe: &Path, args: &[&str]) -> String {
    let out = Command::new(exe).args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

pub fn write(dir: &Path, name: &str, bytes: &[u8]) -> String {
    let p = dir.join(name);
    std::fs::File::create(&p).unwrap().write_all(bytes).unwrap();
    p.to_str().unwrap().to_string()
}

/// A block's threads as OS threads (blocks one after another): `__shared__` variables are
/// statics (one block at a time uses them), `__syncthreads` a barrier of the block's live
/// threads, `__shfl_xor_sync` an exchange through a warp's slots between two barriers of its
/// lanes. Enough for the kernels' reductions, shared-memory merges and early exits of whole
/// warps; `launch(gx, gy, bx, f)` runs `f` as every thread of a grid.
pub const THREADS_SHIM: &str = r#"
#include <condition_variable>
#include <mutex>
#include <thread>
#define __global__
#define __shared__ static
#define __align__(n) alignas(n)
#define WARP 32
struct Dim3 { unsigned x, y, z; };
static thread_local Dim3 threadIdx;
static Dim3 blockIdx, blockDim, gridDim;
struct Barrier {
    std::mutex m;
    std::condition_variable cv;
    int expected = 0, count = 0;
    long gen = 0;
    void reset(int n) { expected = n; count = 0; }
    void release() { count = 0; ++gen; cv.notify_all(); }
    void wait() {
        std::unique_lock<std::mutex> l(m);
        const long g = gen;
        if (++count >= expected) release();
        else cv.wait(l, [&] { return gen != g; });
    }
    void drop() {
        std::unique_lock<std::mutex> l(m);
        --expected;
        if (count > 0 && count >= expected) release();
    }
};
static Barrier block_bar, warp_bar[32];
static unsigned long long warp_slots[32][32];
static inline void __syncthreads() { block_bar.wait(); }
static inline void __syncwarp() { warp_bar[threadIdx.x / 32].wait(); }
static inline unsigned long long shfl_bits(unsigned long long v, int o) {
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    warp_slots[w][l] = v;
    warp_bar[w].wait();
    const unsigned long long r = warp_slots[w][l ^ o];
    warp_bar[w].wait();
    return r;
}
static inline float __shfl_xor_sync(unsigned, float v, int o) {
    unsigned u; memcpy(&u, &v, 4);
    u = (unsigned)shfl_bits(u, o);
    float r; memcpy(&r, &u, 4);
    return r;
}
static inline int __shfl_xor_sync(unsigned, int v, int o) { return (int)shfl_bits((unsigned)v, o); }
static inline float __shfl_sync(unsigned, float v, int j) {
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    memcpy(&warp_slots[w][l], &v, 4);
    warp_bar[w].wait();
    float r;
    memcpy(&r, &warp_slots[w][j], 4);
    warp_bar[w].wait();
    return r;
}
static inline long long __shfl_xor_sync(unsigned, long long v, int o) { return (long long)shfl_bits((unsigned long long)v, o); }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float x) { return sqrtf(x); }
template <class F> static void launch3(unsigned gx, unsigned gy, unsigned gz, unsigned bx, F f) {
    blockDim.x = bx; blockDim.y = 1; blockDim.z = 1;
    gridDim.x = gx; gridDim.y = gy; gridDim.z = gz;
    for (unsigned z = 0; z < gz; ++z)
    for (unsigned y = 0; y < gy; ++y)
        for (unsigned x = 0; x < gx; ++x) {
            blockIdx.x = x; blockIdx.y = y; blockIdx.z = z;
            block_bar.reset(bx);
            for (unsigned w = 0; w < (bx + 31) / 32; ++w) warp_bar[w].reset(bx - 32 * w < 32 ? bx - 32 * w : 32);
            std::vector<std::thread> ts;
            for (unsigned t = 0; t < bx; ++t)
                ts.emplace_back([t, &f] {
                    threadIdx.x = t; threadIdx.y = 0; threadIdx.z = 0;
                    f();
                    warp_bar[t / 32].drop();
                    block_bar.drop();
                });
            for (std::thread &th : ts) th.join();
        }
}
template <class F> static void launch(unsigned gx, unsigned gy, unsigned bx, F f) { launch3(gx, gy, 1, bx, f); }
"#;

/// prelude.cuh's warp and block reductions (plain C++ over the shim's shuffles).
pub fn prelude_reductions() -> String {
    let p = file("prelude.cuh");
    let start = p.find("__device__ __forceinline__ float warp_sum").expect("warp_sum in prelude");
    let end =
        p.find("// Little-endian reads from block bytes").expect("the reads after the reductions");
    p[start..end].to_string()
}

/// prelude.cuh's `q8_1_warp` (one Q8_1 block from a warp's values), for harnesses with their
/// own warp reductions.
pub fn prelude_q8_1() -> String {
    let p = file("prelude.cuh");
    let start = p.find("// One Q8_1 block from a warp's").expect("q8_1_warp in prelude");
    let end = p.find("// Little-endian reads from block bytes").expect("the reads after q8_1_warp");
    p[start..end].to_string()
}

/// prelude.cuh's block reads (`rd16`, `rd32`: the device's own, aligned loads included; the
/// harnesses compile at -O1, without strict aliasing, on x86, where unaligned loads work).
pub fn prelude_reads() -> String {
    let p = file("prelude.cuh");
    let start = p.find("// Little-endian reads from block bytes").expect("the reads in prelude");
    let end = p.find("// ggml block sizes").expect("the block sizes after the reads");
    p[start..end].to_string()
}

/// The harnesses' file reading, before their `main`.
const HOST_IO: &str = r#"
static std::vector<u8> slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(2); }
    std::vector<u8> v;
    int c;
    while ((c = fgetc(f)) != EOF) v.push_back((u8)c);
    fclose(f);
    return v;
}
"#;

/// A harness for `name` in `dir`: the shim, prelude's types, `launch_shim` (empty, or one of
/// the launch shims), the kernel files `kernels` in order, then `main`; `None` (after a note)
/// without a compiler.
pub fn harness(
    dir: &Path,
    name: &str,
    launch_shim: &str,
    kernels: &[&str],
    main: &str,
) -> Option<PathBuf> {
    let mut src =
        format!("{SHIM}\n{}\n{SHIM_FUNCTIONS}\n{}\n{launch_shim}\n", prelude(), prelude_reads());
    if launch_shim.contains("std::thread") {
        src.push_str(&prelude_reductions());
    }
    for k in kernels {
        src.push_str(file(k));
        src.push('\n');
    }
    src.push_str(HOST_IO);
    src.push_str(main);
    build(dir, name, &src)
}

/// Runs `exe` with `head`, then `nums`, then `files` as arguments (a harness's usual order).
pub fn call(exe: &Path, head: &[&str], nums: &[usize], files: &[String]) -> String {
    let nums: Vec<String> = nums.iter().map(|v| v.to_string()).collect();
    let mut argv: Vec<&str> = head.to_vec();
    argv.extend(nums.iter().map(String::as_str));
    argv.extend(files.iter().map(String::as_str));
    run(exe, &argv)
}

/// A harness's output lines of f32 bits in hex.
pub fn floats(out: &str) -> Vec<f32> {
    out.lines().map(|l| f32::from_bits(u32::from_str_radix(l, 16).unwrap())).collect()
}

/// The f64 dot of two rows and the sum of the products' magnitudes (the error's scale).
pub fn dot(w: &[f32], y: &[f32]) -> (f64, f64) {
    let p = w.iter().zip(y).map(|(a, b)| f64::from(*a) * f64::from(*b));
    p.clone().fold((0.0, 0.0), |(s, m), v| (s + v, m + v.abs()))
}

/// Little-endian bytes of f32 values, as a harness reads them.
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Little-endian bytes of i32 values.
pub fn i32_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A MUL_MAT_ID problem for the expert kernels' harnesses: `n_expert` random experts of `rows`
/// rows of `k` values of `dtype`, activations of `nb` rows a token for `n_tokens` tokens, and
/// `ids` (`n_used` used a token, tokens `stride` apart; an id out of range gives NaN).
pub struct Experts<'a> {
    pub dtype: tessera_tensor::DType,
    pub rows: usize,
    pub k: usize,
    pub n_expert: usize,
    pub n_used: usize,
    pub nb: usize,
    pub n_tokens: usize,
    pub stride: usize,
    pub ids: &'a [i32],
}

impl Experts<'_> {
    /// Runs `MODE ENTRY ROWS NBLOCKS ROW_BYTES EXPERT_BYTES N_EXPERT N_USED NB N_TOKENS
    /// IDS_STRIDE W Y IDS` and checks every output row (token, slot) against the f64 products.
    pub fn check(&self, exe: &Path, dir: &Path, mode: &str, entry: &str) {
        use tessera_tensor::quant::{dequantize, quantize};
        let (t, rows, k) = (self.dtype, self.rows, self.k);
        let row_bytes = t.row_size(k as u64).unwrap() as usize;
        let experts = quantize(t, &values(self.n_expert * rows * k, 70 + t.id() as u64)).unwrap();
        let ed = dequantize(t, &experts).unwrap();
        let b = quantize(tessera_tensor::DType::Q8_1, &values(k * self.nb * self.n_tokens, 50))
            .unwrap();
        let bd = dequantize(tessera_tensor::DType::Q8_1, &b).unwrap();
        let files = [
            write(dir, "e.bin", &experts),
            write(dir, "b.bin", &b),
            write(dir, "ids.bin", &i32_bytes(self.ids)),
        ];
        let nums = [
            rows,
            k / 32,
            row_bytes,
            rows * row_bytes,
            self.n_expert,
            self.n_used,
            self.nb,
            self.n_tokens,
            self.stride,
        ];
        let got = floats(&call(exe, &[mode, entry], &nums, &files));
        assert_eq!(got.len(), rows * self.n_used * self.n_tokens);
        for tok in 0..self.n_tokens {
            for slot in 0..self.n_used {
                let id = self.ids[tok * self.stride + slot];
                for r in 0..rows {
                    let g = f64::from(got[(tok * self.n_used + slot) * rows + r]);
                    if id < 0 || id as usize >= self.n_expert {
                        assert!(g.is_nan(), "{entry} id: an id out of range gives NaN, not {g}");
                        continue;
                    }
                    let wrow = &ed[(id as usize * rows + r) * k..][..k];
                    let (want, scale) = dot(wrow, &bd[(tok * self.nb + slot % self.nb) * k..][..k]);
                    let err = (g - want).abs() / scale.max(1e-9);
                    assert!(
                        err < 2e-3,
                        "{entry} id: token {tok} slot {slot} row {r}: {g} != {want}"
                    );
                }
            }
        }
    }
}
