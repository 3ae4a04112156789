//! `tessera gguf` on the three real models agrees with what the `gguf` Python package reads, and
//! bad input gives a one-line error and a non-zero exit.

use serde_json::Value as Json;
use std::path::{Path, PathBuf};
use std::process::Command;

fn tessera(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tessera")).args(args).output().unwrap()
}

fn python_view(model: &Path, out: &Path) -> Json {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/py/gguf_dump_json.py");
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let st = Command::new(&python)
        .arg(script)
        .arg(model)
        .arg(out)
        .status()
        .expect("python3 (pip install gguf numpy)");
    assert!(st.success(), "gguf_dump_json.py failed (is `pip install gguf numpy` done?)");
    serde_json::from_slice(&std::fs::read(out).unwrap()).unwrap()
}

/// Values agree: numbers compared as f64 after rounding to f32 (gguf-py reads f32 fields
/// exactly, JSON prints them via f64).
fn same(a: &Json, b: &Json) -> bool {
    match (a, b) {
        (Json::Number(x), Json::Number(y)) => {
            x == y || (x.as_f64().unwrap() as f32 == y.as_f64().unwrap() as f32)
        }
        (Json::Array(x), Json::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Json::Object(x), Json::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

fn agree(model: &tessera_models::Model) {
    let path = tessera_models::ensure(model).unwrap();
    let out = tessera(&["gguf".as_ref(), "--json".as_ref(), path.as_os_str()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ours: Json = serde_json::from_slice(&out.stdout).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let theirs = python_view(&path, &dir.path().join("py.json"));
    for key in ["version", "alignment", "data_offset"] {
        assert_eq!(ours[key], theirs[key], "{key}");
    }
    let (om, tm) = (ours["metadata"].as_array().unwrap(), theirs["metadata"].as_array().unwrap());
    assert_eq!(om.len(), tm.len(), "metadata count");
    for (o, t) in om.iter().zip(tm) {
        assert!(same(o, t), "metadata differs:\n ours {}\n gguf {}", trunc(o), trunc(t));
    }
    let (ot, tt) = (ours["tensors"].as_array().unwrap(), theirs["tensors"].as_array().unwrap());
    assert_eq!(ot.len(), tt.len(), "tensor count");
    for (o, t) in ot.iter().zip(tt) {
        // ggml names types "q4_K"; gguf-py's enum spells them "Q4_K".
        let mut o = o.clone();
        o["type"] = Json::String(o["type"].as_str().unwrap().to_uppercase());
        assert_eq!(&o, t);
    }

    // The table view names every tensor and summarizes long arrays.
    let out = tessera(&["gguf".as_ref(), path.as_os_str()]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("token_embd.weight") && text.contains("more)"),
        "{}",
        &text[..text.len().min(2000)]
    );
}

fn trunc(j: &Json) -> String {
    let s = j.to_string();
    s.chars().take(300).collect()
}

#[test]
fn agrees_with_gguf_py_on_smollm2() {
    agree(&tessera_models::SMOLLM2);
}

#[test]
fn agrees_with_gguf_py_on_qwen25_coder() {
    agree(&tessera_models::QWEN25_CODER);
}

#[test]
fn agrees_with_gguf_py_on_gemma3() {
    agree(&tessera_models::GEMMA3);
}

#[test]
fn bad_files_give_a_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("junk.gguf");
    std::fs::write(&p, b"GGUF\x03\x00\x00\x00garbage").unwrap();
    for path in [p.clone(), dir.path().join("missing.gguf")] {
        let out = tessera(&["gguf".as_ref(), path.as_os_str()]);
        assert!(!out.status.success());
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(
            err.starts_with("error: ") && err.contains(path.file_name().unwrap().to_str().unwrap()),
            "{err}"
        );
    }
}
