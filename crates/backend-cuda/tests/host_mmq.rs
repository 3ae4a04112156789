//! The int8 tensor-core products (`kernels/mmq.cu`) on the CPU: every type's codes and
//! per-16-value (scale, offset) against the dequantized blocks, then the whole `mmq_*` kernels
//! (shared-memory staging, fragments, epilogue, partial row and column blocks) against the f64
//! products of the dequantized weights and Q8_1 activations. A block's threads run as OS threads
//! (`common::THREADS_SHIM`); `mma.sync.m16n8k16` is emulated from the PTX ISA's fragment layout
//! (A: lane 4g + t holds row g's codes 4t..4t+3 and row g + 8's; B: column g's codes 4t..4t+3;
//! D: rows g and g + 8 at columns 2t, 2t + 1), written here from the specification and not from
//! the kernel.
//!
//! Skipped, with a note, where no C++ compiler is found; `REQUIRE_CXX=1` makes that a failure.

mod common;

use common::{call, dot, floats, values, write, Experts, THREADS_SHIM};
use tessera_backend_cuda::types::TYPES;
use tessera_tensor::quant::{dequantize, quantize};
use tessera_tensor::DType;

/// The warp-wide int8 mma as the PTX ISA defines it, lanes exchanging their registers through
/// the shim's warp barriers.
const MMA_SHIM: &str = r#"
#define MMQ_HOST_MMA
static i32 mma_regs[32][32][3];
static inline void mma_s8_16816(i32 *c, i32 a0, i32 a1, i32 b) {
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    mma_regs[w][l][0] = a0; mma_regs[w][l][1] = a1; mma_regs[w][l][2] = b;
    warp_bar[w].wait();
    const int g = l / 4, t = l % 4;
    for (int k = 0; k < 4; ++k) {
        const int row = g + (k < 2 ? 0 : 8), col = 2 * t + (k & 1);
        i32 s = 0;
        for (int kk = 0; kk < 16; ++kk) {
            const i32 aw = mma_regs[w][(row % 8) * 4 + kk / 4][row / 8];
            const i32 bw = mma_regs[w][col * 4 + kk / 4][2];
            s += (i32)(i8)(aw >> (8 * (kk % 4))) * (i32)(i8)(bw >> (8 * (kk % 4)));
        }
        c[k] += s;
    }
    warp_bar[w].wait();
}
static std::mutex atomic_mutex;
static inline int atomicAdd(int *p, int v) {
    std::lock_guard<std::mutex> l(atomic_mutex);
    const int old = *p;
    *p += v;
    return old;
}
"#;

