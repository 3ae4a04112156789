//! The real models' tokenizers against llama.cpp's prompt tokens (`testdata/refs`): each prompt
//! of `prompts.json`, tokenized with add_special = true and parse_special = true, must give the
//! `prompt_tokens` llama.cpp recorded.

use std::path::PathBuf;
use tessera_vocab::Vocab;

fn refs_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/refs");
    assert!(dir.is_dir(), "reference outputs not found at {}", dir.display());
    dir
}

fn check_model(model: &tessera_models::Model) {
    let path = tessera_models::ensure(model).unwrap_or_else(|e| panic!("{}: {e}", model.id));
    let vocab = Vocab::from_gguf_path(&path).unwrap_or_else(|e| panic!("{}: {e}", model.id));
    let refs = refs_dir();
    let prompts: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(refs.join("prompts.json")).expect("prompts.json"),
    )
    .expect("prompts.json is JSON");
    let stem = model.file.trim_end_matches(".gguf");
    let mut checked = 0;
    for (name, prompt) in prompts.as_object().expect("prompts object") {
        let prompt = prompt.as_str().expect("prompt string");
        // Prompt tokens are the same in every set (tokenizing does not depend on the CPU).
        let file = refs.join("avx512/fa-on").join(stem).join(format!("{name}.json"));
        let Ok(text) = std::fs::read_to_string(&file) else { continue };
        let reference: serde_json::Value = serde_json::from_str(&text).expect("reference JSON");
        let expected: Vec<u32> = reference["prompt_tokens"]
            .as_array()
            .expect("prompt_tokens")
            .iter()
            .map(|v| v.as_u64().expect("id") as u32)
            .collect();
        let got = vocab.tokenize(prompt, true, true);
        assert_eq!(got, expected, "{} {name}: {prompt:?}", model.id);
        assert_eq!(vocab.detokenize(&got, true, false), prompt, "{} {name}: detokenize", model.id);
        checked += 1;
    }
    println!("{}: {checked} prompts match llama.cpp", model.id);
    assert!(checked > 0, "{}: no reference prompts found", model.id);
}

#[test]
fn smollm2_prompts() {
    check_model(&tessera_models::SMOLLM2);
}

#[test]
fn qwen25_coder_prompts() {
    check_model(&tessera_models::QWEN25_CODER);
}

#[test]
fn gemma3_prompts() {
    check_model(&tessera_models::GEMMA3);
}

#[test]
fn eog_and_special_tokens() {
    let qwen =
        Vocab::from_gguf_path(tessera_models::ensure(&tessera_models::QWEN25_CODER).unwrap())
            .unwrap();
    let im_end = qwen.text_to_token(b"<|im_end|>").expect("<|im_end|>");
    let endoftext = qwen.text_to_token(b"<|endoftext|>").expect("<|endoftext|>");
    assert!(qwen.is_eog(im_end) && qwen.is_eog(endoftext));
    let chat = "<|im_start|>user\nhi<|im_end|>";
    let ids = qwen.tokenize(chat, false, true);
    assert_eq!(ids.last(), Some(&im_end));
    assert_eq!(qwen.detokenize(&ids, false, true), chat);
    assert_ne!(qwen.tokenize(chat, false, false).last(), Some(&im_end));

    let gemma =
        Vocab::from_gguf_path(tessera_models::ensure(&tessera_models::GEMMA3).unwrap()).unwrap();
    let eot = gemma.text_to_token("<end_of_turn>".as_bytes()).expect("<end_of_turn>");
    assert!(gemma.is_eog(eot));
    assert!(gemma.add_bos() && !gemma.add_space_prefix());
}
