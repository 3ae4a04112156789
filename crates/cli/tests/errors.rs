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

/// Whether this process can read a file whose mode forbids it (root can).
fn mode_bits_are_enforced(p: &std::path::Path) -> bool {
    std::fs::read(p).is_err()
}

/// A table of the model-path errors of every command that opens a model: one line each,
/// naming the file once and saying what to do.
#[test]
fn model_path_errors_name_the_file_once_and_say_what_to_do() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nonexist.gguf");
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "not a model\n").unwrap();
    let locked = dir.path().join("locked.gguf");
    std::fs::write(&locked, b"GGUF").unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
    let d = dir.path().to_str().unwrap().to_string();
    let (m, t, l) = (
        missing.to_str().unwrap().to_string(),
        text.to_str().unwrap().to_string(),
        locked.to_str().unwrap().to_string(),
    );
    let out = dir.path().join("out.gguf");
    let out = out.to_str().unwrap();
    // (the path given, what the line must say)
    let cases: Vec<(&str, &str)> = vec![
        (&m, "no such file; give the path of a GGUF model"),
        (&d, "is a directory; give the path of a GGUF file"),
        (&t, "not a GGUF file; tessera runs GGUF models"),
        (&l, "permission denied; make the file readable"),
    ];
    let enforced = mode_bits_are_enforced(&locked);
    let mut rows = 0;
    for (path, says) in &cases {
        if *path == l && !enforced {
            eprintln!("skipped the unreadable-file row: running as root, mode bits do not apply");
            continue;
        }
        let commands: Vec<Vec<&str>> = vec![
            vec!["run", "-m", path, "-p", "hi", "-n", "1"],
            vec!["bench", "-m", path, "-p", "8", "-n", "1", "-r", "1"],
            vec!["perplexity", "-m", path, "-f", path],
            vec!["tokenize", "-m", path, "-p", "hi"],
            vec!["gguf", path],
            vec!["quantize", path, out, "Q8_0"],
        ];
        for args in commands {
            let err = fails(&args);
            let line = err.lines().find(|l| l.starts_with("error")).unwrap();
            assert!(line.contains(says), "tessera {args:?}: {line}");
            assert_eq!(
                line.matches(*path).count(),
                1,
                "tessera {args:?} names the file once: {line}"
            );
            rows += 1;
        }
    }
    assert!(rows >= 18, "{rows} rows checked");
}
