//! `tessera serve --mmproj FILE`: tessera-mtmd's encoder behind the server's
//! [`Vision`] trait (the server library knows no projector). Images are decoded and
//! preprocessed on the request's thread, within [`ImageLimits`]; the encoder runs on the
//! engine thread, one image at a time.

use anyhow::Result;
use std::sync::{Arc, Mutex};
use tessera_llama::Model;
use tessera_mtmd::{Bitmap, Chunk, Encoder, ImageF32, ImageLimits, Mmproj, Projector};
use tessera_server::vision::{Piece, PromptImage, Vision, VisionError};

/// A projector serving a model's requests.
pub struct MtmdVision {
    model: Arc<Model>,
    mmproj: Arc<Mmproj>,
    encoder: Mutex<Encoder>,
    name: String,
}

impl MtmdVision {
    /// Loads the projector at `path` for `model` (see [`crate::mtmd_args::load_encoder`]).
    pub fn load(
        path: &std::path::Path,
        model: Arc<Model>,
        threads: usize,
        offload: bool,
    ) -> Result<MtmdVision> {
        let encoder = crate::mtmd_args::load_encoder(path, &model, threads, offload)?;
        let mmproj = encoder.mmproj_shared();
        let name = mmproj.projector.name().to_string();
        Ok(MtmdVision { model, mmproj, encoder: Mutex::new(encoder), name })
    }
}

impl Vision for MtmdVision {
    fn name(&self) -> &str {
        &self.name
    }

    fn n_embd(&self) -> usize {
        self.mmproj.n_mmproj_embd
    }

    fn non_causal(&self) -> bool {
        self.mmproj.projector == Projector::Gemma3
    }

    fn max_tokens(&self) -> usize {
        let h = &self.mmproj.hparams;
        match self.mmproj.projector {
            // Images of their own size: the pixel budget's worth of merged patches.
            Projector::Qwen25Vl => h.max_pixels / (h.patch_size * h.n_merge).pow(2),
            // One fixed-size image, tile or overview a chunk.
            _ => h.n_output_tokens(),
        }
    }

    fn tokenize(
        &self,
        text: &str,
        images: &[&[u8]],
        add_special: bool,
    ) -> Result<Vec<Piece>, VisionError> {
        let mut bitmaps = Vec::with_capacity(images.len());
        for (i, bytes) in images.iter().enumerate() {
            let b = Bitmap::decode(bytes, "", ImageLimits::default())
                .map_err(|e| VisionError { image: Some(i), message: reason(e) })?;
            bitmaps.push(b);
        }
        let chunks = tessera_mtmd::tokenize(
            &self.mmproj,
            &self.model.vocab,
            text,
            &bitmaps,
            add_special,
            true,
        )
        .map_err(|e| VisionError { image: None, message: reason(e) })?;
        // A part of an image (a tile) hashes as the image and its index.
        let hashes: Vec<u64> = bitmaps.iter().map(Bitmap::content_hash).collect();
        let part_hash = |(i, k): (usize, usize)| {
            let h = hashes.get(i).copied().unwrap_or_default();
            h ^ (k as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        };
        let mrope = self.model.hparams.rope_sections.is_some();
        Ok(chunks
            .into_iter()
            .map(|c| {
                let n_pos = c.n_pos(mrope);
                match c {
                    Chunk::Text(t) => Piece::Text(t),
                    Chunk::Image { entries, n_tokens, source, grid } => Piece::Image(PromptImage {
                        n_tokens,
                        n_pos,
                        grid,
                        hash: part_hash(source),
                        data: Arc::new(entries),
                    }),
                }
            })
            .collect())
    }

    fn encode(&self, image: &PromptImage) -> Result<Vec<f32>, String> {
        let Some(entries) = image.data.downcast_ref::<Vec<ImageF32>>() else {
            return Err("an image not prepared by this encoder".into());
        };
        let mut enc = self.encoder.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        for e in entries {
            out.extend(enc.encode(e).map_err(|e| e.to_string())?);
        }
        Ok(out)
    }
}

/// An error's reason without the "image :" prefix the empty name would leave (the server
/// names the request field instead).
fn reason(e: tessera_mtmd::MtmdError) -> String {
    match e {
        tessera_mtmd::MtmdError::Image { reason, .. } => reason,
        tessera_mtmd::MtmdError::Prompt { reason } => reason,
        other => other.to_string(),
    }
}
