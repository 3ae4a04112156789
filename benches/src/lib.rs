//! Criterion benchmarks for Tessera's kernels live in `benches/benches/`; this library holds the
//! data they share.

/// Deterministic pseudo-random f32s in [-1, 1) (xorshift), so runs are comparable.
pub fn random_f32(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// Deterministic pseudo-random bytes.
pub fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    random_f32(n, seed).iter().map(|x| (x.to_bits() >> 7) as u8).collect()
}
