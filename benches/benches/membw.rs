//! Memory read bandwidth of this machine, the roofline of decoding: two threads (the thread
//! count of the model benchmarks) each summing their half of a 1 GiB buffer, far larger than
//! any cache, with 32-byte loads. Reported as GiB/s of bytes read (criterion's throughput);
//! decode's weight bandwidth (`tessera bench`: model bytes × tokens/s) is compared with it
//! in docs/BENCHMARKS.md.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;

const BYTES: usize = 1 << 30;
const THREADS: usize = 2;

/// Sum of a slice as four independent u64 lanes (the compiler keeps it vectorized).
fn sum(x: &[u64]) -> u64 {
    let mut acc = [0u64; 4];
    for c in x.chunks_exact(4) {
        for (a, v) in acc.iter_mut().zip(c) {
            *a = a.wrapping_add(*v);
        }
    }
    acc.iter().fold(0, |s, a| s.wrapping_add(*a))
}

fn read_bandwidth(c: &mut Criterion) {
    let buf: Vec<u64> = (0..BYTES / 8).map(|i| i as u64).collect();
    let mut g = c.benchmark_group("membw");
    g.throughput(Throughput::Bytes(BYTES as u64));
    g.sample_size(10);
    g.bench_function("read_1GiB_2_threads", |b| {
        b.iter(|| {
            std::thread::scope(|s| {
                let handles: Vec<_> = buf
                    .chunks(buf.len() / THREADS)
                    .map(|part| s.spawn(move || sum(black_box(part))))
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).fold(0u64, u64::wrapping_add)
            })
        })
    });
    g.finish();
}

criterion_group!(benches, read_bandwidth);
criterion_main!(benches);
