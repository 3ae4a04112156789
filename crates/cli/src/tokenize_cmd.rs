//! `tessera tokenize`: llama-tokenize: the ids and pieces of a prompt.

use crate::common;
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

/// Options of `tessera tokenize`.
#[derive(Args, Debug)]
pub struct TokenizeArgs {
    /// Model file (GGUF; only its tokenizer is used); default: SmolLM2-135M-Instruct.
    #[arg(short = 'm', long)]
    model: Option<PathBuf>,
    /// Text to tokenize.
    #[arg(short = 'p', long)]
    prompt: String,
    /// Print only the ids, as a list.
    #[arg(long)]
    ids: bool,
    /// Do not add BOS/EOS.
    #[arg(long = "no-bos")]
    no_bos: bool,
    /// Treat special-token text as plain text.
    #[arg(long = "no-parse-special")]
    no_parse_special: bool,
}

/// Runs the command.
pub fn run(a: TokenizeArgs) -> Result<()> {
    let path = common::resolve_model(a.model.as_deref())?;
    let file = common::open_gguf(&path)?;
    let vocab = tessera_llama::Vocab::from_metadata(file.metadata())
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let toks = vocab.tokenize(&a.prompt, !a.no_bos, !a.no_parse_special);
    if a.ids {
        println!("{toks:?}");
    } else {
        for t in toks {
            println!("{t:6} -> '{}'", String::from_utf8_lossy(&vocab.token_to_piece(t, true)));
        }
    }
    Ok(())
}