/// `codes ENTRY NBLOCKS W`: every value of the blocks as d * code + m (hex bits, in order);
/// `mmq ENTRY ROWS NBLOCKS ROW_BYTES COLS KPER W Y`: the outputs, column by column (K split in
/// shares of KPER blocks, added up by `mmq_sum_splits`, where KPER < NBLOCKS); `mmq_id ENTRY ROWS
/// NBLOCKS ROW_BYTES EXPERT_BYTES N_EXPERT N_USED NB N_TOKENS IDS_STRIDE W Y IDS`: the pairs
/// grouped by `moe_group_pairs`, then `mmq_id_*`; the outputs by (token, slot).
const MAIN: &str = r#"
typedef i32 (*Codes)(const u8 *, int, int);
typedef void (*Scales)(const u8 *, int, int, float *, float *);
typedef void (*Mmq)(const u8 *, const u8 *, float *, int, int, i64, int, i64, int, i64);
typedef void (*MmqId)(const u8 *, const u8 *, float *, const i32 *, int, int, i64, i64, int, int, int);
struct Entry { const char *name; Codes codes; Scales scales; Mmq mmq; MmqId id; int bytes, sub; };
#define ENTRY(T, BYTES, SUB) {"mmq_" #T, codes_##T, scales_##T, mmq_##T, mmq_id_##T, BYTES, SUB},
static const Entry ENTRIES[] = {
    ENTRY(q4_0, Q4_0_BYTES, 1) ENTRY(q4_1, Q4_1_BYTES, 1) ENTRY(q5_0, Q5_0_BYTES, 1)
    ENTRY(q5_1, Q5_1_BYTES, 1) ENTRY(q8_0, Q8_0_BYTES, 1) ENTRY(iq4_nl, IQ4_NL_BYTES, 1)
    ENTRY(mxfp4, MXFP4_BYTES, 1) ENTRY(q2_k, Q2_K_BYTES, 8) ENTRY(q3_k, Q3_K_BYTES, 8)
    ENTRY(q4_k, Q4_K_BYTES, 8) ENTRY(q5_k, Q5_K_BYTES, 8) ENTRY(q6_k, Q6_K_BYTES, 8)
    ENTRY(iq4_xs, IQ4_XS_BYTES, 8)
};
int main(int argc, char **argv) {
    const Entry *e = nullptr;
    for (const Entry &x : ENTRIES) if (!strcmp(x.name, argv[2])) e = &x;
    if (!e) { fprintf(stderr, "no kernel %s\n", argv[2]); return 2; }
    if (!strcmp(argv[1], "codes")) {
        const int nblocks = atoi(argv[3]);
        std::vector<u8> w = slurp(argv[4]);
        for (int i = 0; i < nblocks; ++i) {
            const u8 *b = w.data() + (size_t)(i / e->sub) * e->bytes;
            for (int v = 0; v < 32; ++v) {
                const i32 word = e->codes(b, i % e->sub, v / 4);
                float d, m;
                e->scales(b, i % e->sub, v / 16, &d, &m);
                const float x = d * (float)(i8)(word >> (8 * (v % 4))) + m;
                printf("%08x\n", __float_as_uint(x));
            }
        }
        return 0;
    }
    const int rows = atoi(argv[3]), nblocks = atoi(argv[4]);
    const long row_bytes = atol(argv[5]);
    if (!strcmp(argv[1], "mmq_id")) {
        const long expert_bytes = atol(argv[6]);
        const int n_expert = atoi(argv[7]), n_used = atoi(argv[8]), nb = atoi(argv[9]);
        const int n_tokens = atoi(argv[10]), ids_stride = atoi(argv[11]);
        std::vector<u8> w = slurp(argv[12]), y = slurp(argv[13]), ib = slurp(argv[14]);
        std::vector<i32> ids(ib.size() / 4);
        memcpy(ids.data(), ib.data(), ib.size());
        const int n = n_used * n_tokens;
        std::vector<i32> groups(2 * n_expert + 1 + n, -7);
        std::vector<float> out((size_t)rows * n, -1.0f);
        launch(1, 1, 64, [&] {
            moe_group_pairs(ids.data(), ids_stride, n_used, n_tokens, n_expert, groups.data(), out.data(), rows);
        });
        launch3((rows + MMQ_ROWS - 1) / MMQ_ROWS, (n + MMQ_COLS - 1) / MMQ_COLS, n_expert, MMQ_THREADS, [&] {
            e->id(w.data(), y.data(), out.data(), groups.data(), rows, nblocks, row_bytes, expert_bytes,
                  n_expert, n_used, nb);
        });
        for (float v : out) printf("%08x\n", __float_as_uint(v));
        return 0;
    }
    const int cols = atoi(argv[6]), kper = atoi(argv[7]);
    std::vector<u8> w = slurp(argv[8]), y = slurp(argv[9]);
    std::vector<float> out((size_t)rows * cols, -1.0f);
    const int splits = (nblocks + kper - 1) / kper;
    const unsigned gx = (rows + MMQ_ROWS - 1) / MMQ_ROWS, gy = (cols + MMQ_COLS - 1) / MMQ_COLS;
    if (splits == 1) {
        launch(gx, gy, MMQ_THREADS, [&] {
            e->mmq(w.data(), y.data(), out.data(), rows, nblocks, row_bytes, cols, rows, kper, 0);
        });
    } else {
        const long n = (long)rows * cols;
        std::vector<float> part((size_t)splits * n, -1.0f);
        launch3(gx, gy, splits, MMQ_THREADS, [&] {
            e->mmq(w.data(), y.data(), part.data(), rows, nblocks, row_bytes, cols, rows, kper, n);
        });
        launch(2, 1, 64, [&] { mmq_sum_splits(part.data(), out.data(), rows, cols, splits, rows); });
    }
    for (float v : out) printf("%08x\n", __float_as_uint(v));
    return 0;
}
"#;

