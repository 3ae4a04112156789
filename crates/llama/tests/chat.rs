//! Chat templates against llama.cpp's rendering: every conversation of
//! tests/fixtures/chat.json (made by tools/make_chat_refs.py with llama-cpp-python) rendered
//! through each real model's `tokenizer.chat_template` gives the same prompt text.

use serde_json::Value;
use tessera_llama::{chat, Model};

fn check(id: tessera_models::Model) {
    let path = tessera_models::ensure(&id).expect("fetching the model");
    let model = Model::load(&path, tessera_backend_cpu::CpuDevice::shared()).expect("loading");
    let template = model.chat_template.as_deref().expect("the model has a chat template");
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/chat.json");
    let all: Value = serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
    let name = id.file.trim_end_matches(".gguf");
    let cases = all[name].as_array().unwrap_or_else(|| panic!("no fixture for {name}"));
    assert!(!cases.is_empty());
    for case in cases {
        let messages: Vec<(&str, &str)> = case["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
            .collect();
        let add = case["add_generation_prompt"].as_bool().unwrap();
        let got = chat::apply(template, &messages, add, &model.vocab).expect("rendering");
        assert_eq!(got, case["prompt"].as_str().unwrap(), "{name}: {messages:?} (add {add})");
    }
}

#[test]
fn smollm2_chat_template_renders_as_llama_cpp() {
    check(tessera_models::SMOLLM2);
}

#[test]
fn qwen25_chat_template_renders_as_llama_cpp() {
    check(tessera_models::QWEN25_CODER);
}
