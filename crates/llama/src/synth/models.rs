//! The synthetic models of the tests and benchmarks: the llama.cpp comparisons' files, one a
//! family, the mixtures of experts, and the benchmark shapes of real models.

use super::SynthSpec;
use tessera_tensor::DType;

/// The synthetic models the tests compare with llama.cpp: (file stem, spec, the vocabulary
/// fixture whose tokenizer they carry: `testdata/vocab/NAME.gz`, unpacked by
/// `tessera_models::fixtures::vocab(NAME)`).
pub fn test_models() -> Vec<(&'static str, SynthSpec, &'static str)> {
    vec![
        (
            "synth-qwen3-q8_0",
            SynthSpec {
                arch: "qwen3".into(),
                n_layer: 4,
                n_embd: 256,
                n_head: 4,
                n_head_kv: 2,
                head_dim: 0,
                long_rope: false,
                n_ff: 512,
                n_ctx: 2048,
                n_expert: 0,
                n_expert_used: 0,
                dtype: DType::Q8_0,
                seed: 3,
            },
            "ggml-vocab-qwen2.gguf",
        ),
        (
            "synth-gpt2-f16",
            SynthSpec {
                arch: "gpt2".into(),
                n_layer: 4,
                n_embd: 256,
                n_head: 4,
                n_head_kv: 4,
                head_dim: 0,
                long_rope: false,
                n_ff: 1024,
                n_ctx: 1024,
                n_expert: 0,
                n_expert_used: 0,
                dtype: DType::F16,
                seed: 2,
            },
            "ggml-vocab-gpt-2.gguf",
        ),
    ]
}

/// Synthetic models of the architectures checked against one llama.cpp fixture each
/// (`crates/llama/tests/families.rs`: the last prompt position's logits and the greedy
/// continuation), as (file stem, spec, vocabulary fixture): `gemma2`, `phi3`.
pub fn family_models() -> Vec<(&'static str, SynthSpec, &'static str)> {
    vec![
        (
            "synth-phi3-q8_0",
            SynthSpec {
                arch: "phi3".into(),
                n_layer: 4,
                n_embd: 256,
                n_head: 4,
                n_head_kv: 4,
                head_dim: 0,
                long_rope: false,
                n_ff: 512,
                n_ctx: 4096,
                n_expert: 0,
                n_expert_used: 0,
                dtype: DType::Q8_0,
                seed: 9,
            },
            "ggml-vocab-phi-3.gguf",
        ),
        (
            "synth-phi3-longrope-q8_0",
            SynthSpec {
                arch: "phi3".into(),
                n_layer: 4,
                n_embd: 256,
                n_head: 4,
                n_head_kv: 4,
                head_dim: 0,
                long_rope: true,
                n_ff: 512,
                n_ctx: 131072,
                n_expert: 0,
                n_expert_used: 0,
                dtype: DType::Q8_0,
                seed: 11,
            },
            "ggml-vocab-phi-3.gguf",
        ),
        (
            "synth-gemma2-q8_0",
            SynthSpec {
                arch: "gemma2".into(),
                n_layer: 4,
                n_embd: 256,
                n_head: 4,
                n_head_kv: 2,
                head_dim: 0,
                long_rope: false,
                n_ff: 512,
                n_ctx: 2048,
                n_expert: 0,
                n_expert_used: 0,
                dtype: DType::Q8_0,
                seed: 5,
            },
            "ggml-vocab-llama-spm.gguf",
        ),
        (
            // Qwen2-VL's language model: M-RoPE (tests/mrope.rs).
            "synth-qwen2vl-q8_0",
            SynthSpec {
                arch: "qwen2vl".into(),
                n_layer: 2,
                n_embd: 256,
                n_head: 4,
                n_head_kv: 2,
                head_dim: 0,
                long_rope: false,
                n_ff: 512,
                n_ctx: 4096,
                n_expert: 0,
                n_expert_used: 0,
                dtype: DType::Q8_0,
                seed: 13,
            },
            "ggml-vocab-qwen2.gguf",
        ),
    ]
}

/// Every model above: [`test_models`], [`family_models`] and [`moe_models`], in that order.
pub fn all_models() -> Vec<(&'static str, SynthSpec, &'static str)> {
    let mut v = test_models();
    v.extend(family_models());
    v.extend(moe_models());
    v
}

