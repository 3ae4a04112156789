//! Real model weights dequantize to exactly the values the `gguf` Python package gives: the
//! smallest tensor of every type in each of the three models (Q4_1, Q8_0, Q5_0, Q4_K, Q6_K, F32).

mod support;

use std::collections::BTreeMap;
use tessera_gguf::GgufFile;
use tessera_tensor::{dequantize, DType};

fn check(model: &tessera_models::Model) {
    let path = tessera_models::ensure(model).unwrap();
    let file = GgufFile::open(&path).unwrap();
    let mut smallest: BTreeMap<DType, &tessera_gguf::TensorInfo> = BTreeMap::new();
    for t in file.tensors() {
        let e = smallest.entry(t.dtype).or_insert(t);
        if t.n_bytes < e.n_bytes {
            *e = t;
        }
    }
    let dir = support::tmp();
    let mut args = vec![path.as_os_str(), dir.path().as_os_str()];
    args.extend(smallest.values().map(|t| std::ffi::OsStr::new(&t.name)));
    support::python("dequant_tensor.py", &args);
    for (dtype, t) in &smallest {
        let ours = dequantize(*dtype, file.tensor_data(t)).unwrap();
        let theirs: Vec<f32> = support::read(&dir.path().join(format!("{}.f32", t.name)))
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(ours.len() as u64, t.n_elements(), "{}", t.name);
        assert_eq!(ours.len(), theirs.len(), "{}", t.name);
        let diff = ours.iter().zip(&theirs).position(|(a, b)| a.to_bits() != b.to_bits());
        assert!(
            diff.is_none(),
            "{} ({dtype}): element {:?} differs: {} vs {}",
            t.name,
            diff,
            ours[diff.unwrap()],
            theirs[diff.unwrap()]
        );
    }
}

#[test]
fn smollm2_weights_dequantize_like_gguf_py() {
    check(&tessera_models::SMOLLM2);
}

#[test]
fn qwen25_coder_weights_dequantize_like_gguf_py() {
    check(&tessera_models::QWEN25_CODER);
}

#[test]
fn gemma3_weights_dequantize_like_gguf_py() {
    check(&tessera_models::GEMMA3);
}
