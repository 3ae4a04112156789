//! Reference dequantization speed per type, in bytes of f32 output per second: the baseline that
//! later SIMD work is measured against. `cargo bench -p tessera-benches --bench dequantize`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use std::time::Duration;
use tessera_benches::{random_bytes, random_f32};
use tessera_tensor::{quant, DType};

/// Elements per iteration: 1 Mi values (4 MiB of output), larger than L2.
const N: usize = 1 << 20;

fn input(dtype: DType) -> Vec<u8> {
    if quant::can_quantize(dtype) {
        quant::quantize(dtype, &random_f32(N, 7)).expect("quantize")
    } else {
        // No quantizer (i-quants, integers): random blocks; speed does not depend on values.
        random_bytes(N / dtype.block_size() * dtype.type_size(), 7)
    }
}

fn dequantize(c: &mut Criterion) {
    let mut g = c.benchmark_group("dequantize");
    g.throughput(Throughput::Bytes((N * 4) as u64));
    g.warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20);
    let mut out = vec![0f32; N];
    for dtype in DType::ALL.into_iter().filter(|d| quant::can_dequantize(*d)) {
        let src = input(dtype);
        g.bench_function(dtype.name(), |b| {
            b.iter(|| quant::dequantize_row(dtype, black_box(&src), black_box(&mut out)).unwrap())
        });
    }
    g.finish();
}

criterion_group!(benches, dequantize);
criterion_main!(benches);
