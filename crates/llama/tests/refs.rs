//! The real models against llama.cpp's own outputs (testdata/refs, made with llama.cpp b11312
//! through llama-cpp-python), with the three checks its README defines (tests/common), in both
//! attention modes.

mod common;

use tessera_llama::Model;

/// Known differences from the stored references, each explained in the issue notes: none.
///
/// Tessera reproduces llama.cpp b11312 *as it runs on this machine* bit for bit (the logits
/// and every intermediate tensor, checked with llama.cpp's eval callback). The stored Qwen2.5
/// and Gemma-3 references in testdata/refs, though, are not exactly what that llama.cpp computes
/// here: it is NMSE 1.2e-4 to 1.8e-3 from them (SmolLM2's it reproduces exactly). Those
/// distances are in tests/fixtures/reproduction_real.json (tools/llama_cpp_self_agreement.py
/// --reproduction), and the logits check allows them, as it allows llama.cpp's other path.
const KNOWN_GAPS: &[&str] = &[];

fn check_model(id: tessera_models::Model, flash_attn: bool) {
    let path = tessera_models::ensure(&id).expect("fetching the model");
    let model = Model::load(&path).expect("loading");
    let name = path.file_stem().unwrap().to_str().unwrap().to_string();
    let agreement = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/self_agreement_real.json");
    common::check(&model, &name, &common::refs_dir(), &agreement, flash_attn, KNOWN_GAPS);
}

#[test]
fn smollm2_matches_llama_cpp_flash() {
    check_model(tessera_models::SMOLLM2, true);
}

#[test]
fn smollm2_matches_llama_cpp_softmax() {
    check_model(tessera_models::SMOLLM2, false);
}

#[test]
fn qwen25_coder_matches_llama_cpp_flash() {
    check_model(tessera_models::QWEN25_CODER, true);
}

#[test]
fn qwen25_coder_matches_llama_cpp_softmax() {
    check_model(tessera_models::QWEN25_CODER, false);
}

#[test]
fn gemma3_matches_llama_cpp_flash() {
    check_model(tessera_models::GEMMA3, true);
}

#[test]
fn gemma3_matches_llama_cpp_softmax() {
    check_model(tessera_models::GEMMA3, false);
}
