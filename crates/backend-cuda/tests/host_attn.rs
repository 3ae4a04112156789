//! Kernels with shared memory, barriers and warp shuffles run on the CPU, each thread of a block
//! an OS thread (`common::THREADS_SHIM`): decode attention (`fattn_vec_op` with one split and
//! with several merged by `fattn_vec_combine`, the path #37 decodes with), the prompt kernels
//! (`fattn_tile_op`, and `fattn_mma_op` with its f16 mma emulated from the PTX layout), the
//! generic attention with and without sinks, SOFT_MAX with sinks, the fused RMS_NORM x weight and the
//! activations' Q8_1 quantization, against f64 references of the ops (ggml's definitions).
//!
//! Skipped, with a note, where no C++ compiler is found; `REQUIRE_CXX=1` makes that a failure.

mod common;

use common::{f32_bytes, floats, run, values, write, THREADS_SHIM};
use half::f16;
use std::path::Path;
use tessera_tensor::quant::{dequantize, quantize};
use tessera_tensor::DType;

/// The f16 `mma.sync.m16n8k16` as the PTX ISA defines it (A: lane 4g + t holds row g's columns
/// 2t, 2t+1 in a0, row g + 8's in a1, columns 2t + 8, 2t + 9 in a2 and a3; B: column g's rows
/// 2t, 2t+1 in b0 and 2t + 8, 2t + 9 in b1; D: rows g and g + 8 at columns 2t, 2t + 1), written
/// from the specification, lanes exchanging their registers through the shim's warp barriers.
const MMA_F16_SHIM: &str = r#"
#define FM_HOST_MMA
static u32 mma_f16_regs[32][32][6];
static inline float half_of(u32 w, int k) { return h2f((u16)(w >> (16 * (k & 1)))); }
static inline void mma_f16_16816(float *d, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    const u32 regs[6] = {a0, a1, a2, a3, b0, b1};
    for (int i = 0; i < 6; ++i) mma_f16_regs[w][l][i] = regs[i];
    warp_bar[w].wait();
    const int g = l / 4, t = l % 4;
    for (int x = 0; x < 4; ++x) {
        const int row = g + (x < 2 ? 0 : 8), col = 2 * t + (x & 1);
        double s = d[x];
        for (int k = 0; k < 16; ++k) {
            const u32 a = mma_f16_regs[w][(row % 8) * 4 + (k % 8) / 2][(row / 8) + 2 * (k / 8)];
            const u32 b = mma_f16_regs[w][col * 4 + (k % 8) / 2][4 + k / 8];
            s += (double)half_of(a, k) * (double)half_of(b, k);
        }
        d[x] = (float)s;
    }
    warp_bar[w].wait();
}
"#;

