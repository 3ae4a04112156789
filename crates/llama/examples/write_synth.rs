//! Writes the random-weight models of `tessera_llama::synth` (the test models, the family
//! models and the mixture-of-experts models) into a folder, reading their vocabularies from
//! another: what the GPU check runs where there is no Rust (`cargo xtask synth-models` does the
//! same here, with the repository's fixtures).
//!
//! ```text
//! write_synth OUT_DIR VOCAB_DIR [STEM...]
//! ```
//!
//! `VOCAB_DIR` holds the vocabulary files unpacked (`ggml-vocab-NAME.gguf`); with stems, only
//! those models are written. Prints each file written.

use std::path::PathBuf;
use tessera_llama::synth;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [out, vocabs, stems @ ..] = args.as_slice() else {
        eprintln!("usage: write_synth OUT_DIR VOCAB_DIR [STEM...]");
        std::process::exit(2);
    };
    let all = synth::all_models();
    let known: Vec<&str> = all.iter().map(|(s, _, _)| *s).collect();
    if let Some(bad) = stems.iter().find(|s| !known.contains(&s.as_str())) {
        eprintln!("write_synth: no model '{bad}' (known: {})", known.join(", "));
        std::process::exit(2);
    }
    if let Err(e) = std::fs::create_dir_all(out) {
        eprintln!("write_synth: creating {out}: {e}");
        std::process::exit(1);
    }
    for (stem, spec, vocab) in &all {
        if !stems.is_empty() && !stems.iter().any(|s| s == stem) {
            continue;
        }
        let vpath = PathBuf::from(vocabs).join(vocab);
        let v = match tessera_gguf::GgufFile::open(&vpath) {
            Ok(v) => v,
            Err(e) => {
                eprintln!("write_synth: the vocabulary {}: {e}", vpath.display());
                std::process::exit(1);
            }
        };
        let path = PathBuf::from(out).join(format!("{stem}.gguf"));
        if let Err(e) = synth::write_random_model(spec, v.metadata(), &path) {
            eprintln!("write_synth: {}: {e}", path.display());
            std::process::exit(1);
        }
        println!("{}", path.display());
    }
}
