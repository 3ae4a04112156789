//! The int8 matrix-vector kernels (`kernels/quant.cu`'s `mmvq_*` for MUL_MAT and `mmvq_id_*`
//! for MUL_MAT_ID) run whole on the CPU: compiled with the machine's C++ compiler behind the
//! host shim (`common`), each warp's 32 lanes run one after another, last lane first, and a
//! lane's `warp_sum` returns the sum of the lanes run so far, so lane 0 (the one that writes)
//! gets the warp's sum. What the dot products' own test (`host_kernels.rs`) does not reach is
//! checked here: the kernels' loops over blocks and lanes, rows, columns, experts and ids,
//! against the f64 products of the dequantized weights and Q8_1 activations.
//!
//! Skipped, with a note, where no C++ compiler is found; `REQUIRE_CXX=1` makes that a failure.

mod common;

use common::{call, dot, floats, values, write, Experts};
use tessera_backend_cuda::types::TYPES;
use tessera_tensor::quant::{dequantize, quantize};
use tessera_tensor::DType;

/// Launch coordinates as globals and a warp's lanes run in turn (see the module docs).
const LANES_SHIM: &str = r#"
#define __global__
#define __align__(n) alignas(n)
#define WARP 32
struct Dim3 { unsigned x, y, z; };
static Dim3 blockIdx, threadIdx, blockDim, gridDim;
static float lane_acc[16];
static int lane_call;
static inline float warp_sum(float x) { return lane_acc[lane_call++] += x; }
static inline float warp_max(float x) { return x; }
static inline i32 warp_sum_i(i32 x) { return x; }
// A block's shared memory and barrier, with its warps run one after another: a warp reads
// only what earlier warps (and its own earlier lanes) wrote, as the kernels' row sums do.
#define __shared__ static
static inline void __syncthreads() {}
// Every warp of a grid of (gx, gy) blocks of bx threads, lanes 31 down to 0.
template <class F> static void launch(unsigned gx, unsigned gy, unsigned bx, F f) {
    blockDim.x = bx; gridDim.x = gx; gridDim.y = gy;
    for (unsigned y = 0; y < gy; ++y)
        for (unsigned x = 0; x < gx; ++x)
            for (unsigned w = 0; w < bx / 32; ++w) {
                for (float &a : lane_acc) a = 0.0f;
                for (int lane = 31; lane >= 0; --lane) {
                    blockIdx.x = x; blockIdx.y = y; threadIdx.x = w * 32 + lane; lane_call = 0;
                    f();
                }
            }
}
"#;

