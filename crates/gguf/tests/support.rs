//! Shared helpers for the tessera-gguf integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs a script of tests/py with python3 (needs `pip install gguf numpy`).
pub fn python(script: &str, args: &[&std::ffi::OsStr]) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/py").join(script);
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let status = Command::new(&python).arg(&path).args(args).status().unwrap_or_else(|e| {
        panic!("cannot run {python}: {e} (tests need `pip install gguf numpy`)")
    });
    assert!(status.success(), "{} failed (is `pip install gguf numpy` done?)", path.display());
}

/// A fresh temporary directory.
pub fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// Reads a file.
pub fn read(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap()
}