/// `fa vec|generic|tile|mma SPLITS SINKS D NQ NH NKV NKH Q K V MASK SINKS`, `softmax NKV NQ NH A MASK
/// SINKS`, `rmsnorm N ROWS A W`, `q8 N X`: outputs as hex bits (`q8`: the blocks' bytes).
const MAIN: &str = r#"
static TT tt(void *p, i64 n0, i64 n1, i64 n2, int type, i64 es) {
    TT t;
    t.p = (u8 *)p;
    t.ne[0] = n0; t.ne[1] = n1; t.ne[2] = n2; t.ne[3] = 1;
    t.nb[0] = es; t.nb[1] = es * n0; t.nb[2] = es * n0 * n1; t.nb[3] = es * n0 * n1 * n2;
    t.type = type; t.pad = 0;
    return t;
}
static void print_f32(const std::vector<float> &v) { for (float x : v) printf("%08x\n", __float_as_uint(x)); }
static void print_q8(const std::vector<u8> &v) { for (u8 b : v) printf("q%02x\n", b); }
int main(int argc, char **argv) {
    const char *op = argv[1];
    if (!strcmp(op, "fa")) {
        const bool vec = !strcmp(argv[2], "vec"), tile = !strcmp(argv[2], "tile"), mma = !strcmp(argv[2], "mma");
        const int splits = atoi(argv[3]), sinks = atoi(argv[4]);
        const i64 d = atol(argv[5]), nq = atol(argv[6]), nh = atol(argv[7]), nkv = atol(argv[8]), nkh = atol(argv[9]);
        std::vector<u8> qb = slurp(argv[10]), kb = slurp(argv[11]), vb = slurp(argv[12]), mb = slurp(argv[13]), sb = slurp(argv[14]);
        std::vector<float> out(d * nh * nq);
        TT td = tt(out.data(), d, nh, nq, T_F32, 4), tq = tt(qb.data(), d, nq, nh, T_F32, 4);
        TT tk = tt(kb.data(), d, nkv, nkh, T_F16, 2), tv = tt(vb.data(), d, nkv, nkh, T_F16, 2);
        TT tm = tt(mb.data(), nkv, nq, 1, T_F16, 2), ts = tt(sb.data(), nh, 1, 1, T_F32, 4);
        const i64 rows = nq * nh;
        // The merges write the output's Q8_1 blocks too (printed after it) where d allows.
        std::vector<u8> q8(d % 32 == 0 ? rows * d / 32 * Q8_1_BYTES : 0);
        u8 *q8p = q8.empty() ? nullptr : q8.data();
        if (!strcmp(argv[2], "mmadec")) {
            const i64 chunk = (nkv + splits - 1) / splits;
            std::vector<float> part(rows * splits * (d + 2));
            const i64 groups = (nh / nkh * nq + 15) / 16;
            launch3(nkh * groups, splits, 1, 32 * FMD_WARPS, [&] { fattn_mma_dec_op(td, tq, tk, tv, tm, 1, 0.125f, 0.0f, 0.0f, splits, chunk, part.data()); });
            if (splits > 1) launch(rows, 1, 128, [&] { fattn_vec_combine(td, tq, part.data(), splits, d, q8p); });
        } else if (mma) {
            launch3((nq + FM_ROWS - 1) / FM_ROWS, nh, 1, 32 * FM_WARPS, [&] { fattn_mma_op(td, tq, tk, tv, tm, 1, 0.125f, 0.0f, 0.0f, ts, sinks); });
        } else if (tile) {
            launch3((nq + 15) / 16, nh, 1, 128, [&] { fattn_tile_op(td, tq, tk, tv, tm, 1, 0.125f, 0.0f, 0.0f, ts, sinks); });
        } else if (vec) {
            const i64 chunk = (nkv + splits - 1) / splits;
            std::vector<float> part(rows * splits * (d + 2));
            launch(rows, splits, 128, [&] { fattn_vec_op(td, tq, tk, tv, tm, 1, 0.125f, 0.0f, 0.0f, splits, chunk, part.data()); });
            if (splits > 1) launch(rows, 1, 128, [&] { fattn_vec_combine(td, tq, part.data(), splits, d, q8p); });
        } else {
            launch((rows + 3) / 4, 1, 128, [&] { flash_attn_op(td, tq, tk, tv, tm, 1, 0.125f, 0.0f, 0.0f, ts, sinks); });
        }
        print_f32(out);
        if ((vec || !strcmp(argv[2], "mmadec")) && splits > 1) print_q8(q8);
    } else if (!strcmp(op, "softmax")) {
        const i64 nkv = atol(argv[2]), nq = atol(argv[3]), nh = atol(argv[4]);
        std::vector<u8> ab = slurp(argv[5]), mb = slurp(argv[6]), sb = slurp(argv[7]);
        std::vector<float> out(nkv * nq * nh);
        TT td = tt(out.data(), nkv, nq, nh, T_F32, 4), ta = tt(ab.data(), nkv, nq, nh, T_F32, 4);
        TT tm = tt(mb.data(), nkv, nq, 1, T_F16, 2), ts = tt(sb.data(), nh, 1, 1, T_F32, 4);
        launch(nq * nh, 1, 64, [&] { soft_max_op(td, ta, tm, 1, 0.5f, 0.0f, ts, 1); });
        print_f32(out);
    } else if (!strcmp(op, "addnorm")) {
        const i64 n = atol(argv[2]), rows = atol(argv[3]), threads = atol(argv[7]);
        std::vector<u8> ab = slurp(argv[4]), bb = slurp(argv[5]), wb = slurp(argv[6]);
        std::vector<float> sum(n * rows), out(n * rows);
        TT ts = tt(sum.data(), n, rows, 1, T_F32, 4), td = tt(out.data(), n, rows, 1, T_F32, 4);
        TT ta = tt(ab.data(), n, rows, 1, T_F32, 4), tb = tt(bb.data(), n, rows, 1, T_F32, 4);
        TT tw = tt(wb.data(), n, 1, 1, T_F32, 4);
        std::vector<u8> q8(n / 32 * rows * Q8_1_BYTES);
        u8 *q8p = n % 32 == 0 ? q8.data() : nullptr;
        launch(rows, 1, threads, [&] { add_rms_norm_mul_op(ts, ta, tb, td, tw, 1e-6f, q8p); });
        print_f32(sum);
        print_f32(out);
        print_q8(q8);
        // In place, as the allocator may run the ADD: the sum over a's own memory.
        launch(rows, 1, threads, [&] { add_rms_norm_mul_op(ta, ta, tb, td, tw, 1e-6f, nullptr); });
        std::vector<float> in_place(n * rows);
        memcpy(in_place.data(), ab.data(), n * rows * 4);
        print_f32(in_place);
        print_f32(out);
    } else if (!strcmp(op, "ropeset")) {
        // K [64, 2 heads, 3 tokens] at positions 7, 300, 9000 (NeoX), into an f16 cache of 8
        // rows of 128 at rows 5, 0, 2: rope_op then set_rows_op, and rope_set_rows_op.
        const i64 hd = 64, nh = 2, nt = 3, cells = 8;
        std::vector<u8> kb = slurp(argv[2]);
        std::vector<i32> pos = {7, 300, 9000};
        std::vector<i64> idx = {5, 0, 2};
        std::vector<float> rot(hd * nh * nt);
        std::vector<u16> unfused(hd * nh * cells, 0), fused(hd * nh * cells, 0);
        TT tk = tt(kb.data(), hd, nh, nt, T_F32, 4), tr = tt(rot.data(), hd, nh, nt, T_F32, 4);
        TT tp = tt(pos.data(), nt, 1, 1, T_I32, 4), ti = tt(idx.data(), nt, 1, 1, T_I64, 8);
        TT tf = tt(nullptr, 0, 1, 1, T_F32, 4);
        TT rows = tt(rot.data(), hd * nh, nt, 1, T_F32, 4);
        TT cu = tt(unfused.data(), hd * nh, cells, 1, T_F16, 2), cf = tt(fused.data(), hd * nh, cells, 1, T_F16, 2);
        launch(1, 1, 64, [&] { rope_op(tr, tk, tp, tf, 0, (int)hd, 2, 10000.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0, 0, 0, 0); });
        launch(1, 1, 64, [&] { set_rows_op(cu, rows, ti); });
        launch(1, 1, 64, [&] { rope_set_rows_op(cf, ti, tk, tp, tf, 0, (int)hd, 2, 10000.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0, 0, 0, 0); });
        for (u16 h : unfused) printf("%08x\n", __float_as_uint(h2f(h)));
        for (u16 h : fused) printf("%08x\n", __float_as_uint(h2f(h)));
        // The whole step's inputs: Q [64, 4, 3] rotated, K as above, V [128, 3] into rows
        // 1, 7, 4 of an f16 cache: rope_op + set_rows_op against rope_kv_store_op.
        std::vector<u8> qb = slurp(argv[3]), vb = slurp(argv[4]);
        std::vector<i64> vidx = {1, 7, 4};
        std::vector<float> qu(hd * 4 * nt), qf(hd * 4 * nt);
        std::vector<u16> vu(hd * nh * cells, 0), vf(hd * nh * cells, 0), kf(hd * nh * cells, 0);
        TT tq = tt(qb.data(), hd, 4, nt, T_F32, 4), tqu = tt(qu.data(), hd, 4, nt, T_F32, 4), tqf = tt(qf.data(), hd, 4, nt, T_F32, 4);
        TT tv = tt(vb.data(), hd * nh, nt, 1, T_F32, 4), tvi = tt(vidx.data(), nt, 1, 1, T_I64, 8);
        TT cvu = tt(vu.data(), hd * nh, cells, 1, T_F16, 2), cvf = tt(vf.data(), hd * nh, cells, 1, T_F16, 2);
        TT ckf = tt(kf.data(), hd * nh, cells, 1, T_F16, 2);
        launch(1, 1, 64, [&] { rope_op(tqu, tq, tp, tf, 0, (int)hd, 0, 10000.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0, 0, 0, 0); });
        launch(1, 1, 64, [&] { rope_op(tr, tk, tp, tf, 0, (int)hd, 0, 10000.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0, 0, 0, 0); });
        std::fill(unfused.begin(), unfused.end(), 0);
        launch(1, 1, 64, [&] { set_rows_op(cu, rows, ti); });
        launch(1, 1, 64, [&] { set_rows_op(cvu, tv, tvi); });
        launch3(2, 3, 1, 64, [&] { rope_kv_store_op(tqf, tq, ckf, ti, tk, cvf, tvi, tv, tp, tf, 0, (int)hd, 0, 10000.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0, 0, 0, 0); });
        print_f32(qu);
        print_f32(qf);
        for (const auto *c : {&unfused, &kf, &vu, &vf})
            for (u16 h : *c) printf("%08x\n", __float_as_uint(h2f(h)));
    } else if (!strcmp(op, "rmsnorm")) {
        const i64 n = atol(argv[2]), rows = atol(argv[3]), threads = atol(argv[6]);
        std::vector<u8> ab = slurp(argv[4]), wb = slurp(argv[5]);
        std::vector<float> out(n * rows);
        TT td = tt(out.data(), n, rows, 1, T_F32, 4), ta = tt(ab.data(), n, rows, 1, T_F32, 4);
        TT tw = tt(wb.data(), n, 1, 1, T_F32, 4);
        std::vector<u8> q8(n / 32 * rows * Q8_1_BYTES);
        u8 *q8p = n % 32 == 0 ? q8.data() : nullptr;
        launch(rows, 1, threads, [&] { rms_norm_mul_op(td, ta, tw, 1e-6f, q8p); });
        print_f32(out);
        print_q8(q8);
    } else {
        const i64 n = atol(argv[2]);
        std::vector<u8> xb = slurp(argv[3]);
        std::vector<float> x(n);
        memcpy(x.data(), xb.data(), n * 4);
        const i64 nblocks = n / 32;
        std::vector<u8> out(nblocks * Q8_1_BYTES);
        launch((nblocks + 7) / 8, 1, 256, [&] { quantize_q8_1(x.data(), out.data(), nblocks); });
        print_q8(out);
    }
    return 0;
}
"#;

