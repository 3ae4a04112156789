//! Writes the random-weight Granite file the tests compare against llama.cpp:
//! `cargo run -p tessera-granite --example write_synth -- OUT.gguf` (tools/make_family_refs.py then
//! records llama.cpp's outputs on it).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = std::env::args().nth(1).ok_or("usage: write_synth OUT.gguf")?;
    let (spec, scales, vocab) = tessera_granite::synth::test_model();
    let vocab = tessera_models::fixtures::vocab(vocab)?;
    let v = tessera_gguf::GgufFile::open(&vocab)?;
    tessera_granite::synth::write_random_granite(&spec, &scales, v.metadata(), out.as_ref())?;
    eprintln!("wrote {out}");
    Ok(())
}
