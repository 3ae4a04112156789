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
    /// Keep the vision encoder on the CPU when the model's layers are offloaded (llama.cpp's
    /// --no-mmproj-offload; by default it runs on the model's devices too, ops they lack on
    /// the CPU).
    #[arg(long = "no-mmproj-offload")]
    no_mmproj_offload: bool,
}

/// A loaded projector and the images waiting for the next prompt.
pub struct Vision {
    encoder: Encoder,
    images: Vec<Bitmap>,
}

/// What [`Vision::eval`] evaluated.
pub struct Evaluated {
    /// The position after it.
    pub n_past: usize,
    /// The prompt's last text, not evaluated (the caller's generator decodes it).
    pub last: Vec<u32>,
    /// The positions evaluated, as tokens for the caller's record of the cache, an image's
    /// positions as [`IMAGE_POSITION`] (never a token id, so no prefix match crosses one).
    pub cached: Vec<u32>,
}

/// What [`Evaluated::cached`] holds at an image's positions.
pub const IMAGE_POSITION: u32 = u32::MAX;

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
        let encoder = load_encoder(path, model, threads, !self.no_mmproj_offload)?;
        let images = self
            .image
            .iter()
            .map(|p| Bitmap::open(p, ImageLimits::default()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Some(Vision { encoder, images }))
    }
}

/// Loads the projector at `path` (checked against `model`) into an encoder on the model's
/// devices (with `offload`, llama.cpp's default) and the CPU, which takes what they lack.
pub fn load_encoder(
    path: &std::path::Path,
    model: &Model,
    threads: usize,
    offload: bool,
) -> Result<Encoder> {
    let mmproj = Mmproj::load(path)?;
    if mmproj.n_mmproj_embd != model.hparams.n_embd {
        bail!(
            "{}: the projector makes embeddings {} wide, the model is {} wide (the mmproj file \
             of another model?)",
            path.display(),
            mmproj.n_mmproj_embd,
            model.hparams.n_embd
        );
    }
    let mut backends: Vec<Box<dyn tessera_backend::Backend>> = Vec::new();
    if offload {
        for dev in &model.devices {
            let mut b = dev.init_backend()?;
            b.set_n_threads(threads)?;
            backends.push(b);
        }
    }
    let mut cpu = model.host.init_backend()?;
    cpu.set_n_threads(threads)?;
    backends.push(cpu);
    Ok(Encoder::new(Arc::new(mmproj), backends)?)
}

impl Vision {
    /// Whether images wait for the next prompt.
    pub fn has_images(&self) -> bool {
        !self.images.is_empty()
    }

    /// Decodes `path` and queues it for the next prompt; returns its size.
    pub fn push_image(&mut self, path: &std::path::Path) -> Result<(usize, usize)> {
        let img = Bitmap::open(path, ImageLimits::default())?;
        let size = (img.width, img.height);
        self.images.push(img);
        Ok(size)
    }

    /// `prompt` with a marker per waiting image where it has none (before it, as
    /// llama-mtmd-cli).
    pub fn with_markers(&self, prompt: &str) -> String {
        if prompt.contains(MARKER) {
            prompt.to_string()
        } else {
            format!("{}{prompt}", MARKER.repeat(self.images.len()))
        }
    }

    /// Evaluates `text` (its markers taking the waiting images, which are used up) from
    /// position `n_past` up to its last text chunk (see [`Evaluated`]); `add_special` frames
    /// it with BOS/EOS as the vocabulary says. The pieces of what is evaluated go to `echo`
    /// (an image as `[image]`).
    pub fn eval(
        &mut self,
        ctx: &mut LlamaContext,
        model: &Model,
        text: &str,
        n_past: usize,
        add_special: bool,
        echo: &mut dyn FnMut(&[u8]),
    ) -> Result<Evaluated> {
        let images = std::mem::take(&mut self.images);
        let mmproj = self.encoder.mmproj();
        let mut chunks =
            tessera_mtmd::tokenize(mmproj, &model.vocab, text, &images, add_special, true)?;
        let n_total: usize = chunks.iter().map(Chunk::n_tokens).sum();
        let n_ctx = ctx.params().n_ctx;
        if n_past + n_total >= n_ctx {
            bail!(
                "the prompt with its images takes {n_total} positions and {n_past} are used: more \
                 than the context of {n_ctx} (use -c)"
            );
        }
        let last = match chunks.pop() {
            Some(Chunk::Text(t)) => t,
            _ => bail!("the prompt must end with text after its last image"),
        };
        let mut cached = Vec::new();
        for c in &chunks {
            match c {
                Chunk::Text(t) => {
                    t.iter().for_each(|&t| echo(&model.vocab.token_to_piece(t, false)));
                    cached.extend_from_slice(t);
                }
                Chunk::Image { n_tokens, .. } => {
                    echo(b"[image]");
                    cached.extend(std::iter::repeat_n(IMAGE_POSITION, *n_tokens));
                }
            }
        }
        let n_past =
            tessera_mtmd::eval_chunks(ctx, &mut self.encoder, &chunks, n_past, 0, 512, false)
                .map_err(|e| anyhow!("{e}"))?;
        Ok(Evaluated { n_past, last, cached })
    }
}
