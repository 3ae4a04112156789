//! The repository's compressed test fixtures, unpacked on demand.
//!
//! The vocabulary-only GGUF files of `testdata/vocab` (llama.cpp's tokenizer test suite) are
//! stored gzipped (`ggml-vocab-NAME.gguf.gz`): plain, they would be most of the repository.
//! [`vocab`] returns the path of the plain file, unpacked once into a cache under the
//! workspace's target directory ([`cache_dir`]) and reused after that.
//!
//! The cache is keyed by the SHA-256 of the compressed file, so an edited fixture is unpacked
//! afresh, and each file is written under a temporary name and renamed into place: test
//! processes running at once (cargo runs test binaries in parallel) never see a partial file.

use crate::{io, ModelError, Result};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The repository's `testdata` folder.
pub fn testdata_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata")
}

/// The tokenizer fixtures' folder, `testdata/vocab`: `NAME.gz` (the vocabulary-only GGUF
/// file `NAME`, gzipped) with `NAME.inp` and `NAME.out` beside it (testdata/vocab/README.md).
pub fn vocab_dir() -> PathBuf {
    testdata_dir().join("vocab")
}

/// The names of the vocabulary fixtures (`ggml-vocab-NAME.gguf`, as [`vocab`] takes them),
/// sorted: every `*.gguf.gz` of [`vocab_dir`].
pub fn vocab_names() -> Result<Vec<String>> {
    let dir = vocab_dir();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .map_err(io(&dir))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|n| n.strip_suffix(".gz").filter(|s| s.ends_with(".gguf")).map(String::from))
        .collect();
    names.sort();
    Ok(names)
}

/// Where unpacked fixtures are cached: `fixtures/` in the target directory
/// (`$CARGO_TARGET_DIR` when this runs or when it was built, else the workspace's `target/`).
pub fn cache_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .or_else(|| option_env!("CARGO_TARGET_DIR").map(PathBuf::from))
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    target.join("fixtures")
}

/// The path of the plain vocabulary fixture `name` (`ggml-vocab-qwen2.gguf`, say): unpacked
/// from `testdata/vocab/NAME.gz` into [`cache_dir`] on first use, reused while the compressed
/// file is unchanged. Fails with [`ModelError::Io`] where the fixture is missing or not gzip.
pub fn vocab(name: &str) -> Result<PathBuf> {
    unpack(&vocab_dir().join(format!("{name}.gz")), &cache_dir().join("vocab"))
}

/// Unpacks the gzip file `gz` into `CACHE/<hash of gz>/<gz's name without .gz>` unless it is
/// there already; returns that path.
pub fn unpack(gz: &Path, cache: &Path) -> Result<PathBuf> {
    let packed = std::fs::read(gz).map_err(io(gz))?;
    let name = gz
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_suffix(".gz"))
        .ok_or_else(|| invalid(gz, "the name does not end in .gz"))?;
    let hash: String = Sha256::digest(&packed)[..8].iter().map(|b| format!("{b:02x}")).collect();
    let dir = cache.join(hash);
    let path = dir.join(name);
    // Complete whenever it exists: it only ever appears by a rename.
    if path.is_file() {
        return Ok(path);
    }
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    static SERIAL: AtomicU64 = AtomicU64::new(0);
    let tmp = dir.join(format!(
        ".{name}.{}.{}.tmp",
        std::process::id(),
        SERIAL.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| {
        let mut out = std::fs::File::create(&tmp)?;
        // GzDecoder checks the CRC-32 and length of gzip's trailer at the end of the stream.
        std::io::copy(&mut flate2::read::GzDecoder::new(&packed[..]), &mut out)?;
        out.flush()?;
        out.sync_all()
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(invalid(gz, &format!("unpacking: {e}")));
    }
    if let Err(e) = std::fs::rename(&tmp, &path) {
        let _ = std::fs::remove_file(&tmp);
        // Another process may have put the same bytes there first (and holds them open).
        if !path.is_file() {
            return Err(ModelError::Io { path, source: e });
        }
    }
    Ok(path)
}

/// Gzips `data` as the fixtures are stored (best compression, no name, no timestamp: the
/// same bytes give the same file).
pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    enc.write_all(data).expect("writing to memory");
    enc.finish().expect("writing to memory")
}

fn invalid(path: &Path, detail: &str) -> ModelError {
    ModelError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, detail.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpacks_once_and_reuses() {
        let dir = std::env::temp_dir().join(format!("tessera-fixtures-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let data: Vec<u8> = (0..100_000u32).flat_map(|i| (i % 251).to_le_bytes()).collect();
        let gz = dir.join("x.gguf.gz");
        std::fs::write(&gz, gzip(&data)).unwrap();
        assert_eq!(gzip(&data), gzip(&data), "deterministic");
        let cache = dir.join("cache");
        let p = unpack(&gz, &cache).unwrap();
        assert_eq!(p.file_name().unwrap(), "x.gguf");
        assert_eq!(std::fs::read(&p).unwrap(), data);
        let modified = std::fs::metadata(&p).unwrap().modified().unwrap();
        assert_eq!(unpack(&gz, &cache).unwrap(), p);
        assert_eq!(std::fs::metadata(&p).unwrap().modified().unwrap(), modified, "reused");
        // An edited fixture gets its own place.
        std::fs::write(&gz, gzip(b"other")).unwrap();
        let q = unpack(&gz, &cache).unwrap();
        assert_ne!(q, p);
        assert_eq!(std::fs::read(&q).unwrap(), b"other");
        // A corrupt one fails and leaves nothing behind.
        let mut bad = gzip(&data);
        let n = bad.len();
        bad[n - 6] ^= 1; // the CRC-32
        std::fs::write(&gz, bad).unwrap();
        assert!(unpack(&gz, &cache).is_err());
        let left: Vec<_> = std::fs::read_dir(&cache)
            .unwrap()
            .flat_map(|d| std::fs::read_dir(d.unwrap().path()).unwrap())
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left.len(), 2, "{left:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn every_vocab_fixture_unpacks() {
        let names = vocab_names().unwrap();
        assert_eq!(names.len(), 12, "{names:?}");
        for n in &names {
            let p = vocab(n).unwrap();
            assert_eq!(&std::fs::read(&p).unwrap()[..4], b"GGUF", "{n}");
        }
        assert!(vocab("ggml-vocab-nonexistent.gguf").is_err());
    }
}
