//! The gate/up kernel writing its output's Q8_1 blocks (`mmvq_glu_*` with `q8`, through
//! `q8_1_of_rows` in `kernels/quant.cu`), run whole on the CPU with each thread of a block an
//! OS thread (`common::THREADS_SHIM`; blocks one after another, so the last block of each group
//! of 32 rows is the last one run): its f32 output is the bits of the kernel without `q8`, its
//! blocks are `quantize_q8_1`'s of that output byte for byte, and every group's counter is back
//! at zero after the launch (so a replayed graph finds them as the first launch did).
//!
//! Skipped, with a note, where no C++ compiler is found; `REQUIRE_CXX=1` makes that a failure.

mod common;

use common::{f32_bytes, floats, run, values, write, THREADS_SHIM};
use tessera_tensor::quant::quantize;
use tessera_tensor::DType;

/// `q8 N X`: quantize_q8_1 of N floats (bytes as `qXX` lines); `glu ROWS NBLOCKS COLS WPR Q8 WG
/// WU Y`: mmvq_glu_q4_0's output (hex bits), then with Q8 = 1 its Q8_1 bytes and the counters.
const MAIN: &str = r#"
static void print_q8(const std::vector<u8> &v) { for (u8 b : v) printf("q%02x\n", b); }
int main(int argc, char **argv) {
    if (!strcmp(argv[1], "q8")) {
        const long n = atol(argv[2]);
        std::vector<u8> xb = slurp(argv[3]);
        std::vector<u8> q8((size_t)(n / 32) * Q8_1_BYTES);
        launch((unsigned)((n / 32 + 7) / 8), 1, 256, [&] { quantize_q8_1((const float *)xb.data(), q8.data(), n / 32); });
        print_q8(q8);
        return 0;
    }
    const int rows = atoi(argv[2]), nblocks = atoi(argv[3]), cols = atoi(argv[4]), wpr = atoi(argv[5]);
    const bool with_q8 = atoi(argv[6]) != 0;
    std::vector<u8> wg = slurp(argv[7]), wu = slurp(argv[8]), y = slurp(argv[9]);
    const long row_bytes = (long)nblocks * Q4_0_BYTES;
    std::vector<float> out((size_t)rows * cols, -1.0f);
    std::vector<u8> q8((size_t)cols * (rows / 32) * Q8_1_BYTES, 0);
    std::vector<u32> counters(rows / 32, 0);
    launch((unsigned)(rows * wpr / 8), 1, 256, [&] {
        mmvq_glu_q4_0(wg.data(), wu.data(), y.data(), out.data(), rows, nblocks, row_bytes, row_bytes,
                      cols, rows, 0, wpr, with_q8 ? q8.data() : nullptr, counters.data());
    });
    for (float v : out) printf("%08x\n", __float_as_uint(v));
    if (with_q8) {
        print_q8(q8);
        for (u32 c : counters) printf("n%u\n", c);
    }
    return 0;
}
"#;

fn q8_lines(out: &str) -> Vec<u8> {
    let q = out.lines().filter_map(|l| l.strip_prefix('q'));
    q.map(|l| u8::from_str_radix(l, 16).unwrap()).collect()
}

#[test]
fn gate_up_writes_quantize_q8_1s_blocks() {
    let dir = std::env::temp_dir().join(format!("tessera-host-glu-q8-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kernels = &["types.cuh", "vecdotq.cuh", "quant.cu"];
    let Some(exe) = common::harness(&dir, "glu_q8_harness", THREADS_SHIM, kernels, MAIN) else {
        return;
    };
    let (k, rows) = (512usize, 64usize);
    let nblocks = k / 32;
    let wg = write(&dir, "wg.bin", &quantize(DType::Q4_0, &values(k * rows, 1)).unwrap());
    let wu = write(&dir, "wu.bin", &quantize(DType::Q4_0, &values(k * rows, 2)).unwrap());
    let q8_of = |x: &[f32], name: &str| {
        let f = write(&dir, name, &f32_bytes(x));
        q8_lines(&run(&exe, &["q8", &x.len().to_string(), &f]))
    };
    let mut checked = 0;
    for cols in [1usize, 3] {
        let y = write(&dir, "y.bin", &q8_of(&values(k * cols, 3 + cols as u64), "x.bin"));
        // One row a warp (8 rows a block, 4 blocks a group of 32), 2, and 8 warps a row (one
        // row a block, 32 blocks a group).
        for wpr in [1usize, 2, 8] {
            let args = |q8: &str| {
                let nums = [rows, nblocks, cols, wpr].map(|n| n.to_string());
                let mut a: Vec<String> = vec!["glu".into()];
                a.extend(nums);
                a.extend([q8.to_string(), wg.clone(), wu.clone(), y.clone()]);
                a
            };
            let plain = args("0");
            let plain = floats(&run(&exe, &plain.iter().map(String::as_str).collect::<Vec<_>>()));
            let fused = args("1");
            let out = run(&exe, &fused.iter().map(String::as_str).collect::<Vec<_>>());
            let hex: Vec<&str> =
                out.lines().filter(|l| !l.starts_with('q') && !l.starts_with('n')).collect();
            let got = floats(&hex.join("\n"));
            let what = format!("{cols} columns, {wpr} warps a row");
            assert_eq!(got.len(), rows * cols, "{what}");
            let same = got.iter().zip(&plain).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{what}: the output changed with its Q8_1 blocks written");
            assert!(got.iter().all(|v| v.is_finite() && *v != -1.0), "{what}: rows unwritten");
            assert_eq!(
                q8_lines(&out),
                q8_of(&got, "out.bin"),
                "{what}: not quantize_q8_1's blocks"
            );
            let counters: Vec<u32> = out
                .lines()
                .filter_map(|l| l.strip_prefix('n'))
                .map(|c| c.parse().unwrap())
                .collect();
            assert_eq!(counters, vec![0; rows / 32], "{what}: counters left behind");
            checked += 1;
        }
    }
    assert_eq!(checked, 6);
}
