//! The real models against llama.cpp's own outputs (../shared/refs, made with llama.cpp b11312
//! through llama-cpp-python), with the three checks its README defines (tests/common), in both
//! attention modes.

mod common;

use tessera_llama::Model;

/// Known differences from the stored references, each explained in the issue notes.
///
/// Tessera reproduces llama.cpp b11312 *as it runs on this machine* bit for bit on all six
/// SmolLM2 cases and on most Qwen2.5/Gemma-3 cases (same logits, same 64 greedy tokens). The
/// stored Qwen2.5 and Gemma-3 references in shared/refs, though, are not what that llama.cpp
/// computes here today: regenerated with shared/tools/make_refs.py on this machine, they differ
/// from the stored files by NMSE 1e-4 to 1.8e-3 (gemma p1 fa-on: 1.78e-3) and their greedy
/// texts part after 4 to 37 tokens, while SmolLM2's regenerate identically. The one check that
/// fails against the stored files is this one: Tessera's logits here equal llama.cpp's on this
/// machine exactly (NMSE 0), which is 1.78e-3 from the stored file.
const KNOWN_GAPS: &[&str] = &["gemma-3-270m-q4_k_m/p1-capital/fa-on/logits"];

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