/// `mmvq ENTRY ROWS NBLOCKS ROW_BYTES COLS WPR W Y`, `glu ENTRY ROWS NBLOCKS ROW_BYTES COLS OP
/// WPR G U Y`, `group ENTRY ROWS NBLOCKS ROW_BYTES WPR W Y`; `mmvq_id ENTRY ROWS NBLOCKS
/// ROW_BYTES EXPERT_BYTES N_EXPERT N_USED NB N_TOKENS IDS_STRIDE W Y IDS`: the outputs as hex
/// bits. WPR: warps per row, in blocks of 8 warps.
const MAIN: &str = r#"
typedef void (*Mmvq)(const u8 *, const u8 *, float *, int, int, i64, int, i64, int);
typedef void (*MmvqId)(const u8 *, const u8 *, float *, const i32 *, int, int, i64, i64, int, int, int, i64);
typedef void (*MmvqGlu)(const u8 *, const u8 *, const u8 *, float *, int, int, i64, i64, int, i64, int, int, u8 *, u32 *);
typedef void (*MmvqGroup)(const u8 *, int, const u8 *, const u8 *, const u8 *, i64, i64, i64, float *, float *, float *, const float *, const float *, const float *, int, int, int, int);
#define ENTRY(T, BYTES, SUB, F) {"mmvq_" #T, mmvq_##T, mmvq_id_##T, mmvq_glu_##T, mmvq_group_##T},
struct Entry { const char *name; Mmvq mmvq; MmvqId id; MmvqGlu glu; MmvqGroup group; };
static const Entry ENTRIES[] = {
    ENTRY(q4_0,,,) ENTRY(q4_1,,,) ENTRY(q5_0,,,) ENTRY(q5_1,,,) ENTRY(q8_0,,,) ENTRY(iq4_nl,,,)
    ENTRY(mxfp4,,,) ENTRY(q2_k,,,) ENTRY(q3_k,,,) ENTRY(q4_k,,,) ENTRY(q5_k,,,) ENTRY(q6_k,,,)
    ENTRY(iq4_xs,,,)
};
int main(int argc, char **argv) {
    const Entry *e = nullptr;
    for (const Entry &x : ENTRIES) if (!strcmp(x.name, argv[2])) e = &x;
    if (!e) { fprintf(stderr, "no kernel %s\n", argv[2]); return 2; }
    const int rows = atoi(argv[3]), nblocks = atoi(argv[4]);
    const long row_bytes = atol(argv[5]);
    if (!strcmp(argv[1], "glu")) {
        const int cols = atoi(argv[6]), op = atoi(argv[7]), wpr = atoi(argv[8]);
        std::vector<u8> wg = slurp(argv[9]), wu = slurp(argv[10]), y = slurp(argv[11]);
        std::vector<float> out((size_t)rows * cols, -1.0f);
        launch((rows * wpr + 7) / 8, 1, 256, [&] {
            e->glu(wg.data(), wu.data(), y.data(), out.data(), rows, nblocks, row_bytes, row_bytes, cols, rows, op, wpr, nullptr, nullptr);
        });
        for (float v : out) printf("%08x\n", __float_as_uint(v));
    } else if (!strcmp(argv[1], "group")) {
        // The rows as groups of (2, 2, 1) and of (3, 2, 0) matrices, one column.
        const int wpr = atoi(argv[6]);
        std::vector<u8> w = slurp(argv[7]), y = slurp(argv[8]);
        // Then (2, 2, 1) again with a bias a row, (r + 1) / 4 for row r.
        std::vector<float> bias(rows);
        for (int r = 0; r < rows; ++r) bias[r] = (r + 1) * 0.25f;
        for (int split = 0; split < 3; ++split) {
            const int n0 = split == 1 ? 3 : 2, n1 = 2, n2 = rows - n0 - n1;
            std::vector<float> out((size_t)rows, -1.0f);
            const u8 *w0 = w.data(), *w1 = w0 + n0 * row_bytes, *w2 = w1 + n1 * row_bytes;
            const float *b = split == 2 ? bias.data() : nullptr;
            launch((rows * wpr + 7) / 8, 1, 256, [&] {
                e->group(y.data(), nblocks, w0, w1, w2, row_bytes, row_bytes, row_bytes, out.data(),
                         out.data() + n0, out.data() + n0 + n1, b, b ? b + n0 : nullptr,
                         b ? b + n0 + n1 : nullptr, n0, n1, n2, wpr);
            });
            for (float v : out) printf("%08x\n", __float_as_uint(v));
        }
    } else if (!strcmp(argv[1], "mmvq")) {
        const int cols = atoi(argv[6]), wpr = atoi(argv[7]);
        std::vector<u8> w = slurp(argv[8]), y = slurp(argv[9]);
        std::vector<float> out((size_t)rows * cols, -1.0f);
        // Blocks of eight warps, wpr a row: warps past the last row are skipped by the kernel.
        launch((rows * wpr + 7) / 8, 1, 256, [&] { e->mmvq(w.data(), y.data(), out.data(), rows, nblocks, row_bytes, cols, rows, wpr); });
        for (float v : out) printf("%08x\n", __float_as_uint(v));
    } else {
        const long expert_bytes = atol(argv[6]);
        const int n_expert = atoi(argv[7]), n_used = atoi(argv[8]), nb = atoi(argv[9]), n_tokens = atoi(argv[10]);
        const long ids_stride = atol(argv[11]);
        std::vector<u8> w = slurp(argv[12]), y = slurp(argv[13]), ib = slurp(argv[14]);
        std::vector<i32> ids(ib.size() / 4);
        memcpy(ids.data(), ib.data(), ib.size());
        std::vector<float> out((size_t)rows * n_used * n_tokens, -1.0f);
        launch((rows + 1) / 2, n_used * n_tokens, 64, [&] {
            e->id(w.data(), y.data(), out.data(), ids.data(), rows, nblocks, row_bytes, expert_bytes,
                  n_expert, n_used, nb, ids_stride);
        });
        for (float v : out) printf("%08x\n", __float_as_uint(v));
    }
    return 0;
}
"#;

