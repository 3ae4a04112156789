//! CPU `mul_mat` speed: a 4096×4096 weight of Q4_0, Q8_0, Q4_K, Q6_K and F16 times F32
//! activations, on 1 and 2 threads, at the best SIMD level (`TESSERA_SIMD` lowers it).
//! `cargo bench -p tessera-benches --bench matmul`.
//!
//! - `matvec/*` (batch 1, decoding): throughput in bytes of weights read; `*-repacked` with the
//!   weight interleaved and marked as the loader does by default for the types llama.cpp
//!   repacks. The iterations cycle
//!   through enough copies of the weight (≥ 128 MiB) that every one comes from memory, not
//!   from the last-level cache, as in decoding a real model. `memread/*` reads the same way
//!   with plain loads: the machine's bandwidth, the ceiling for `matvec`.
//! - `batch512/*` (prompt processing): throughput in "elements" = flops (2·M·N·K).
//!
//! `mul_mat` is reached through the backend's doc-hidden bench entry points
//! (`tessera_backend_cpu::bench`). Threads are a small spinning pool with a ggml-style
//! barrier, so thread start-up is not measured.

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use std::hint::{black_box, spin_loop};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tessera_backend_cpu::{has_vnni, ComputeParams, SimdLevel, TensorRef, ThreadSync};
use tessera_benches::random_f32;
use tessera_tensor::{quant, DType};

use tessera_backend_cpu::bench as matmul;

/// Rows and columns of the weight.
const DIM: usize = 4096;
/// Bytes of weight copies the matrix-vector benchmarks cycle through.
const COLD_BYTES: usize = 128 << 20;

/// A ggml-style spinning barrier and the chunk counter.
struct SpinSync {
    n: usize,
    arrived: AtomicUsize,
    generation: AtomicUsize,
    chunk: AtomicUsize,
}

impl SpinSync {
    fn new(n: usize) -> SpinSync {
        SpinSync {
            n,
            arrived: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
            chunk: AtomicUsize::new(0),
        }
    }
}

impl ThreadSync for SpinSync {
    fn barrier(&self) {
        if self.n == 1 {
            return;
        }
        let generation = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) == self.n - 1 {
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::Release);
        } else {
            while self.generation.load(Ordering::Acquire) == generation {
                spin_loop();
            }
        }
    }
    fn chunk_counter(&self) -> &AtomicUsize {
        &self.chunk
    }
}

/// The job a pool runs: called with the thread index on every thread.
type Job<'a> = &'a (dyn Fn(usize) + Sync);

/// What the pool's threads share.
struct Shared {
    epoch: AtomicUsize,
    job: AtomicPtr<Job<'static>>,
    finished: AtomicUsize,
    quit: AtomicBool,
}

/// `n` threads (the caller is thread 0) that spin waiting for jobs.
struct Pool {
    n: usize,
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

impl Pool {
    fn new(n: usize) -> Pool {
        let shared = Arc::new(Shared {
            epoch: AtomicUsize::new(0),
            job: AtomicPtr::new(std::ptr::null_mut()),
            finished: AtomicUsize::new(0),
            quit: AtomicBool::new(false),
        });
        let workers = (1..n)
            .map(|ith| {
                let shared = Arc::clone(&shared);
                std::thread::spawn(move || {
                    let mut seen = 0;
                    loop {
                        let epoch = loop {
                            let e = shared.epoch.load(Ordering::Acquire);
                            if e != seen || shared.quit.load(Ordering::Acquire) {
                                break e;
                            }
                            spin_loop();
                        };
                        if shared.quit.load(Ordering::Acquire) {
                            return;
                        }
                        seen = epoch;
                        // SAFETY: `run` published a job that outlives this call: it waits for
                        // every worker to finish before returning.
                        let job = unsafe { *shared.job.load(Ordering::Acquire) };
                        job(ith);
                        shared.finished.fetch_add(1, Ordering::AcqRel);
                    }
                })
            })
            .collect();
        Pool { n, shared, workers }
    }