fn f16_round(v: &[f32]) -> (Vec<u8>, Vec<f32>) {
    let h: Vec<f16> = v.iter().map(|&x| f16::from_f32(x)).collect();
    (h.iter().flat_map(|x| x.to_le_bytes()).collect(), h.iter().map(|x| x.to_f32()).collect())
}

/// The largest difference between `got` and `want`, relative to `want`'s largest magnitude.
fn rel_err(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0f64, |m, v| m.max(v.abs())).max(1e-12);
    got.iter().zip(want).fold(0f64, |m, (g, w)| m.max((f64::from(*g) - w).abs())) / scale
}

/// One attention problem: 4 query heads over 2 KV heads of 64, `nq` query rows, 150 cells,
/// row r seeing cells 0..=lo + step r; F16 K, V and mask as the cache and graphs hold them.
struct Attn {
    nq: usize,
    nh: usize,
    nkv: usize,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    mask: Vec<u8>,
    sinks: Vec<f32>,
    lo_step: (usize, usize),
    files: [String; 5],
}

impl Attn {
    const D: usize = 64;
    const NKH: usize = 2;

    fn new(dir: &std::path::Path, nq: usize, lo_step: (usize, usize)) -> Attn {
        let (d, nh, nkv, nkh) = (Self::D, 4, 150, Self::NKH);
        let q = values(d * nq * nh, 1);
        let (kb, k) = f16_round(&values(d * nkv * nkh, 2));
        let (vb, v) = f16_round(&values(d * nkv * nkh, 3));
        let visible = |r: usize, c: usize| c <= lo_step.0 + lo_step.1 * r;
        let m: Vec<f32> = (0..nq)
            .flat_map(|r| {
                (0..nkv).map(move |c| if visible(r, c) { 0.0 } else { f32::NEG_INFINITY })
            })
            .collect();
        let (mask, _) = f16_round(&m);
        let sinks: Vec<f32> = (0..nh).map(|h| 0.5 + h as f32).collect();
        let tag = format!("{nq}");
        let files = [
            write(dir, &format!("q{tag}.bin"), &f32_bytes(&q)),
            write(dir, &format!("k{tag}.bin"), &kb),
            write(dir, &format!("v{tag}.bin"), &vb),
            write(dir, &format!("m{tag}.bin"), &mask),
            write(dir, &format!("s{tag}.bin"), &f32_bytes(&sinks)),
        ];
        Attn { nq, nh, nkv, q, k, v, mask, sinks, lo_step, files }
    }

