//! The mixture-of-experts kernels (`kernels/moe.cu`) without a GPU: compiled for the CPU with
//! the machine's C++ compiler behind the host shim (`common`), a warp being one thread
//! (`WARP` 1, so a warp's loop over K is one thread's and its sum the identity), each kernel
//! run over its whole grid, and the results checked against the ops' definitions: ARGSORT a
//! stable sort, ADD_ID the picked bias row, SWIGLU_OAI the clamped gate and up, MUL_MAT_ID
//! the picked expert's product (F32 and Q4_0 experts, ids repeating and in any order).
//!
//! Skipped, with a note, where no C++ compiler is found; `REQUIRE_CXX=1` makes that a failure.

mod common;

use common::{call, f32_bytes, floats, i32_bytes, run, values, write, LAUNCH_SHIM};
use std::path::{Path, PathBuf};
use tessera_tensor::quant::{dequantize, quantize};
use tessera_tensor::DType;

/// `argsort N ROWS DESC X`, `addid N E T NEXP A B IDS`, `swiglu N ALPHA LIMIT G U`,
/// `mmid TYPE ROW_BYTES K M NEXP NB T NUSED AS B IDS`: the kernel's output, one value a line
/// (floats as hex bits).
const MAIN: &str = r#"
// A tensor of ne0 x ne1 x ne2 with rows of row_bytes, elements of esize bytes.
static TT tt(void *p, i64 ne0, i64 ne1, i64 ne2, int type, i64 esize, i64 row_bytes) {
    TT t;
    t.p = (u8 *)p;
    t.ne[0] = ne0; t.ne[1] = ne1; t.ne[2] = ne2; t.ne[3] = 1;
    t.nb[0] = esize; t.nb[1] = row_bytes; t.nb[2] = row_bytes * ne1; t.nb[3] = t.nb[2] * ne2;
    t.type = type;
    t.pad = 0;
    return t;
}
// One thread runs a grid-stride kernel over everything.
#define ONE_THREAD blockIdx.x = 0; threadIdx.x = 0; blockDim.x = 1; gridDim.x = 1;
static void print_f32(const std::vector<float> &v) {
    for (float x : v) printf("%08x\n", __float_as_uint(x));
}
int main(int argc, char **argv) {
    const char *op = argv[1];
    if (!strcmp(op, "argsort")) {
        const long n = atol(argv[2]), rows = atol(argv[3]);
        const int desc = atoi(argv[4]);
        std::vector<u8> x = slurp(argv[5]);
        std::vector<i32> out(n * rows, -1);
        TT d = tt(out.data(), n, rows, 1, T_I32, 4, 4 * n), a = tt(x.data(), n, rows, 1, T_F32, 4, 4 * n);
        ONE_THREAD argsort_op(d, a, desc);
        for (i32 v : out) printf("%d\n", v);
    } else if (!strcmp(op, "addid")) {
        const long n = atol(argv[2]), e = atol(argv[3]), t = atol(argv[4]), nexp = atol(argv[5]);
        std::vector<u8> a = slurp(argv[6]), b = slurp(argv[7]), ids = slurp(argv[8]);
        std::vector<float> out(n * e * t);
        TT td = tt(out.data(), n, e, t, T_F32, 4, 4 * n), ta = tt(a.data(), n, e, t, T_F32, 4, 4 * n);
        TT tb = tt(b.data(), n, nexp, 1, T_F32, 4, 4 * n), ti = tt(ids.data(), e, t, 1, T_I32, 4, 4 * e);
        ONE_THREAD add_id_op(td, ta, tb, ti);
        print_f32(out);
    } else if (!strcmp(op, "swiglu")) {
        const long n = atol(argv[2]);
        const float alpha = atof(argv[3]), limit = atof(argv[4]);
        std::vector<u8> g = slurp(argv[5]), u = slurp(argv[6]);
        std::vector<float> out(n);
        TT td = tt(out.data(), n, 1, 1, T_F32, 4, 4 * n), tg = tt(g.data(), n, 1, 1, T_F32, 4, 4 * n);
        TT tu = tt(u.data(), n, 1, 1, T_F32, 4, 4 * n);
        ONE_THREAD swiglu_oai_op(td, tg, tu, alpha, limit);
        print_f32(out);
    } else if (!strcmp(op, "mmid")) {
        const int type = atoi(argv[2]);
        const long row_bytes = atol(argv[3]), k = atol(argv[4]), m = atol(argv[5]), nexp = atol(argv[6]);
        const long nb = atol(argv[7]), t = atol(argv[8]), nused = atol(argv[9]);
        std::vector<u8> as = slurp(argv[10]), b = slurp(argv[11]), ids = slurp(argv[12]);
        std::vector<float> out(m * nused * t);
        TT td = tt(out.data(), m, nused, t, T_F32, 4, 4 * m);
        TT ta = tt(as.data(), k, m, nexp, type, type == T_F32 ? 4 : 0, row_bytes);
        TT tb = tt(b.data(), k, nb, t, T_F32, 4, 4 * k), ti = tt(ids.data(), nused, t, 1, T_I32, 4, 4 * nused);
        // One warp (a thread here) per output element.
        blockDim.x = 1; threadIdx.x = 0; gridDim.x = (unsigned)(m * nused * t);
        for (unsigned g = 0; g < gridDim.x; ++g) { blockIdx.x = g; mul_mat_id_op(td, ta, tb, ti); }
        print_f32(out);
    } else {
        fprintf(stderr, "unknown op %s\n", op);
        return 2;
    }
    return 0;
}
"#;

