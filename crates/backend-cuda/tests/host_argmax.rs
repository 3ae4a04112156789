//! ARGMAX (`argmax_op` in `kernels/ops.cu`: a block of threads per row, reduced within each
//! warp, then across the warps) run whole on the CPU, each thread of a block an OS thread
//! (`common::THREADS_SHIM`): the first index of the largest value of each row, ties across
//! threads and warps included, as the CPU backend's and the greedy sampler's rule.
//!
//! Skipped, with a note, where no C++ compiler is found; `REQUIRE_CXX=1` makes that a failure.

mod common;

use common::{f32_bytes, run, write, THREADS_SHIM};

/// `argmax N ROWS THREADS X`: each row's index, one a line.
const MAIN: &str = r#"
int main(int argc, char **argv) {
    const long n = atol(argv[2]), rows = atol(argv[3]);
    const unsigned threads = (unsigned)atoi(argv[4]);
    std::vector<u8> x = slurp(argv[5]);
    std::vector<i32> out(rows, -1);
    TT a, d;
    a.p = x.data(); a.ne[0] = n; a.ne[1] = rows; a.ne[2] = 1; a.ne[3] = 1;
    a.nb[0] = 4; a.nb[1] = 4 * n; a.nb[2] = a.nb[3] = 4 * n * rows; a.type = T_F32; a.pad = 0;
    d.p = (u8 *)out.data(); d.ne[0] = rows; d.ne[1] = d.ne[2] = d.ne[3] = 1;
    d.nb[0] = 4; d.nb[1] = d.nb[2] = d.nb[3] = 4 * rows; d.type = T_I32; d.pad = 0;
    launch((unsigned)rows, 1, threads, [&] { argmax_op(d, a); });
    for (i32 v : out) printf("%d\n", v);
    return 0;
}
"#;

#[test]
fn argmax_takes_the_first_largest_across_warps() {
    let dir = std::env::temp_dir().join(format!("tessera-host-argmax-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kernels = &["types.cuh", "attn.cuh", "ops.cu"];
    let Some(exe) = common::harness(&dir, "argmax_harness", THREADS_SHIM, kernels, MAIN) else {
        return;
    };
    let n = 1000usize;
    // Row 0: equal maxima at 900 and 700 (other threads, other warps): 700. Row 1: at 300 and
    // 5: 5. Row 2: one maximum at 999 (the last thread's last element). Row 3: all -inf: 0, as
    // the CPU's kernel gives.
    let mut x: Vec<f32> = (0..4 * n).map(|i| ((i * 37) % 101) as f32 * 0.01).collect();
    for (row, at, v) in [(0, 900, 5.0), (0, 700, 5.0), (1, 300, 7.5), (1, 5, 7.5), (2, 999, 3.0)] {
        x[row * n + at] = v;
    }
    x[3 * n..].fill(f32::NEG_INFINITY);
    let xf = write(&dir, "x.bin", &f32_bytes(&x));
    for threads in [32usize, 256] {
        let got: Vec<i32> = run(&exe, &["argmax", &n.to_string(), "4", &threads.to_string(), &xf])
            .lines()
            .map(|l| l.parse().unwrap())
            .collect();
        assert_eq!(got, [700, 5, 999, 0], "{threads} threads a row");
    }
}