#[test]
fn int8_tensor_core_products_match_f64() {
    let dir = std::env::temp_dir().join(format!("tessera-host-mmq-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let shim = format!("{THREADS_SHIM}{MMA_SHIM}");
    let kernels = &["types.cuh", "vecdotq.cuh", "mmq.cu"];
    let Some(exe) = common::harness(&dir, "mmq_harness", &shim, kernels, MAIN) else {
        return;
    };
    let mut checked = 0;
    for (n, row) in TYPES.iter().filter(|r| r.mmq.is_some()).enumerate() {
        let t = row.dtype;
        // Two passes of eight Q8_1 blocks: 9 blocks for the 32-value types (the second pass
        // partial), 16 for the 256-value ones where K is split below (else one pass, 8).
        let k = match (t.block_size(), n % 2) {
            (32, _) => 288,
            (_, 0) => 512,
            _ => 256,
        };
        let nblocks = k / 32;
        let entry = row.mmq.unwrap();
        let row_bytes = t.row_size(k as u64).unwrap() as usize;

        // The codes and scales: d * q + m is the dequantized value (up to the f32 rounding of
        // the two forms), for four rows of blocks.
        let w = quantize(t, &values(4 * k, 11 + t.id() as u64)).unwrap();
        let want = dequantize(t, &w).unwrap();
        let got =
            floats(&call(&exe, &["codes", entry], &[4 * nblocks], &[write(&dir, "c.bin", &w)]));
        assert_eq!(got.len(), want.len(), "{entry}");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!((g - w).abs() <= 1e-5 * w.abs().max(1e-3), "{entry} value {i}: {g} != {w}");
        }

        // The kernel: 70 rows (a whole and a partial block of 64) by 9 columns (one partial
        // block of 32), and for three types 37 columns (a second column block); the whole K in
        // one share, then split in shares of 8 blocks (the last partial for the 32-value types).
        let rows = 70;
        let cols = if n % 5 == 0 { 37 } else { 9 };
        let w = quantize(t, &values(rows * k, 7 + t.id() as u64)).unwrap();
        let wd = dequantize(t, &w).unwrap();
        let y = quantize(DType::Q8_1, &values(k * cols, 40)).unwrap();
        let yd = dequantize(DType::Q8_1, &y).unwrap();
        let files = [write(&dir, "w.bin", &w), write(&dir, "y.bin", &y)];
        // (The tile and the split are the same code for every type, whose codes and scales
        // are checked above: the split for every other type, the experts for every third.)
        let kpers: &[usize] = if n % 2 == 0 { &[16, 8] } else { &[16] };
        for &kper in kpers {
            let nums = [rows, nblocks, row_bytes, cols, kper];
            let got = floats(&call(&exe, &["mmq", entry], &nums, &files));
            assert_eq!(got.len(), rows * cols);
            for c in 0..cols {
                for r in 0..rows {
                    let (want, scale) = dot(&wd[r * k..][..k], &yd[c * k..][..k]);
                    let g = f64::from(got[c * rows + r]);
                    let err = (g - want).abs() / scale.max(1e-9);
                    assert!(
                        err < 2e-3,
                        "{entry} K shares of {kper}, column {c} row {r}: {g} != {want}"
                    );
                }
            }
        }
        // MUL_MAT_ID: three experts of 70 rows, 20 tokens of two slots (ids 3 apart: a top-k
        // view), one activation row per slot; expert 1 gets 34 pairs (two column blocks),
        // expert 0 four, expert 2 one, and one id out of range (NaN).
        if n % 3 != 0 {
            checked += 1;
            continue;
        }
        let (n_used, stride) = (2usize, 3usize);
        let mut ids = vec![1i32; 20 * stride];
        for (p, ex) in [(0, 0), (3, 2), (7, 0), (12, 0), (25, -1), (39, 0)] {
            ids[(p / n_used) * stride + p % n_used] = ex;
        }
        let problem = Experts {
            dtype: t,
            rows,
            k,
            n_expert: 3,
            n_used,
            nb: 2,
            n_tokens: 20,
            stride,
            ids: &ids,
        };
        problem.check(&exe, &dir, "mmq_id", entry);
        checked += 1;
    }
    assert_eq!(
        checked,
        TYPES.iter().filter(|r| r.mmvq.is_some()).count(),
        "MMQ for every MMVQ type"
    );
    assert!(checked >= 13, "{checked} types");
    let _ = std::fs::remove_dir_all(&dir);
}