fn harness(dir: &Path) -> Option<PathBuf> {
    common::harness(dir, "moe_harness", LAUNCH_SHIM, &["types.cuh", "moe.cu"], MAIN)
}

#[test]
fn moe_kernels_compute_their_ops() {
    let dir = std::env::temp_dir().join(format!("tessera-host-moe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let Some(exe) = harness(&dir) else { return };

    // ARGSORT: rows with ties (values rounded to tenths), both orders; a stable sort.
    let (n, rows) = (37usize, 5usize);
    let x: Vec<f32> = values(n * rows, 3).iter().map(|v| (v * 10.0).round() / 10.0).collect();
    let xf = write(&dir, "x.bin", &f32_bytes(&x));
    for desc in [true, false] {
        let got: Vec<i32> = run(&exe, &["argsort", "37", "5", &i32::from(desc).to_string(), &xf])
            .lines()
            .map(|l| l.parse().unwrap())
            .collect();
        for r in 0..rows {
            let row = &x[r * n..(r + 1) * n];
            let mut want: Vec<i32> = (0..n as i32).collect();
            want.sort_by(|&i, &j| {
                // As the CPU compares (-0 equals 0).
                let (a, b) = (row[i as usize], row[j as usize]);
                let o = if desc { b.partial_cmp(&a) } else { a.partial_cmp(&b) };
                o.unwrap()
            });
            assert_eq!(&got[r * n..(r + 1) * n], &want[..], "argsort row {r}, descending {desc}");
        }
    }

    // ADD_ID: 3 used experts of 6 over 4 tokens.
    let (n, e, t, nexp) = (16usize, 3usize, 4usize, 6usize);
    let a = values(n * e * t, 5);
    let b = values(n * nexp, 6);
    let ids: Vec<i32> = (0..e * t).map(|i| ((i * 7 + 2) % nexp) as i32).collect();
    let args = [
        write(&dir, "a.bin", &f32_bytes(&a)),
        write(&dir, "b.bin", &f32_bytes(&b)),
        write(&dir, "ids.bin", &i32_bytes(&ids)),
    ];
    let got = floats(&call(&exe, &["addid"], &[n, e, t, nexp], &args));
    for (i, g) in got.iter().enumerate() {
        let (c, row) = (i % n, i / n);
        let want = a[i] + b[ids[row] as usize * n + c];
        assert_eq!(g.to_bits(), want.to_bits(), "add_id element {i}");
    }

    // SWIGLU_OAI: values past the limit on both sides.
    let g: Vec<f32> = values(64, 7).iter().map(|v| v * 12.0).collect();
    let u: Vec<f32> = values(64, 8).iter().map(|v| v * 12.0).collect();
    let (alpha, limit) = (1.702f32, 7.0f32);
    let gf = write(&dir, "g.bin", &f32_bytes(&g));
    let uf = write(&dir, "u.bin", &f32_bytes(&u));
    let got = floats(&run(&exe, &["swiglu", "64", "1.702", "7", &gf, &uf]));
    for (i, (gv, uv)) in g.iter().zip(&u).enumerate() {
        let x = gv.min(limit);
        let y = uv.clamp(-limit, limit);
        let want = x / (1.0 + (alpha * -x).exp()) * (y + 1.0);
        let err = (got[i] - want).abs() / want.abs().max(1e-6);
        assert!(err < 1e-6, "swiglu_oai {i}: {} != {want}", got[i]);
    }

    // MUL_MAT_ID: 8 experts of 64 x 12, 2 rows of b broadcast over 4 used experts, 3 tokens.
    let (k, m, nexp, nb, t, nused) = (64usize, 12usize, 8usize, 2usize, 3usize, 4usize);
    let bv = values(k * nb * t, 9);
    let ids: Vec<i32> = vec![7, 0, 3, 3, 1, 6, 2, 5, 4, 4, 0, 7];
    for dtype in [DType::F32, DType::Q4_0] {
        let w = values(k * m * nexp, 10);
        let (bytes, row_bytes, wd) = if dtype == DType::F32 {
            (f32_bytes(&w), 4 * k, w.clone())
        } else {
            let q = quantize(dtype, &w).unwrap();
            let d = dequantize(dtype, &q).unwrap();
            (q, k / 32 * 18, d)
        };
        let files = [
            write(&dir, "as.bin", &bytes),
            write(&dir, "bm.bin", &f32_bytes(&bv)),
            write(&dir, "idm.bin", &i32_bytes(&ids)),
        ];
        let nums = [dtype.id() as usize, row_bytes, k, m, nexp, nb, t, nused];
        let got = floats(&call(&exe, &["mmid"], &nums, &files));
        assert_eq!(got.len(), m * nused * t);
        for tok in 0..t {
            for ue in 0..nused {
                let ex = ids[tok * nused + ue] as usize;
                let brow = &bv[(tok * nb + ue % nb) * k..][..k];
                for row in 0..m {
                    let wrow = &wd[(ex * m + row) * k..][..k];
                    let want: f64 =
                        wrow.iter().zip(brow).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
                    let g = got[(tok * nused + ue) * m + row];
                    assert!(
                        (f64::from(g) - want).abs() < 1e-4,
                        "{dtype} mul_mat_id token {tok} expert slot {ue} row {row}: {g} != {want}"
                    );
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
