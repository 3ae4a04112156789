//! A prompt with images, as llama.cpp's `mtmd_tokenize` cuts it and
//! `mtmd_helper_eval_chunks` evaluates it.
//!
//! The text is split at each [`MARKER`]; every piece is tokenized alone (special tokens
//! parsed, no BOS), an image's begin and end strings (Gemma 3: `<start_of_image>`,
//! `<end_of_image>`) are tokenized into the text around it, consecutive text goes into one
//! chunk, and the vocabulary's BOS (and EOS, where it adds one) frames the whole. Evaluation:
//! text chunks in batches of `n_batch` tokens, images encoded then decoded as embeddings
//! batches (with bidirectional attention for Gemma 3), logits for the prompt's last token only.

use crate::{preprocess, Bitmap, Encoder, ImageF32, Mmproj, MtmdError, Projector, Result};
use tessera_llama::{Batch, LlamaContext, Vocab};

/// The media placeholder in prompt text (llama.cpp's `mtmd_default_marker`).
pub const MARKER: &str = "<__media__>";

/// A piece of a multimodal prompt.
#[derive(Debug, Clone, PartialEq)]
pub enum Chunk {
    /// Tokens.
    Text(Vec<u32>),
    /// An image, preprocessed (the encoder's inputs), and how many tokens it becomes.
    Image {
        /// The encoder's inputs (one for the fixed-size projectors).
        entries: Vec<ImageF32>,
        /// Positions it takes in the context.
        n_tokens: usize,
    },
}

impl Chunk {
    /// Positions the chunk takes.
    pub fn n_tokens(&self) -> usize {
        match self {
            Chunk::Text(t) => t.len(),
            Chunk::Image { n_tokens, .. } => *n_tokens,
        }
    }
}

/// The strings llama.cpp puts around a projector's images.
fn image_frame(p: Projector) -> (&'static str, &'static str) {
    match p {
        Projector::Gemma3 => ("<start_of_image>", "<end_of_image>"),
    }
}

/// Cuts `text` (with one [`MARKER`] per image, in order) into chunks (`mtmd_tokenize`);
/// `add_special` adds the vocabulary's BOS/EOS as its flags say.
pub fn tokenize(
    mmproj: &Mmproj,
    vocab: &Vocab,
    text: &str,
    images: &[Bitmap],
    add_special: bool,
    parse_special: bool,
) -> Result<Vec<Chunk>> {
    let parts: Vec<&str> = text.split(MARKER).collect();
    if parts.len() - 1 != images.len() {
        return Err(MtmdError::Prompt {
            reason: format!(
                "{} media markers ({MARKER}) in the text for {} images",
                parts.len() - 1,
                images.len()
            ),
        });
    }
    let (beg, end) = image_frame(mmproj.projector);
    let mut chunks: Vec<Chunk> = Vec::new();
    let push_text = |chunks: &mut Vec<Chunk>, toks: Vec<u32>| {
        if toks.is_empty() {
            return;
        }
        match chunks.last_mut() {
            Some(Chunk::Text(t)) => t.extend(toks),
            _ => chunks.push(Chunk::Text(toks)),
        }
    };
    for (i, part) in parts.iter().enumerate() {
        push_text(&mut chunks, vocab.tokenize(part, false, parse_special));
        if let Some(img) = images.get(i) {
            push_text(&mut chunks, vocab.tokenize(beg, false, true));
            let entries = preprocess(mmproj, img);
            let n_tokens = entries.len() * mmproj.hparams.n_output_tokens();
            chunks.push(Chunk::Image { entries, n_tokens });
            push_text(&mut chunks, vocab.tokenize(end, false, true));
        }
    }
    if add_special && vocab.add_bos() {
        if let Some(bos) = vocab.bos() {
            match chunks.first_mut() {
                Some(Chunk::Text(t)) => t.insert(0, bos),
                _ => chunks.insert(0, Chunk::Text(vec![bos])),
            }
        }
    }
    if add_special && vocab.add_eos() {
        if let Some(eos) = vocab.eos() {
            push_text(&mut chunks, vec![eos]);
        }
    }
    Ok(chunks)
}

/// Evaluates `chunks` in sequence `seq` of `ctx` from position `n_past`
/// (`mtmd_helper_eval_chunks`); returns the next position. With `logits_last`, the last
/// token's logits are kept (the one row of `ctx.logits()` after a text chunk).
pub fn eval_chunks(
    ctx: &mut LlamaContext,
    enc: &mut Encoder,
    chunks: &[Chunk],
    mut n_past: usize,
    seq: u32,
    n_batch: usize,
    logits_last: bool,
) -> Result<usize> {
    let llama = |e: tessera_llama::LlamaError| MtmdError::Prompt { reason: e.to_string() };
    let n_batch = n_batch.max(1);
    let n_embd = ctx.model().hparams.n_embd;
    if enc.mmproj().n_mmproj_embd != n_embd {
        return Err(MtmdError::Prompt {
            reason: format!(
                "the projector makes embeddings {} wide, the model is {n_embd} wide (another \
                 model's mmproj file?)",
                enc.mmproj().n_mmproj_embd
            ),
        });
    }
    for (ci, chunk) in chunks.iter().enumerate() {
        let last_chunk = ci + 1 == chunks.len();
        match chunk {
            Chunk::Text(tokens) => {
                for (bi, piece) in tokens.chunks(n_batch).enumerate() {
                    let last = last_chunk && (bi + 1) * n_batch >= tokens.len();
                    let mut b = Batch::new();
                    for (i, &t) in piece.iter().enumerate() {
                        b.add(
                            t,
                            (n_past + i) as i32,
                            seq,
                            logits_last && last && i + 1 == piece.len(),
                        );
                    }
                    ctx.decode(&b).map_err(llama)?;
                    n_past += piece.len();
                }
            }
            Chunk::Image { entries, .. } => {
                let mut embd = Vec::new();
                for e in entries {
                    embd.extend(enc.encode(e)?);
                }
                let non_causal = enc.mmproj().projector == Projector::Gemma3;
                if non_causal {
                    ctx.set_causal_attn(false);
                }
                let mut result = Ok(());
                for piece in embd.chunks(n_batch * n_embd) {
                    let b = Batch::from_embeddings(piece, n_embd, n_past as i32, seq);
                    if let Err(e) = ctx.decode(&b) {
                        result = Err(llama(e));
                        break;
                    }
                    n_past += piece.len() / n_embd;
                }
                if non_causal {
                    ctx.set_causal_attn(true);
                }
                result?;
            }
        }
    }
    Ok(n_past)
}