#[test]
fn int8_matrix_vector_kernels_match_f64() {
    let dir = std::env::temp_dir().join(format!("tessera-host-mmvq-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kernels = &["types.cuh", "vecdotq.cuh", "quant.cu"];
    let shim = format!("{LANES_SHIM}{}", common::prelude_q8_1());
    let Some(exe) = common::harness(&dir, "mmvq_harness", &shim, kernels, MAIN) else {
        return;
    };
    let (k, rows) = (512usize, 5usize);
    let nblocks = k / 32;
    let mut checked = 0;
    for (ti, row) in TYPES.iter().filter(|r| r.mmvq.is_some()).enumerate() {
        let t = row.dtype;
        let entry = row.mmvq.unwrap();
        let row_bytes = t.row_size(k as u64).unwrap() as usize;
        let w = quantize(t, &values(rows * k, 7 + t.id() as u64)).unwrap();
        let wd = dequantize(t, &w).unwrap();
        let wf = write(&dir, "w.bin", &w);

        // MUL_MAT: 1 to 8 columns by type (each column count is its own code in the kernels).
        let cols = 1 + ti % 8;
        let y = quantize(DType::Q8_1, &values(k * cols, 40)).unwrap();
        let yd = dequantize(DType::Q8_1, &y).unwrap();
        let yf = write(&dir, "y.bin", &y);
        let files = [wf.clone(), yf.clone()];
        // Rows split over 1 to 8 warps (16 blocks a row: 2 per warp at 8).
        let wpr = 1 << (ti % 4);
        let got =
            floats(&call(&exe, &["mmvq", entry], &[rows, nblocks, row_bytes, cols, wpr], &files));
        for c in 0..cols {
            for r in 0..rows {
                let (want, scale) = dot(&wd[r * k..][..k], &yd[c * k..][..k]);
                let g = f64::from(got[c * rows + r]);
                let err = (g - want).abs() / scale.max(1e-9);
                assert!(err < 2e-3, "{entry} wpr {wpr} column {c} row {r}: {g} != {want}");
            }
        }

        // The grouped products (Q, K and V in one launch): MMVQ's one-column sums, bit for
        // bit, however the rows are split among the matrices.
        let nums = [rows, nblocks, row_bytes, 1, wpr];
        let one = floats(&call(&exe, &["mmvq", entry], &nums, &files));
        let nums = [rows, nblocks, row_bytes, wpr];
        let grouped = floats(&call(&exe, &["group", entry], &nums, &files));
        assert_eq!(grouped.len(), 3 * rows);
        for (i, g) in grouped.iter().enumerate() {
            let r = i % rows;
            // The third pass adds each row's bias to the sum, in f32 as the unfused ADD.
            let want = if i < 2 * rows { one[r] } else { one[r] + (r + 1) as f32 * 0.25 };
            assert_eq!(g.to_bits(), want.to_bits(), "{entry} group pass {}: row {r}", i / rows);
        }

        // The fused gate/up products and gated unit (SiLU, then tanh-GELU) against the f64
        // unit of the f64 products, allowing each product its int8 error.
        let up = quantize(t, &values(rows * k, 90 + t.id() as u64)).unwrap();
        let upd = dequantize(t, &up).unwrap();
        let uf = write(&dir, "u.bin", &up);
        for op in [0, 1] {
            let files = [wf.clone(), uf.clone(), yf.clone()];
            let nums = [rows, nblocks, row_bytes, cols, op, 1 << ((ti + 1) % 4)];
            let got = floats(&call(&exe, &["glu", entry], &nums, &files));
            for c in 0..cols {
                for r in 0..rows {
                    let (g, sg) = dot(&wd[r * k..][..k], &yd[c * k..][..k]);
                    let (u, su) = dot(&upd[r * k..][..k], &yd[c * k..][..k]);
                    let act = if op == 0 {
                        g / (1.0 + (-g).exp())
                    } else {
                        0.5 * g * (1.0 + (0.7978845608028654 * (g + 0.044715 * g * g * g)).tanh())
                    };
                    let want = act * u;
                    let allowed = 2e-3 * (u.abs() * 1.2 * sg + act.abs() * su) + 1e-6;
                    let gv = f64::from(got[c * rows + r]);
                    assert!(
                        (gv - want).abs() <= allowed,
                        "{entry} glu op {op} column {c} row {r}: {gv} != {want}"
                    );
                }
            }
        }

        // MUL_MAT_ID: the same matrix as one expert of three (5 rows each: 15 rows), two
        // slots of two tokens, ids with a stride of 3 (a top-k view), nb 2 (a row per slot).
        let ids: Vec<i32> = vec![2, 0, -7, 1, 1, -7];
        let problem = Experts {
            dtype: t,
            rows,
            k,
            n_expert: 3,
            n_used: 2,
            nb: 2,
            n_tokens: 2,
            stride: 3,
            ids: &ids,
        };
        problem.check(&exe, &dir, "mmvq_id", entry);
        checked += 1;
    }
    assert_eq!(checked, TYPES.iter().filter(|r| r.mmvq.is_some()).count());
    assert!(checked >= 13, "{checked} types");
    let _ = std::fs::remove_dir_all(&dir);
}