    fn visible(&self, r: usize, c: usize) -> bool {
        c <= self.lo_step.0 + self.lo_step.1 * r
    }

    /// The f64 attention, out `[d, nh, nq]` (q row (r, h) at `q[(h * nq + r) * d..]`).
    fn reference(&self, with_sinks: bool) -> Vec<f64> {
        let (d, nq, nh, nkv) = (Self::D, self.nq, self.nh, self.nkv);
        let mut out = vec![0f64; d * nh * nq];
        for r in 0..nq {
            for h in 0..nh {
                let hk = h / (nh / Self::NKH);
                let qr = &self.q[(h * nq + r) * d..][..d];
                let s: Vec<f64> = (0..nkv)
                    .map(|c| {
                        let kr = &self.k[(hk * nkv + c) * d..][..d];
                        let dot: f64 =
                            qr.iter().zip(kr).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
                        if self.visible(r, c) {
                            dot * 0.125
                        } else {
                            f64::NEG_INFINITY
                        }
                    })
                    .collect();
                let sink = f64::from(self.sinks[h]);
                let mx = s
                    .iter()
                    .fold(if with_sinks { sink } else { f64::NEG_INFINITY }, |m, v| m.max(*v));
                let mut sum: f64 = s.iter().map(|v| (v - mx).exp()).sum();
                if with_sinks {
                    sum += (sink - mx).exp();
                }
                for col in 0..d {
                    let o: f64 = (0..nkv)
                        .map(|c| (s[c] - mx).exp() * f64::from(self.v[(hk * nkv + c) * d + col]))
                        .sum();
                    out[(r * nh + h) * d + col] = o / sum;
                }
            }
        }
        out
    }

