//! `tessera_llama::quantize` writes what llama.cpp's quantizer writes: for the synthetic gpt2
//! and qwen3 models and 14 file types, every tensor's type and bytes equal llama.cpp b11312's
//! output (fixture made by tools/make_quantize_refs.py), and llama.cpp's mixes
//! (Q3_K_M/Q4_K_M/Q5_K_S/..., fallbacks) are reproduced.

use sha2::{Digest, Sha256};
use std::path::Path;
use tessera_llama::quantize::{quantize_file, FileType};

#[test]
fn every_tensor_matches_llama_cpps_quantizer() {
    let fixtures =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/quantize/llama_cpp.json");
    let want: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for (stem, spec, vocab) in tessera_llama::synth::test_models() {
        let vocab = tessera_models::fixtures::vocab(vocab).unwrap();
        let v = tessera_gguf::GgufFile::open(&vocab).expect("vocabulary fixture");
        let src = dir.path().join(format!("{stem}.gguf"));
        tessera_llama::synth::write_random_model(&spec, v.metadata(), &src).unwrap();
        for (key, tensors) in want.as_object().unwrap().iter().filter(|(k, _)| k.starts_with(stem))
        {
            let ty = key.rsplit('/').next().unwrap();
            let ft = FileType::parse(ty).unwrap();
            let out = dir.path().join(format!("{stem}-{ty}.gguf"));
            quantize_file(&src, &out, ft, false, |_, _, _| {}).unwrap();
            let g = tessera_gguf::GgufFile::open(&out).unwrap();
            let tensors = tensors.as_object().unwrap();
            assert_eq!(g.tensors().len(), tensors.len(), "{key}: tensor count");
            for t in g.tensors() {
                let w = &tensors[&t.name];
                let hash = format!("{:x}", Sha256::digest(g.tensor_data(t)));
                assert_eq!(
                    t.dtype.name().to_uppercase(),
                    w[0].as_str().unwrap().to_uppercase(),
                    "{key}: type of {}",
                    t.name
                );
                assert_eq!(hash, w[1].as_str().unwrap(), "{key}: bytes of {}", t.name);
                checked += 1;
            }
        }
    }
    assert!(checked > 500, "{checked} tensors checked");
    eprintln!("{checked} tensors equal to llama.cpp's quantizer output");
}
