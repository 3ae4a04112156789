//! Images in `tessera run` (llama.cpp's `llama-mtmd-cli` flags): `-mm/--mmproj FILE` names the
//! model's projector, `--image FILE` (repeatable) the images; each image replaces a
//! `<__media__>` marker of the prompt, in order, or, where the prompt has none, markers are
//! put before it, one per image (as llama-mtmd-cli does). The prompt is then cut and evaluated
//! as tessera-mtmd's chunks, and generation goes on from its last text.

use anyhow::{anyhow, bail, Result};
use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;
use tessera_llama::{LlamaContext, Model};
use tessera_mtmd::{Bitmap, Chunk, Encoder, ImageLimits, Mmproj, MARKER};

/// Multimodal options.
#[derive(Args, Debug, Default)]
pub struct MtmdArgs {
    /// The model's multimodal projector (GGUF mmproj file; llama.cpp's -mm): its vision
    /// encoder turns `--image` files into embeddings.
    #[arg(long = "mmproj", value_name = "FILE")]
    mmproj: Option<PathBuf>,
    /// An image for the prompt (PNG, JPEG, GIF, WebP; repeatable): it takes the place of a
    /// `<__media__>` marker in the prompt, in order; markers go before the prompt where it has
    /// none.
    #[arg(long = "image", value_name = "FILE")]
    image: Vec<PathBuf>,
}

/// A loaded projector and the images of the prompt.
pub struct Vision {
    encoder: Encoder,
    images: Vec<Bitmap>,
}

impl MtmdArgs {
    /// Loads the projector (checked against `model`) and decodes the images; `None` without
    /// `--mmproj`.
    pub fn load(&self, model: &Model, threads: usize) -> Result<Option<Vision>> {
        let Some(path) = &self.mmproj else {
            if !self.image.is_empty() {
                bail!("--image needs the model's projector: give it with --mmproj FILE");
            }
            return Ok(None);
        };
        if self.image.is_empty() {
            bail!("--mmproj {}: no --image given (the conversation mode's /image is not implemented yet)", path.display());
        }
        let mmproj = Mmproj::load(path)?;
        if mmproj.n_mmproj_embd != model.hparams.n_embd {
            bail!(
                "{}: the projector makes embeddings {} wide, the model is {} wide (the mmproj \
                 file of another model?)",
                path.display(),
                mmproj.n_mmproj_embd,
                model.hparams.n_embd
            );
        }
        let cpu = tessera_backend_cpu::CpuBackend::new(threads);
        let encoder = Encoder::new(Arc::new(mmproj), vec![Box::new(cpu)])?;
        let images = self
            .image
            .iter()
            .map(|p| Bitmap::open(p, ImageLimits::default()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Some(Vision { encoder, images }))
    }
}

impl Vision {
    /// `prompt` with a marker per image where it has none (before it, as llama-mtmd-cli).
    pub fn with_markers(&self, prompt: &str) -> String {
        if prompt.contains(MARKER) {
            prompt.to_string()
        } else {
            format!("{}{prompt}", MARKER.repeat(self.images.len()))
        }
    }

    /// Evaluates `text` (with its markers) up to its last text chunk, which is returned, with
    /// the position after what was evaluated: the caller's generator decodes those tokens
    /// (so its sampler sees them) and samples after them. The prompt echo gets the text
    /// chunks' pieces, `[image]` for each image.
    pub fn eval_prompt(
        &mut self,
        ctx: &mut LlamaContext,
        model: &Model,
        text: &str,
        echo: &mut dyn FnMut(&[u8]),
    ) -> Result<(usize, Vec<u32>)> {
        let mmproj = self.encoder.mmproj();
        let mut chunks =
            tessera_mtmd::tokenize(mmproj, &model.vocab, text, &self.images, true, true)?;
        let n_total: usize = chunks.iter().map(Chunk::n_tokens).sum();
        let n_ctx = ctx.params().n_ctx;
        if n_total >= n_ctx {
            bail!("the prompt with its images takes {n_total} positions, more than the context of {n_ctx} (use -c)");
        }
        let last = match chunks.pop() {
            Some(Chunk::Text(t)) => t,
            _ => bail!("the prompt must end with text after its last image"),
        };
        for c in &chunks {
            match c {
                Chunk::Text(t) => {
                    t.iter().for_each(|&t| echo(&model.vocab.token_to_piece(t, false)))
                }
                Chunk::Image { .. } => echo(b"[image]"),
            }
        }
        let n_past = tessera_mtmd::eval_chunks(ctx, &mut self.encoder, &chunks, 0, 0, 512, false)
            .map_err(|e| anyhow!("{e}"))?;
        Ok((n_past, last))
    }
}