    /// Runs `job` on every thread and waits for all of them.
    fn run(&self, job: Job<'_>) {
        // SAFETY: the job is only used until every worker has reported back, below.
        let job: Job<'static> = unsafe { std::mem::transmute(job) };
        self.shared.job.store(&job as *const Job<'static> as *mut _, Ordering::Release);
        self.shared.finished.store(0, Ordering::Release);
        self.shared.epoch.fetch_add(1, Ordering::AcqRel);
        job(0);
        while self.shared.finished.load(Ordering::Acquire) != self.n - 1 {
            spin_loop();
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.quit.store(true, Ordering::Release);
        for w in self.workers.drain(..) {
            w.join().expect("worker");
        }
    }
}

/// 64-byte aligned zeroed storage.
fn aligned(bytes: usize) -> Vec<[u8; 64]> {
    vec![[0u8; 64]; bytes.div_ceil(64)]
}

/// A packed tensor over `buf`.
fn tensor(buf: &mut [[u8; 64]], dtype: DType, ne: [usize; 4]) -> TensorRef {
    let row = dtype.type_size() * ne[0] / dtype.block_size();
    let nb = [dtype.type_size(), row, row * ne[1], row * ne[1] * ne[2]];
    TensorRef::new(buf.as_mut_ptr().cast(), dtype, ne, nb)
}

/// One `mul_mat` on the pool.
fn mul_mat(
    pool: &Pool,
    sync: &SpinSync,
    work: &mut [[u8; 64]],
    d: &TensorRef,
    w: &TensorRef,
    x: &TensorRef,
) {
    let simd = SimdLevel::from_env();
    let wsize = matmul::mul_mat_work_size(w, x);
    let wdata = work.as_mut_ptr() as usize;
    pool.run(&|ith| {
        let p = ComputeParams {
            ith,
            nth: pool.n,
            wdata: wdata as *mut u8,
            wsize,
            sync,
            simd,
            batch_invariant: false,
            prefer_batched: false,
        };
        matmul::mul_mat(&p, d, w, x);
    });
}

fn bench(c: &mut Criterion) {
    eprintln!("SIMD level {} (VNNI: {})", SimdLevel::from_env(), has_vnni());
    let types = [DType::Q4_0, DType::Q5_0, DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::F16];
    let pools: Vec<(usize, Pool, SpinSync)> =
        [1, 2].into_iter().map(|n| (n, Pool::new(n), SpinSync::new(n))).collect();

    let mut g = c.benchmark_group("memread");
    g.warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(1));
    g.sample_size(20);
    let mut big = aligned(COLD_BYTES);
    for (i, b) in big.iter_mut().enumerate() {
        b[0] = i as u8;
    }
    let chunk = 16 << 20;
    for (n, pool, _) in &pools {
        let mut at = 0;
        g.throughput(Throughput::Bytes(chunk as u64));
        g.bench_function(format!("{n}t"), |b| {
            b.iter(|| {
                let base = big.as_ptr() as usize + at;
                at = (at + chunk) % (COLD_BYTES - chunk + 1);
                let sums: Vec<AtomicUsize> = (0..*n).map(|_| AtomicUsize::new(0)).collect();
                pool.run(&|ith| {
                    let per = chunk / *n / 8;
                    // SAFETY: `per` u64 of thread ith's share, inside `big`.
                    let s = unsafe {
                        std::slice::from_raw_parts((base + ith * per * 8) as *const u64, per)
                    };
                    let v = s.iter().fold(0u64, |a, &x| a.wrapping_add(x));
                    sums[ith].store(v as usize, Ordering::Relaxed);
                });
                black_box(sums)
            })
        });
    }
    drop(big);
    g.finish();

    let mut g = c.benchmark_group("matvec");
    g.warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    g.sample_size(20);
    for dtype in types {
        matvec_cold(&mut g, &pools, dtype.name(), dtype, DIM, DIM, 1, false);
    }
    // The weights llama.cpp repacks, as the loader hands them over (interleaved, marked
    // repacked: llama.cpp's default path), where the level repacks them.
    for dtype in [DType::Q4_0, DType::IQ4_NL, DType::MXFP4, DType::Q4_K, DType::Q2_K] {
        if tessera_backend_cpu::repack_applies(dtype, DIM, SimdLevel::from_env()) {
            let name = format!("{}-repacked", dtype.name());
            matvec_cold(&mut g, &pools, &name, dtype, DIM, DIM, 1, true);
        }
    }
    g.finish();

    // Decoding's shapes: Gemma-3-270M's output head (Q8_0, 640 x 262144, larger than the
    // last-level cache) and Qwen2.5-0.5B's FFN gate (Q5_0, 896 x 4864, cycled as above).
    let mut g = c.benchmark_group("matvec_model");
    g.warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    g.sample_size(10);
    for (name, dtype, k, m) in
        [("lmhead", DType::Q8_0, 640, 262_144), ("ffn", DType::Q5_0, 896, 4864)]
    {
        matvec_cold(&mut g, &pools, name, dtype, k, m, 1, false);
    }
    g.finish();

    // Several sequences decoding together (`tessera serve`'s slots): the same shapes with
    // 2 and 4 activation rows; throughput is still weight bytes per second, so the ratio to
    // `matvec_model` shows what each extra row costs.
    let mut g = c.benchmark_group("few_rows");
    g.warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    g.sample_size(10);
    for (name, dtype, k, m) in
        [("lmhead", DType::Q8_0, 640, 262_144), ("ffn", DType::Q5_0, 896, 4864)]
    {
        for rows in [2, 4] {
            matvec_cold(&mut g, &pools, &format!("{name}x{rows}"), dtype, k, m, rows, false);
        }
    }
    g.finish();

    let mut g = c.benchmark_group("batch512");
    g.sampling_mode(SamplingMode::Flat);
    g.warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    g.sample_size(10);
    let batch = 512;
    for dtype in types {
        let one = quant::quantize(dtype, &random_f32(DIM * DIM, 1)).expect("quantize");
        let mut wbuf = aligned(one.len());
        wbuf.as_flattened_mut()[..one.len()].copy_from_slice(&one);
        let w = tensor(&mut wbuf, dtype, [DIM, DIM, 1, 1]);
        let mut xbuf = aligned(4 * DIM * batch);
        xbuf.as_flattened_mut().copy_from_slice(bytemuck_f32(&random_f32(DIM * batch, 2)));
        let x = tensor(&mut xbuf, DType::F32, [DIM, batch, 1, 1]);
        let mut dbuf = aligned(4 * DIM * batch);
        let d = tensor(&mut dbuf, DType::F32, [DIM, batch, 1, 1]);
        let mut work = aligned(matmul::mul_mat_work_size(&w, &x) + 64);
        g.throughput(Throughput::Elements((2 * DIM * DIM * batch) as u64));
        for (n, pool, sync) in &pools {
            g.bench_function(format!("{}/{n}t", dtype.name()), |b| {
                b.iter(|| mul_mat(pool, sync, &mut work, &d, &w, &x))
            });
        }
    }
    g.finish();
}

/// Benchmarks `{name}/{n}t` in `g` for each pool: a `k` x `m` weight of `dtype` times `rows`
/// F32 activation rows, the iterations cycling through copies of the weight (at least
/// [`COLD_BYTES`]) so that every one is read from memory. `repacked`: the weight interleaved
/// and marked as the model loader does for the types llama.cpp repacks.
#[allow(clippy::too_many_arguments)]
fn matvec_cold(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    pools: &[(usize, Pool, SpinSync)],
    name: &str,
    dtype: DType,
    k: usize,
    m: usize,
    rows: usize,
    repacked: bool,
) {
    let bytes = dtype.type_size() * k * m / dtype.block_size();
    let mut one = quant::quantize(dtype, &random_f32(k * m, 1)).expect("quantize");
    if repacked {
        one = tessera_backend_cpu::repack_layout(dtype, &one, m, k).expect("whole groups of eight");
    }
    let copies = COLD_BYTES.div_ceil(bytes).max(1);
    let mut weights: Vec<Vec<[u8; 64]>> = (0..copies)
        .map(|_| {
            let mut buf = aligned(bytes);
            buf.as_flattened_mut()[..bytes].copy_from_slice(&one);
            buf
        })
        .collect();
    let ws: Vec<TensorRef> = weights
        .iter_mut()
        .map(|b| TensorRef { repacked, ..tensor(b, dtype, [k, m, 1, 1]) })
        .collect();
    let mut xbuf = aligned(4 * k * rows);
    xbuf.as_flattened_mut()[..4 * k * rows].copy_from_slice(bytemuck_f32(&random_f32(k * rows, 2)));
    let x = tensor(&mut xbuf, DType::F32, [k, rows, 1, 1]);
    let mut dbuf = aligned(4 * m * rows);
    let d = tensor(&mut dbuf, DType::F32, [m, rows, 1, 1]);
    let mut work = aligned(matmul::mul_mat_work_size(&ws[0], &x) + 64);
    g.throughput(Throughput::Bytes(bytes as u64));
    for (n, pool, sync) in pools {
        let mut i = 0;
        g.bench_function(format!("{name}/{n}t"), |b| {
            b.iter(|| {
                mul_mat(pool, sync, &mut work, &d, &ws[i % copies], &x);
                i += 1;
            })
        });
    }
}

/// The bytes of an f32 slice.
fn bytemuck_f32(x: &[f32]) -> &[u8] {
    // SAFETY: f32 has no padding and every byte pattern is a valid u8.
    unsafe { std::slice::from_raw_parts(x.as_ptr().cast(), 4 * x.len()) }
}

criterion_group!(benches, bench);
criterion_main!(benches);
