//! What the model commands share: finding the model (the default one is fetched on first use)
//! and printing pieces as they stream.

use anyhow::{Context as _, Result};
use std::io::Write;
use std::path::{Path, PathBuf};
use tessera_llama::Model;

/// The model at `path`, or the default model (SmolLM2-135M-Instruct), fetched with a progress
/// bar the first time.
pub fn resolve_model(path: Option<&Path>) -> Result<PathBuf> {
    match path {
        Some(p) => Ok(p.to_path_buf()),
        None => {
            eprintln!("no -m given: using the default model, {}", tessera_models::SMOLLM2.file);
            tessera_models::ensure(&tessera_models::SMOLLM2).context("fetching the default model")
        }
    }
}

/// Loads a model, naming the file in any error.
pub fn load(path: &Path) -> Result<Model> {
    Model::load(path).map_err(|e| anyhow::anyhow!("{e}"))
}

/// Threads to use: `n`, or every core.
pub fn threads(n: Option<usize>) -> usize {
    n.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1)
}

/// Writes token pieces to stdout as soon as they form whole UTF-8 characters.
#[derive(Default)]
pub struct Streamer {
    pending: Vec<u8>,
}

impl Streamer {
    /// Adds a piece's bytes and prints what is complete.
    pub fn push(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
        let valid = match std::str::from_utf8(&self.pending) {
            Ok(s) => s.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => self.pending.len(),
        };
        let out = String::from_utf8_lossy(&self.pending[..valid]).into_owned();
        self.pending.drain(..valid);
        let mut so = std::io::stdout().lock();
        let _ = so.write_all(out.as_bytes());
        let _ = so.flush();
    }

    /// Prints whatever is left.
    pub fn finish(&mut self) {
        let rest = std::mem::take(&mut self.pending);
        if !rest.is_empty() {
            print!("{}", String::from_utf8_lossy(&rest));
        }
        println!();
    }
}

/// Human size: `91.94 MiB`.
pub fn human_bytes(n: usize) -> String {
    let n = n as f64;
    if n >= 1024.0 * 1024.0 * 1024.0 {
        format!("{:.2} GiB", n / (1024.0 * 1024.0 * 1024.0))
    } else {
        format!("{:.2} MiB", n / (1024.0 * 1024.0))
    }
}
