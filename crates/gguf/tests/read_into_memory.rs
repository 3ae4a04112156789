//! `GgufFile::read` (llama.cpp's `--no-mmap`) gives the same file as the memory mapping, and a
//! metadata override through `metadata_mut` changes only the value asked for.

mod support;

use tessera_gguf::{GgufFile, GgufWriter, Value};

#[test]
fn read_equals_the_mapping() {
    let dir = support::tmp();
    let path = dir.path().join("small.gguf");
    let mut w = GgufWriter::new();
    w.add("general.architecture", "llama").unwrap();
    w.add("llama.block_count", 3u32).unwrap();
    let data: Vec<u8> = (0..64u32).flat_map(|i| (i as f32).to_le_bytes()).collect();
    w.add_tensor("t", tessera_tensor::DType::F32, &[16, 4], data.as_slice()).unwrap();
    w.write_file(&path).unwrap();
    let mapped = GgufFile::open(&path).unwrap();
    let mut read = GgufFile::read(&path).unwrap();
    assert_eq!(mapped.bytes(), read.bytes());
    assert_eq!(mapped.metadata(), read.metadata());
    assert_eq!(mapped.tensors(), read.tensors());
    read.metadata_mut().push("llama.block_count", Value::U32(5));
    assert_eq!(read.metadata().get_u32("llama.block_count").unwrap(), 5);
    assert_eq!(read.metadata().len(), mapped.metadata().len());
    let missing = GgufFile::read(dir.path().join("absent.gguf")).unwrap_err();
    assert!(missing.to_string().contains("absent.gguf"), "{missing}");
}
