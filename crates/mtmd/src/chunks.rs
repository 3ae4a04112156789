//! A prompt with images, as llama.cpp's `mtmd_tokenize` cuts it and
//! `mtmd_helper_eval_chunks` evaluates it.
//!
//! The text is split at each [`MARKER`]; every piece is tokenized alone (special tokens
//! parsed, no BOS), an image's begin and end strings (Gemma 3: `<start_of_image>`,
//! `<end_of_image>`) are tokenized into the text around it, consecutive text goes into one
//! chunk, and the vocabulary's BOS (and EOS, where it adds one) frames the whole. A sliced
//! image (Idefics3) becomes one chunk per tile, each after its `<fake_token_around_image>
//! <row_R_col_C>` text, rows ended by a newline, then the overview between
//! `\n\n<fake_token_around_image><global-img>` and `<fake_token_around_image>`. Evaluation:
//! text chunks in batches of `n_batch` tokens, images encoded then decoded as embeddings
//! batches (with bidirectional attention for Gemma 3), logits for the prompt's last token only.

use crate::Preprocessed;
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
        /// Which of the prompt's images it is part of, and which part (a sliced image's
        /// tiles, then its overview).
        source: (usize, usize),
        /// An image of its own size (Qwen2.5-VL): its merged token grid (columns, rows),
        /// which M-RoPE language models place as a grid taking `max(columns, rows)`
        /// positions.
        grid: Option<(usize, usize)>,
    },
}

impl Chunk {
    /// Cells the chunk takes in the KV cache.
    pub fn n_tokens(&self) -> usize {
        match self {
            Chunk::Text(t) => t.len(),
            Chunk::Image { n_tokens, .. } => *n_tokens,
        }
    }

    /// Positions it advances in a language model with (`mrope`) or without M-RoPE
    /// (mtmd's `n_pos`).
    pub fn n_pos(&self, mrope: bool) -> usize {
        match self {
            Chunk::Image { grid: Some((w, h)), .. } if mrope => (*w).max(*h),
            c => c.n_tokens(),
        }
    }
}

/// The strings llama.cpp puts around a projector's images.
fn image_frame(p: Projector) -> (&'static str, &'static str) {
    match p {
        Projector::Gemma3 => ("<start_of_image>", "<end_of_image>"),
        Projector::Idefics3 => ("", ""),
        Projector::Qwen25Vl => ("<|vision_start|>", "<|vision_end|>"),
    }
}

/// For each of `texts`, the first token whose text (special tokens as text) it is (mtmd's
/// `lookup_token`), in one pass over the vocabulary (image tokens sit at its end).
fn lookup_tokens<const N: usize>(vocab: &Vocab, texts: [&str; N]) -> Result<[u32; N]> {
    let mut found = [None; N];
    for t in 0..vocab.n_tokens() as u32 {
        if found.iter().all(Option::is_some) {
            break;
        }
        let piece = vocab.token_to_piece(t, true);
        for (f, text) in found.iter_mut().zip(texts) {
            if f.is_none() && piece == text.as_bytes() {
                *f = Some(t);
            }
        }
    }
    let mut out = [0; N];
    for ((o, f), text) in out.iter_mut().zip(found).zip(texts) {
        *o = f.ok_or_else(|| MtmdError::Prompt {
            reason: format!(
                "the language model's vocabulary has no {text:?} token, which this projector's \
                 images need (the mmproj file of another model?)"
            ),
        })?;
    }
    Ok(out)
}

/// A sliced image's chunks in mtmd's Idefics3 layout (see the module's docs).
fn idefics3_chunks(
    vocab: &Vocab,
    pre: Preprocessed,
    grid: (usize, usize),
    n_tokens: usize,
    index: usize,
    out: &mut Vec<Chunk>,
) -> Result<()> {
    let [fake, newline, blank, global] =
        lookup_tokens(vocab, ["<fake_token_around_image>", "\n", "\n\n", "<global-img>"])?;
    let mut entries = pre.entries.into_iter();
    let overview = entries.next();
    let (cols, rows) = grid;
    for (k, tile) in entries.enumerate() {
        let (y, x) = (k / cols, k % cols);
        let label = format!("<fake_token_around_image><row_{}_col_{}>", y + 1, x + 1);
        push_text(out, vocab.tokenize(&label, false, true));
        out.push(Chunk::Image { entries: vec![tile], n_tokens, source: (index, k), grid: None });
        if x + 1 == cols && y + 1 != rows {
            push_text(out, vec![newline]);
        }
    }
    push_text(out, vec![blank, fake, global]);
    let k = rows * cols;
    out.extend(overview.map(|o| Chunk::Image {
        entries: vec![o],
        n_tokens,
        source: (index, k),
        grid: None,
    }));
    push_text(out, vec![fake]);
    Ok(())
}

/// Appends `toks` to the last chunk where it is text, else as a new one.
fn push_text(chunks: &mut Vec<Chunk>, toks: Vec<u32>) {
    if toks.is_empty() {
        return;
    }
    match chunks.last_mut() {
        Some(Chunk::Text(t)) => t.extend(toks),
        _ => chunks.push(Chunk::Text(toks)),
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
    let per_entry = mmproj.hparams.n_output_tokens();
    for (i, part) in parts.iter().enumerate() {
        push_text(&mut chunks, vocab.tokenize(part, false, parse_special));
        if let Some(img) = images.get(i) {
            push_text(&mut chunks, vocab.tokenize(beg, false, true));
            let pre = preprocess(mmproj, img);
            match pre.grid {
                Some(grid) => idefics3_chunks(vocab, pre, grid, per_entry, i, &mut chunks)?,
                None if mmproj.projector == Projector::Qwen25Vl => {
                    let e = &pre.entries[0];
                    let (w, h) = mmproj.hparams.merged_grid(e.width, e.height);
                    let image = Chunk::Image {
                        entries: pre.entries,
                        n_tokens: w * h,
                        source: (i, 0),
                        grid: Some((w, h)),
                    };
                    chunks.push(image);
                }
                None => {
                    let n_tokens = pre.entries.len() * per_entry;
                    let image =
                        Chunk::Image { entries: pre.entries, n_tokens, source: (i, 0), grid: None };
                    chunks.push(image);
                }
            }
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
            Chunk::Image { entries, grid, .. } => {
                let mut embd = Vec::new();
                for e in entries {
                    embd.extend(enc.encode(e)?);
                }
                let non_causal = enc.mmproj().projector == Projector::Gemma3;
                if non_causal {
                    ctx.set_causal_attn(false);
                }
                let mrope = ctx.model().hparams.rope_sections.is_some();
                if let (Some((w, h)), true) = (grid, mrope) {
                    // One batch: the grid's rows see each other through the mask's grid order
                    // whatever the micro-batches.
                    let b = Batch::from_image_grid(&embd, n_embd, *w, n_past as i32, seq);
                    ctx.decode(&b).map_err(llama)?;
                    n_past += (*w).max(*h);
                    continue;
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
