//! What the tests against llama.cpp's per-level fixtures share (kv_types, lora,
//! context_shift): the fixture of the SIMD level in use, and llama.cpp's top-5
//! log-probabilities compared with ours.

use serde_json::Value;

/// Largest difference allowed between a log-probability here and llama.cpp's: bit-exact
/// logits, the float64 log-softmax's printout being all it leaves room for.
pub const TOL: f64 = 1e-6;
/// A top token (or greedy step) is compared only where llama.cpp's lead over the second is at
/// least this (below, another build of llama.cpp may pick either).
pub const LEAD: f64 = 0.05;

/// Log-softmax in float64 of float32 logits, as the fixtures' tools compute it.
pub fn log_softmax(l: &[f32]) -> Vec<f64> {
    let m = l.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let s: f64 = l.iter().map(|&x| (x as f64 - m).exp()).sum();
    l.iter().map(|&x| x as f64 - m - s.ln()).collect()
}

/// The most likely token.
pub fn argmax(l: &[f32]) -> u32 {
    (0..l.len()).max_by(|&a, &b| l[a].total_cmp(&l[b])).unwrap() as u32
}

/// `logits` against llama.cpp's top entries `want` (`[[token, log-probability], ...]`): the
/// largest log-probability difference, and (ours, llama.cpp's) top tokens where they differ
/// though llama.cpp's lead is at least [`LEAD`].
pub fn compare_top(logits: &[f32], want: &Value) -> (f64, Option<(u32, u32)>) {
    let lp = log_softmax(logits);
    let want: Vec<(usize, f64)> = want
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p[0].as_u64().unwrap() as usize, p[1].as_f64().unwrap()))
        .collect();
    let worst = want.iter().map(|&(t, l)| (lp[t] - l).abs()).fold(0.0, f64::max);
    let ours = argmax(logits);
    let differs = want[0].1 - want[1].1 >= LEAD && ours as usize != want[0].0;
    (worst, differs.then_some((ours, want[0].0 as u32)))
}

/// The fixture `tests/fixtures/{dir}/{level}.json` of the SIMD level in use (checked to be
/// that level's); `None`, said on stderr, where there is none (the scalar level).
pub fn level_fixture(dir: &str) -> Option<Value> {
    let level = tessera_backend_cpu::SimdLevel::from_env();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(dir)
        .join(format!("{}.json", level.name()));
    if !path.exists() {
        eprintln!(
            "no llama.cpp reference for the {} level ({}): nothing to compare",
            level.name(),
            path.display()
        );
        return None;
    }
    let fx: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(fx["simd_level"], level.name(), "{}", path.display());
    Some(fx)
}

/// A real test model, loaded as llama.cpp loads it by default, and its file name (what the
/// fixtures' cases name).
pub fn load(id: tessera_models::Model) -> (tessera_llama::Model, String) {
    let path = tessera_models::ensure(&id).expect("fetching the model");
    let params = tessera_llama::LoadParams::new(tessera_backend_cpu::CpuDevice::shared());
    let model = tessera_llama::Model::load_with(&path, &params).expect("loading");
    (model, path.file_name().unwrap().to_str().unwrap().to_string())
}

/// A fixture case's KV cache type (`type_k`, `type_v`: f16, q8_0, q4_0).
pub fn cache_type(name: &str) -> tessera_llama::DType {
    match name {
        "f16" => tessera_llama::DType::F16,
        "q8_0" => tessera_llama::DType::Q8_0,
        "q4_0" => tessera_llama::DType::Q4_0,
        other => panic!("cache type {other}"),
    }
}

/// The context a fixture case ran with: `n_ctx` cells, 2 threads, flash attention, its cache
/// types.
pub fn case_params(case: &Value, n_ctx: usize) -> tessera_llama::ContextParams {
    tessera_llama::ContextParams {
        n_ctx,
        n_threads: 2,
        flash_attn: true,
        type_k: cache_type(case["type_k"].as_str().unwrap()),
        type_v: cache_type(case["type_v"].as_str().unwrap()),
        ..Default::default()
    }
}

/// A JSON array of token ids.
pub fn tokens(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect()
}