/// The mixture-of-experts models `crates/llama/tests/moe.rs` compares with llama.cpp, as (file
/// stem, spec, vocabulary fixture), in F16:
/// - `qwen3moe` with 16 experts of width 256, 4 per token, which the test (and llama.cpp, for
///   the fixture) quantize to Q4_K_M: Q4_K experts (repacked at AVX2), Q6_K down projections in
///   half the blocks, the router in F32;
/// - `gpt-oss` with 16 experts of width 256, 4 per token, 8 heads of 64 (wider than the model,
///   as gpt-oss's), every bias and sink, YaRN and a window of 8 on even blocks, which they
///   quantize to MXFP4_MOE: MXFP4 experts, Q8_0 elsewhere, the router in F32.
pub fn moe_models() -> Vec<(&'static str, SynthSpec, &'static str)> {
    vec![
        (
            "synth-gpt-oss-f16",
            SynthSpec {
                arch: "gpt-oss".into(),
                n_layer: 4,
                n_embd: 256,
                n_head: 8,
                n_head_kv: 2,
                head_dim: 64,
                long_rope: false,
                n_ff: 256,
                n_ctx: 131072,
                n_expert: 16,
                n_expert_used: 4,
                dtype: DType::F16,
                seed: 19,
            },
            "ggml-vocab-qwen2.gguf",
        ),
        (
            "synth-qwen3moe-f16",
            SynthSpec {
                arch: "qwen3moe".into(),
                n_layer: 4,
                n_embd: 256,
                n_head: 4,
                n_head_kv: 2,
                head_dim: 0,
                long_rope: false,
                n_ff: 256,
                n_ctx: 2048,
                n_expert: 16,
                n_expert_used: 4,
                dtype: DType::F16,
                seed: 13,
            },
            "ggml-vocab-qwen2.gguf",
        ),
    ]
}

/// Benchmark shapes with random weights (tied embeddings, llama 3's vocabulary size when given
/// its vocabulary): `llama-3.2-1b` (16 blocks, 2048 wide, 32/8 heads, FFN 8192) and
/// `llama-3.1-8b` (32 blocks, 4096 wide, 32/8 heads, FFN 14336), and `llama-tiny` (4 blocks, 512
/// wide, 8/2 heads, FFN 1536) for quick fidelity checks; 2-D weights of `dtype`. And
/// `qwen3-30b-a3b-4l`: Qwen3-30B-A3B's experts (128 of width 768, 8 per token, 2048 wide)
/// in 4 of its 48 blocks, with 16/2 heads of 128 (the real model's head size and GQA ratio,
/// half its query heads: the file's Q width stays the model width). And `gpt-oss-20b-4l`:
/// gpt-oss-20b's blocks (2880 wide, 64/8 heads of 64, 32 experts of width 2880, 4 per token)
/// in 4 of its 24.
pub fn bench_shape(name: &str, dtype: DType) -> Option<SynthSpec> {
    if name == "gpt-oss-20b-4l" {
        return Some(SynthSpec {
            arch: "gpt-oss".into(),
            n_layer: 4,
            n_embd: 2880,
            n_head: 64,
            n_head_kv: 8,
            head_dim: 64,
            long_rope: false,
            n_ff: 2880,
            n_ctx: 131072,
            n_expert: 32,
            n_expert_used: 4,
            dtype,
            seed: 23,
        });
    }
    if name == "qwen3-30b-a3b-4l" {
        return Some(SynthSpec {
            arch: "qwen3moe".into(),
            n_layer: 4,
            n_embd: 2048,
            n_head: 16,
            n_head_kv: 2,
            head_dim: 0,
            long_rope: false,
            n_ff: 768,
            n_ctx: 40960,
            n_expert: 128,
            n_expert_used: 8,
            dtype,
            seed: 17,
        });
    }
    let (n_layer, n_embd, n_ff, n_head) = match name {
        "llama-3.2-1b" => (16, 2048, 8192, 32),
        "llama-3.1-8b" => (32, 4096, 14336, 32),
        // Every row a whole number of 256-value blocks, small enough for llama-quantize's
        // i-quant searches to take seconds: fidelity checks of the 256-block types.
        "llama-tiny" => (4, 512, 1536, 8),
        _ => return None,
    };
    Some(SynthSpec {
        arch: "llama".into(),
        n_layer,
        n_embd,
        n_head,
        n_head_kv: n_head / 4,
        head_dim: 0,
        long_rope: false,
        n_ff,
        n_ctx: 131072,
        n_expert: 0,
        n_expert_used: 0,
        dtype,
        seed: 7,
    })
}
