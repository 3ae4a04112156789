//! Fuzzes the GGUF parser: any bytes give a parsed file or an error, never a panic, and an
//! accepted file survives a rewrite. Run: `cargo fuzz run gguf_parse` (seeds: any .gguf file).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tessera_gguf::{Gguf, GgufWriter};

fuzz_target!(|data: &[u8]| {
    let Ok(g) = Gguf::from_bytes(data) else { return };
    for t in g.tensors() {
        assert_eq!(g.tensor_data(t).len() as u64, t.n_bytes);
    }
    let mut out = Vec::new();
    GgufWriter::from_gguf(&g).unwrap().write_to(&mut out).unwrap();
    let again = Gguf::from_bytes(&out[..]).expect("rewritten file parses");
    assert_eq!(again.tensors(), g.tensors().iter().map(|t| t.clone()).collect::<Vec<_>>().as_slice());
});
