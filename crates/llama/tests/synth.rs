//! The synthetic qwen3 and gpt2 models (random weights, written by tessera_llama::synth)
//! against llama.cpp's outputs on the same files (fixtures/synth, made by
//! tools/make_synth_refs.sh), with the same three checks as the real models.

mod common;

use sha2::{Digest, Sha256};
use std::path::Path;
use tessera_llama::Model;

fn check_synth(stem: &str, flash_attn: bool) {
    let (_, spec, vocab) =
        tessera_llama::synth::test_models().into_iter().find(|m| m.0 == stem).unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/synth");
    let vocab = common::refs_dir().join("../vocab").join(vocab);
    let v = tessera_gguf::GgufFile::open(&vocab).expect("vocabulary fixture");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{stem}.gguf"));
    tessera_llama::synth::write_random_model(&spec, v.metadata(), &path).unwrap();
    // The file must be the one the references were made from.
    let sums = std::fs::read_to_string(fixtures.join("SHA256SUMS")).expect("SHA256SUMS");
    let want = sums
        .lines()
        .find(|l| l.ends_with(&format!("{stem}.gguf")))
        .and_then(|l| l.split_whitespace().next())
        .expect("a hash for the model");
    let got = format!("{:x}", Sha256::digest(std::fs::read(&path).unwrap()));
    assert_eq!(got, want, "{stem}: the writer no longer reproduces the file the references used");
    let model = Model::load(&path).unwrap();
    let spreads = [fixtures.join("reproduction.json")];
    let agreement = fixtures.join("self_agreement.json");
    common::check(&model, stem, &fixtures, &agreement, &spreads, flash_attn, &[]);
}

#[test]
fn synthetic_qwen3_matches_llama_cpp_flash() {
    check_synth("synth-qwen3-q8_0", true);
}

#[test]
fn synthetic_qwen3_matches_llama_cpp_softmax() {
    check_synth("synth-qwen3-q8_0", false);
}

#[test]
fn synthetic_gpt2_matches_llama_cpp_flash() {
    check_synth("synth-gpt2-f16", true);
}

#[test]
fn synthetic_gpt2_matches_llama_cpp_softmax() {
    check_synth("synth-gpt2-f16", false);
}
