//! The three real models: they parse, their tables are consistent, and writing them back yields
//! byte-identical files (checked by hashing the writer's output against the known SHA-256).

use sha2::{Digest, Sha256};
use std::io::Write;
use tessera_gguf::{GgufFile, GgufWriter};

struct HashWriter(Sha256, u64);

impl Write for HashWriter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.update(b);
        self.1 += b.len() as u64;
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn round_trip(model: &tessera_models::Model) {
    let path = tessera_models::ensure(model).unwrap();
    let file = GgufFile::open(&path).unwrap();
    let arch = file.metadata().get_str("general.architecture").unwrap();
    assert!(["llama", "qwen2", "gemma3"].contains(&arch), "{arch}");
    assert!(file.metadata().get_uint(&format!("{arch}.block_count")).unwrap() > 0);
    file.tensor("token_embd.weight").unwrap();
    let mut h = HashWriter(Sha256::new(), 0);
    GgufWriter::from_gguf(&file).unwrap().write_to(&mut h).unwrap();
    let hex: String = h.0.finalize().iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(h.1, model.size, "{}: rewritten size", model.id);
    assert_eq!(hex, model.sha256, "{}: rewritten file differs", model.id);
}

#[test]
fn smollm2_round_trips_byte_identical() {
    round_trip(&tessera_models::SMOLLM2);
}

#[test]
fn qwen25_coder_round_trips_byte_identical() {
    round_trip(&tessera_models::QWEN25_CODER);
}

#[test]
fn gemma3_round_trips_byte_identical() {
    round_trip(&tessera_models::GEMMA3);
}
