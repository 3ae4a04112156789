//! Bad input is a one-line error and a non-zero exit, never a panic: a prompt longer than the
//! context, an unknown architecture, a missing tensor, a corrupt file.

use std::process::Command;
use tessera_gguf::{GgufWriter, Value};

/// Runs tessera, expects failure, returns stderr.
fn fails(args: &[&str]) -> String {
    let out =
        Command::new(env!("CARGO_BIN_EXE_tessera")).args(args).output().expect("running tessera");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "tessera {args:?} succeeded");
    assert!(!err.contains("panicked"), "tessera {args:?} panicked: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error")).collect();
    assert_eq!(lines.len(), 1, "one error line expected: {err}");
    err
}

/// A GGUF with llama hyperparameters, the SmolLM2 tokenizer, no tensors, and `arch`.
fn header_only(path: &std::path::Path, arch: &str) {
    let smol = tessera_models::ensure(&tessera_models::SMOLLM2).expect("model");
    let src = tessera_gguf::GgufFile::open(&smol).unwrap();
    let mut w = GgufWriter::new();
    w.add("general.architecture", arch).unwrap();
    for (k, v) in [
        ("block_count", 2u32),
        ("embedding_length", 64),
        ("feed_forward_length", 128),
        ("attention.head_count", 4),
    ] {
        w.add(&format!("{arch}.{k}"), Value::U32(v)).unwrap();
    }
    for (k, v) in src.metadata().iter().filter(|(k, _)| k.starts_with("tokenizer.")) {
        w.add(k, v.clone()).unwrap();
    }
    w.write_file(path).unwrap();
}

#[test]
fn prompt_longer_than_the_context() {
    let smol = tessera_models::ensure(&tessera_models::SMOLLM2).expect("model");
    let prompt = "the quick brown fox ".repeat(200);
    let err = fails(&["run", "-m", smol.to_str().unwrap(), "-p", &prompt, "-c", "256", "-n", "1"]);
    assert!(err.contains("context"), "{err}");
}

#[test]
fn unknown_architecture() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.gguf");
    header_only(&p, "nosuch");
    let err = fails(&["run", "-m", p.to_str().unwrap(), "-p", "hi", "-n", "1"]);
    assert!(err.contains("unknown architecture 'nosuch'"), "{err}");
}

#[test]
fn missing_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.gguf");
    header_only(&p, "llama");
    let err = fails(&["run", "-m", p.to_str().unwrap(), "-p", "hi", "-n", "1"]);
    assert!(err.contains("token_embd.weight") && err.contains("missing"), "{err}");
}

#[test]
fn corrupt_file() {
    let smol = tessera_models::ensure(&tessera_models::SMOLLM2).expect("model");
    let bytes = std::fs::read(&smol).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("cut.gguf");
    std::fs::write(&p, &bytes[..bytes.len() / 2]).unwrap();
    let err = fails(&["run", "-m", p.to_str().unwrap(), "-p", "hi", "-n", "1"]);
    assert!(err.contains("cut.gguf"), "{err}");
}
