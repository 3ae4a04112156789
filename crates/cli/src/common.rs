//! What the model commands share: finding the model (the default one is fetched on first use)
//! and printing pieces as they stream.

use anyhow::{bail, Context as _, Result};
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

/// Checks that `path` names a readable file before anything opens it, so the error says what
/// to do: a missing file, a directory, a file that cannot be read.
pub fn check_model_path(path: &Path) -> Result<()> {
    let shown = path.display();
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "{shown}: no such file; give the path of a GGUF model (`tessera run` without -m \
             fetches a default one)"
        ),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            bail!("{shown}: permission denied; make the file readable (chmod +r)")
        }
        Err(e) => bail!("{shown}: {e}"),
        Ok(m) if m.is_dir() => {
            bail!("{shown} is a directory; give the path of a GGUF file in it")
        }
        Ok(_) => match std::fs::File::open(path) {
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                bail!("{shown}: permission denied; make the file readable (chmod +r)")
            }
            Err(e) => bail!("{shown}: {e}"),
            Ok(_) => Ok(()),
        },
    }
}

/// One flat error line from a reader or loader error (which already names the file), with a
/// hint where one helps.
pub fn explain(e: impl std::fmt::Display) -> anyhow::Error {
    let msg = e.to_string();
    if msg.contains("not a GGUF file") {
        anyhow::anyhow!(
            "{msg}; tessera runs GGUF models (convert others with llama.cpp's convert_hf_to_gguf.py)"
        )
    } else {
        anyhow::anyhow!("{msg}")
    }
}

/// Loads a model, naming the file once in any error, with a hint where one helps.
/// `no_repack` is llama.cpp's `--no-repack`: weights it would repack keep the plain kernels.
pub fn load(path: &Path, no_repack: bool) -> Result<Model> {
    check_model_path(path)?;
    let params = tessera_llama::LoadParams { repack: !no_repack };
    Model::load_with(path, &params).map_err(explain)
}

/// Opens a GGUF file (memory-mapped), with the same checks and messages as [`load`].
pub fn open_gguf(path: &Path) -> Result<tessera_gguf::GgufFile> {
    check_model_path(path)?;
    tessera_gguf::GgufFile::open(path).map_err(explain)
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

/// The CPU's model name (`/proc/cpuinfo` on Linux), or `unknown`.
pub fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// The SIMD level the kernels run at (`TESSERA_SIMD` lowers it) and whether they use VNNI
/// (the AVX-512 level on a CPU with it).
pub fn simd() -> (tessera_backend_cpu::SimdLevel, bool) {
    let level = tessera_backend_cpu::SimdLevel::from_env();
    (level, level == tessera_backend_cpu::SimdLevel::Avx512 && tessera_backend_cpu::has_vnni())
}

/// [`simd`] as one word: `avx2`, `avx512+vnni`, ...
pub fn simd_level() -> String {
    let (level, vnni) = simd();
    format!("{level}{}", if vnni { "+vnni" } else { "" })
}

/// One line on what runs: CPU, SIMD level and kernel family (llama-bench's system info).
pub fn system_info() -> String {
    let (level, vnni) = simd();
    format!(
        "CPU: {} | SIMD: {} | kernels: {}",
        cpu_name(),
        simd_level(),
        tessera_backend_cpu::kernel_family(level, vnni)
    )
}