    /// The kernel of `mode` (`vec`, `generic`, `tile`) on the problem.
    fn run(&self, exe: &std::path::Path, mode: &str, splits: usize, sinks: bool) -> Vec<f32> {
        let dims = [Self::D, self.nq, self.nh, self.nkv, Self::NKH].map(|x| x.to_string());
        let (sp, sk) = (splits.to_string(), i32::from(sinks).to_string());
        let mut argv = vec!["fa", mode, &sp, &sk];
        argv.extend(dims.iter().map(String::as_str));
        argv.extend(self.files.iter().map(String::as_str));
        let (out, q8) = split_q8(&run(exe, &argv));
        if splits > 1 && matches!(mode, "vec" | "mmadec") {
            // The merge's Q8_1 blocks: quantize_q8_1's of the output, byte for byte.
            let dir = exe.parent().unwrap();
            check_q8(exe, dir, &out, &q8, Self::D, &format!("fattn_vec_combine after {mode}"));
        }
        out
    }
}

#[test]
fn attention_norm_and_q8_kernels_match_f64() {
    let dir = std::env::temp_dir().join(format!("tessera-host-attn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kernels = &[
        "types.cuh",
        "attn.cuh",
        "ops.cu",
        "fattn_vec.cu",
        "fattn_tile.cu",
        "fattn_mma.cu",
        "fused.cu",
        "vecdotq.cuh",
        "quant.cu",
    ];
    let shim = format!("{THREADS_SHIM}{MMA_F16_SHIM}");
    let Some(exe) = common::harness(&dir, "attn_harness", &shim, kernels, MAIN) else {
        return;
    };

    // Decode-sized attention (2 query rows): row r sees cells 0..=120 + 20 r of 150.
    let small = Attn::new(&dir, 2, (120, 20));
    let plain = small.reference(false);
    for splits in [1, 3] {
        let e = rel_err(&small.run(&exe, "vec", splits, false), &plain);
        assert!(e < 1e-5, "fattn_vec_op, {splits} splits: error {e:.2e}");
    }
    // The tensor-core decode kernel: each KV head's 2 query heads x 2 rows in one block, over
    // one chunk (the four warps' tiles of 16 cells merged: 3, 3, 2 and 2 of them) and over
    // three (50 cells each: tiles straddle them) merged.
    for splits in [1, 3] {
        let e = rel_err(&small.run(&exe, "mmadec", splits, false), &plain);
        assert!(e < 4e-3, "fattn_mma_dec_op, {splits} splits: error {e:.2e}");
    }
    let e = rel_err(&small.run(&exe, "generic", 1, false), &plain);
    assert!(e < 1e-5, "flash_attn_op: error {e:.2e}");
    let e = rel_err(&small.run(&exe, "generic", 1, true), &small.reference(true));
    assert!(e < 1e-5, "flash_attn_op with sinks: error {e:.2e}");
    assert!(
        rel_err(&small.run(&exe, "generic", 1, true), &plain) > 1e-3,
        "the sinks change nothing"
    );
    // A prompt (20 rows: a whole block of 16 and a part): row r sees cells 0..=60 + 5 r.
    let prompt = Attn::new(&dir, 20, (60, 5));
    for sinks in [false, true] {
        let e = rel_err(&prompt.run(&exe, "tile", 1, sinks), &prompt.reference(sinks));
        assert!(e < 1e-5, "fattn_tile_op, sinks {sinks}: error {e:.2e}");
    }
    // The tensor-core kernel: queries and probabilities rounded to f16 on the way in (as
    // llama.cpp's), so a looser bound; 20 rows (part of a block of 64), then 70 (a whole block
    // and a part) with sinks.
    let e = rel_err(&prompt.run(&exe, "mma", 1, false), &prompt.reference(false));
    assert!(e < 4e-3, "fattn_mma_op: error {e:.2e}");
    let long = Attn::new(&dir, 70, (10, 2));
    // The decode kernel's groups of 16 rows: 2 heads x 20 rows a KV head, three groups.
    let e = rel_err(&prompt.run(&exe, "mmadec", 2, false), &prompt.reference(false));
    assert!(e < 4e-3, "fattn_mma_dec_op in groups of 16 rows: error {e:.2e}");
    let e = rel_err(&long.run(&exe, "mma", 1, true), &long.reference(true));
    assert!(e < 4e-3, "fattn_mma_op, 70 rows with sinks: error {e:.2e}");
    assert!(
        rel_err(&long.run(&exe, "mma", 1, true), &long.reference(false)) > 1e-2,
        "the sinks change nothing"
    );

    // SOFT_MAX(a * 0.5 + mask) with sinks, over [nkv, nq, nh] (the decode problem's mask).
    let (nkv, nq, nh) = (small.nkv, small.nq, small.nh);
    let (sinks, mb, visible) =
        (&small.sinks, &small.mask, |r: usize, c: usize| small.visible(r, c));
    let a = values(nkv * nq * nh, 4);
    let args = [
        write(&dir, "a.bin", &f32_bytes(&a)),
        write(&dir, "m.bin", mb),
        write(&dir, "s.bin", &f32_bytes(sinks)),
    ];
    let (snkv, snq, snh) = (nkv.to_string(), nq.to_string(), nh.to_string());
    let got = floats(&run(&exe, &["softmax", &snkv, &snq, &snh, &args[0], &args[1], &args[2]]));
    let mut want = vec![0f64; a.len()];
    for h in 0..nh {
        for r in 0..nq {
            let row = &a[(h * nq + r) * nkv..][..nkv];
            let x: Vec<f64> = (0..nkv)
                .map(|c| if visible(r, c) { f64::from(row[c]) * 0.5 } else { f64::NEG_INFINITY })
                .collect();
            let sink = f64::from(sinks[h]);
            let mx = x.iter().fold(sink, |m, v| m.max(*v));
            let sum: f64 = x.iter().map(|v| (v - mx).exp()).sum::<f64>() + (sink - mx).exp();
            for c in 0..nkv {
                want[(h * nq + r) * nkv + c] = (x[c] - mx).exp() / sum;
            }
        }
    }
    let e = rel_err(&got, &want);
    assert!(e < 1e-5, "soft_max_op with sinks: error {e:.2e}");

    // K rotated into the cache in one pass: the same f16 bits as ROPE then SET_ROWS, in the
    // indexed rows only.
    let k = values(64 * 2 * 3, 9);
    let kf = write(&dir, "k.bin", &f32_bytes(&k));
    let q = values(64 * 4 * 3, 10);
    let qf = write(&dir, "q.bin", &f32_bytes(&q));
    let v = values(128 * 3, 11);
    let vf = write(&dir, "v.bin", &f32_bytes(&v));
    let got = floats(&run(&exe, &["ropeset", &kf, &qf, &vf]));
    let cache = 128 * 8;
    assert_eq!(got.len(), 6 * cache + 2 * q.len());
    let (unfused, fused) = got[..2 * cache].split_at(cache);
    // The step's inputs in one launch (NORM mode): Q, the K cache and the V cache, each the
    // bits of its own kernel.
    let step = &got[2 * cache..];
    let (qu, step) = step.split_at(q.len());
    let (qfu, step) = step.split_at(q.len());
    let same = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
    assert!(same(qu, qfu), "rope_kv_store_op's Q");
    assert!(qu.iter().zip(&q).any(|(a, b)| a != b), "Q not rotated");
    let caches: Vec<&[f32]> = step.chunks(cache).collect();
    assert!(same(caches[0], caches[1]), "rope_kv_store_op's K cache");
    assert!(same(caches[2], caches[3]), "rope_kv_store_op's V cache");
    for (cell, row) in caches[3].chunks(128).enumerate() {
        let token = [1, 7, 4].iter().position(|&c| c == cell);
        match token {
            Some(t) => assert!(
                row.iter().zip(&v[t * 128..]).all(|(a, b)| (a - b).abs() <= b.abs() * 1e-3),
                "V cache row {cell}"
            ),
            None => assert!(row.iter().all(|x| *x == 0.0), "V cache row {cell} written"),
        }
    }
    assert!(fused.iter().zip(unfused).all(|(a, b)| a.to_bits() == b.to_bits()), "rope_set_rows_op");
    for (cell, row) in fused.chunks(128).enumerate() {
        let written = [5, 0, 2].contains(&cell);
        assert_eq!(row.iter().any(|v| *v != 0.0), written, "cache row {cell}");
    }
    // The rotation itself: token 0 (position 7) in cell 5, head 0's first NeoX pair.
    let theta = 7.0f64;
    let want = f64::from(k[0]) * theta.cos() - f64::from(k[32]) * theta.sin();
    assert!((f64::from(fused[5 * 128]) - want).abs() < 2e-3, "{} vs {want}", fused[5 * 128]);

    // RMS_NORM x weight (and the residual ADD before): rows of 1000 (a partial fast path),
    // then 1024 (whole Q8_1 blocks: the kernels write their output's blocks too).
    for n in [1000, 1024] {
        check_norms(&exe, &dir, n);
    }

    // Q8_1 of 8 blocks: the same values as ggml's quantizer gives, within a quant step.
    let x = values(256, 8);
    let xf = write(&dir, "x8.bin", &f32_bytes(&x));
    let bytes = q8_bytes(&run(&exe, &["q8", "256", &xf]));
    let got = dequantize(DType::Q8_1, &bytes).unwrap();
    let want = dequantize(DType::Q8_1, &quantize(DType::Q8_1, &x).unwrap()).unwrap();
    for (blk, (g, w)) in got.chunks(32).zip(want.chunks(32)).enumerate() {
        let amax = x[blk * 32..][..32].iter().fold(0f32, |m, v| m.max(v.abs()));
        for (i, (a, b)) in g.iter().zip(w).enumerate() {
            assert!((a - b).abs() <= amax / 127.0 * 1.01, "q8_1 block {blk} value {i}: {a} vs {b}");
        }
        // The block's sum field (d times the quants' sum) as the int8 kernels read it.
        let s = f16::from_le_bytes([bytes[blk * 36 + 2], bytes[blk * 36 + 3]]).to_f32();
        let sum: f32 = g.iter().sum();
        assert!((s - sum).abs() <= 0.01 * sum.abs().max(1.0), "q8_1 block {blk}: sum {s} vs {sum}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The fused norms over 3 rows of `n`: at 64 threads a row fits the registers (16 values a
/// thread: the fast path), at 32 it does not (the strided loop); the outputs against f64, and
/// where `n` is whole Q8_1 blocks, the blocks they write against quantize_q8_1's of their
/// output, byte for byte.
fn check_norms(exe: &Path, dir: &Path, n: usize) {
    let rows = 3usize;
    let x = values(n * rows, 5);
    let w = values(n, 6);
    let xf = write(dir, "x.bin", &f32_bytes(&x));
    let wf = write(dir, "w.bin", &f32_bytes(&w));
    let b = values(n * rows, 7);
    let bf = write(dir, "b.bin", &f32_bytes(&b));
    let (ns, rs) = (n.to_string(), rows.to_string());
    for threads in ["64", "32"] {
        let (got, q8) = split_q8(&run(exe, &["rmsnorm", &ns, &rs, &xf, &wf, threads]));
        check_q8(exe, dir, &got, &q8, n, "rms_norm_mul_op");
        let w = &w;
        let want: Vec<f64> = (0..rows)
            .flat_map(|r| {
                let row = &x[r * n..][..n];
                let ms = row.iter().map(|v| f64::from(*v) * f64::from(*v)).sum::<f64>() / n as f64;
                let scale = 1.0 / (ms + 1e-6).sqrt();
                (0..n).map(move |i| f64::from(row[i]) * scale * f64::from(w[i])).collect::<Vec<_>>()
            })
            .collect();
        let e = rel_err(&got, &want);
        assert!(e < 1e-5, "rms_norm_mul_op, {threads} threads: error {e:.2e}");
        // The residual ADD before them: x = a + b stored, then the same norm x weight of x;
        // then in place (the sum over a).
        let (got, q8) = split_q8(&run(exe, &["addnorm", &ns, &rs, &xf, &bf, &wf, threads]));
        check_q8(exe, dir, &got[n * rows..2 * n * rows], &q8, n, "add_rms_norm_mul_op");
        assert_eq!(got.len(), 4 * n * rows);
        let (sum, out) = got[..2 * n * rows].split_at(n * rows);
        let (sum_in_place, out_in_place) = got[2 * n * rows..].split_at(n * rows);
        for (i, s) in sum.iter().enumerate() {
            assert_eq!(s.to_bits(), (x[i] + b[i]).to_bits(), "add_rms_norm_mul_op's sum {i}");
        }
        assert_eq!(sum, sum_in_place, "add_rms_norm_mul_op's sum in place, {threads} threads");
        assert_eq!(out, out_in_place, "add_rms_norm_mul_op in place, {threads} threads");
        let want: Vec<f64> = (0..rows)
            .flat_map(|r| {
                let row: Vec<f64> =
                    (0..n).map(|i| f64::from(x[r * n + i] + b[r * n + i])).collect();
                let ms = row.iter().map(|v| v * v).sum::<f64>() / n as f64;
                let scale = 1.0 / (ms + 1e-6).sqrt();
                (0..n).map(move |i| row[i] * scale * f64::from(w[i])).collect::<Vec<_>>()
            })
            .collect();
        let e = rel_err(out, &want);
        assert!(e < 1e-5, "add_rms_norm_mul_op, {threads} threads: error {e:.2e}");
    }
}

/// A harness's output: f32 lines, then `q`-prefixed bytes of Q8_1 blocks.
fn split_q8(out: &str) -> (Vec<f32>, Vec<u8>) {
    let (q, f): (Vec<&str>, Vec<&str>) = out.lines().partition(|l| l.starts_with('q'));
    (floats(&f.join("\n")), q8_bytes(&q.join("\n")))
}

fn q8_bytes(out: &str) -> Vec<u8> {
    out.lines().map(|l| u8::from_str_radix(l.trim_start_matches('q'), 16).unwrap()).collect()
}

/// `q8` (a fused norm's Q8_1 blocks of rows of `n`) is quantize_q8_1's of `out`; none where
/// `n` is not whole blocks.
fn check_q8(exe: &Path, dir: &Path, out: &[f32], q8: &[u8], n: usize, what: &str) {
    if n % 32 != 0 {
        assert!(q8.iter().all(|&b| b == 0), "{what}: Q8_1 blocks written for rows of {n}");
        return;
    }
    let f = write(dir, "norm_out.bin", &f32_bytes(out));
    let want = q8_bytes(&run(exe, &["q8", &out.len().to_string(), &f]));
    assert_eq!(q8.len(), want.len(), "{what}: Q8_1 bytes");
    assert!(q8 == want.as_slice(), "{what}: its Q8_1 blocks differ from quantize_q8_1's");
}
