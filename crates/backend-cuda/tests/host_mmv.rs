//! The float matrix-vector kernels (`kernels/mmv.cu`) without a GPU: compiled for the CPU
//! behind the host shim (`common`), a warp one thread, every row of the grid run, checked
//! against the f64 products of the same weights: F16, BF16 and F32 weights, 1, 3 and 8
//! columns, the 16-byte-load path (rows a multiple of 8 values) and the element path, padded
//! rows.
//!
//! Skipped, with a note, where no C++ compiler is found; `REQUIRE_CXX=1` makes that a failure.

mod common;

use common::{run, values, write, LAUNCH_SHIM};
use half::{bf16, f16};

/// `mmv TYPE ROWS K ROW_BYTES COLS W X`: the products (hex bits), column after column.
const MAIN: &str = r#"
int main(int argc, char **argv) {
    const char *type = argv[1];
    const int rows = atoi(argv[2]), k = atoi(argv[3]), cols = atoi(argv[5]);
    const long row_bytes = atol(argv[4]);
    std::vector<u8> w = slurp(argv[6]), xb = slurp(argv[7]);
    // 16-byte aligned copies, as device allocations are.
    std::vector<float> x(xb.size() / 4 + 4);
    memcpy(x.data(), xb.data(), xb.size());
    std::vector<Bytes16> wa(w.size() / 16 + 1);
    memcpy(wa.data(), w.data(), w.size());
    std::vector<float> out((size_t)rows * cols);
    blockDim.x = 1; threadIdx.x = 0; gridDim.x = rows;
    for (unsigned g = 0; g < (unsigned)rows; ++g) {
        blockIdx.x = g;
        const u8 *wp = (const u8 *)wa.data();
        if (!strcmp(type, "f16")) mmv_f16(wp, x.data(), out.data(), rows, k, row_bytes, cols, k, rows);
        else if (!strcmp(type, "bf16")) mmv_bf16(wp, x.data(), out.data(), rows, k, row_bytes, cols, k, rows);
        else mmv_f32(wp, x.data(), out.data(), rows, k, row_bytes, cols, k, rows);
    }
    for (float v : out) printf("%08x\n", __float_as_uint(v));
    return 0;
}
"#;

#[test]
fn float_matrix_vector_kernels_match_f64() {
    let dir = std::env::temp_dir().join(format!("tessera-host-mmv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kernels = &["types.cuh", "mmv.cu"];
    let Some(exe) = common::harness(&dir, "mmv_harness", LAUNCH_SHIM, kernels, MAIN) else {
        return;
    };
    let rows = 5;
    let mut checked = 0;
    for ty in ["f16", "bf16", "f32"] {
        let esize = if ty == "f32" { 4 } else { 2 };
        // 64: the 16-byte loads; 37: element by element; 64 with 16 bytes of row padding.
        for (k, pad) in [(64usize, 0usize), (37, 0), (64, 16)] {
            let row_bytes = k * esize + pad;
            let wv = values(rows * k, k as u64 + esize as u64);
            // The weights as stored, and as the kernel reads them (rounded to the type).
            let mut bytes = vec![0u8; rows * row_bytes];
            let mut wr = vec![0f32; rows * k];
            for r in 0..rows {
                for i in 0..k {
                    let v = wv[r * k + i];
                    let at = r * row_bytes + i * esize;
                    wr[r * k + i] = match ty {
                        "f16" => {
                            let h = f16::from_f32(v);
                            bytes[at..at + 2].copy_from_slice(&h.to_le_bytes());
                            h.to_f32()
                        }
                        "bf16" => {
                            let h = bf16::from_f32(v);
                            bytes[at..at + 2].copy_from_slice(&h.to_le_bytes());
                            h.to_f32()
                        }
                        _ => {
                            bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
                            v
                        }
                    };
                }
            }
            for cols in [1usize, 3, 8] {
                let x = values(k * cols, 100 + cols as u64);
                let xb = common::f32_bytes(&x);
                let wf = write(&dir, "w.bin", &bytes);
                let xf = write(&dir, "x.bin", &xb);
                let dims = [rows, k, row_bytes, cols].map(|v| v.to_string());
                let mut argv: Vec<&str> = vec![ty];
                argv.extend(dims.iter().map(String::as_str));
                argv.extend([wf.as_str(), xf.as_str()]);
                let got: Vec<f32> = run(&exe, &argv)
                    .lines()
                    .map(|l| f32::from_bits(u32::from_str_radix(l, 16).unwrap()))
                    .collect();
                assert_eq!(got.len(), rows * cols);
                for c in 0..cols {
                    for r in 0..rows {
                        let want: f64 = (0..k)
                            .map(|i| f64::from(wr[r * k + i]) * f64::from(x[c * k + i]))
                            .sum();
                        let g = f64::from(got[c * rows + r]);
                        assert!(
                            (g - want).abs() < 1e-5 * (1.0 + want.abs()),
                            "{ty} k {k} pad {pad} column {c} row {r}: {g} != {want}"
                        );
                    }
                }
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 27);
    let _ = std::fs::remove_dir_all(&dir);
}
