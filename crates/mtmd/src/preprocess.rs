//! From a decoded image to what the encoder reads, per projector, as llama.cpp's image
//! preprocessors (tools/mtmd/mtmd-image.cpp) do it: resize (or slice), then `x / 255` and
//! `(x − mean) / std` per channel, in f32.

use crate::resize::{resize, Filter, Fit};
use crate::{Bitmap, Mmproj, Projector, VisionHparams};

/// An image as the encoder reads it: f32, rows top to bottom, channels interleaved (llama.cpp's
/// `clip_image_f32`).
#[derive(Debug, Clone, PartialEq)]
pub struct ImageF32 {
    /// Width in pixels.
    pub width: usize,
    /// Height in pixels.
    pub height: usize,
    /// `width · height · 3` values.
    pub data: Vec<f32>,
}

impl ImageF32 {
    /// `clip_image_f32::from_u8` then `normalize`: `(x / 255 − mean) / std`.
    pub fn normalized(img: &Bitmap, mean: [f32; 3], std: [f32; 3]) -> ImageF32 {
        let data = img
            .rgb
            .chunks_exact(3)
            .flat_map(|p| (0..3).map(move |c| (f32::from(p[c]) / 255.0 - mean[c]) / std[c]))
            .collect();
        ImageF32 { width: img.width, height: img.height, data }
    }
}

/// The images one input image becomes (one for the fixed-size projectors; tiles and an
/// overview for the slicing ones).
pub fn preprocess(mmproj: &Mmproj, img: &Bitmap) -> Vec<ImageF32> {
    match mmproj.projector {
        Projector::Gemma3 => vec![fixed_size(&mmproj.hparams, img, Filter::Bilinear)],
    }
}

/// llama.cpp's `mtmd_image_preprocessor_fixed_size`: fitted into the model's square with
/// black padding (`PAD_CEIL`), then normalised.
fn fixed_size(h: &VisionHparams, img: &Bitmap, filter: Filter) -> ImageF32 {
    let side = h.image_size;
    let sized = resize(img, side, side, filter, Fit::PadCeil([0, 0, 0]));
    ImageF32::normalized(&sized, h.image_mean, h.image_std)
}
