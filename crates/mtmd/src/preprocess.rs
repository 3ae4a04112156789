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

/// What one input image becomes: the encoder's inputs, and for the slicing projectors the
/// tile grid.
#[derive(Debug, Clone, PartialEq)]
pub struct Preprocessed {
    /// One image for the fixed-size projectors; for the slicing ones the overview first, then
    /// the tiles row by row.
    pub entries: Vec<ImageF32>,
    /// The tiles' (columns, rows), where the image was cut.
    pub grid: Option<(usize, usize)>,
}

/// The encoder's inputs made of `img`, as the projector's llama.cpp preprocessor makes them.
pub fn preprocess(mmproj: &Mmproj, img: &Bitmap) -> Preprocessed {
    match mmproj.projector {
        Projector::Gemma3 => Preprocessed {
            entries: vec![fixed_size(&mmproj.hparams, img, Filter::Bilinear)],
            grid: None,
        },
        Projector::Idefics3 => idefics3(&mmproj.hparams, img),
        Projector::Qwen25Vl => {
            let h = &mmproj.hparams;
            let (w, ht) = dyn_size(h, img.width, img.height);
            let sized = resize(img, w, ht, Filter::Bicubic, Fit::PadCeil([0, 0, 0]));
            Preprocessed {
                entries: vec![ImageF32::normalized(&sized, h.image_mean, h.image_std)],
                grid: None,
            }
        }
    }
}

/// llama.cpp's `mtmd_image_preprocessor_dyn_size` target: `calc_size_preserved_ratio` with
/// the merged patch as the alignment and the pixel budget, in its float arithmetic.
fn dyn_size(h: &VisionHparams, width: usize, height: usize) -> (usize, usize) {
    let f = (h.patch_size * h.n_merge) as f32;
    let by = |x: f32, op: fn(f32) -> f32| (op(x / f) as i64 * f as i64).max(0) as usize;
    let align = f as usize;
    let (wf, hf) = (width as f32, height as f32);
    let mut w_bar = align.max(by(wf, f32::round));
    let mut h_bar = align.max(by(hf, f32::round));
    if h.max_pixels > 0 && h_bar * w_bar > h.max_pixels {
        let beta = (hf * wf / h.max_pixels as f32).sqrt();
        h_bar = align.max(by(hf / beta, f32::floor));
        w_bar = align.max(by(wf / beta, f32::floor));
    } else if h.min_pixels > 0 && h_bar * w_bar < h.min_pixels {
        let beta = (h.min_pixels as f32 / (hf * wf)).sqrt();
        h_bar = by(hf * beta, f32::ceil);
        w_bar = by(wf * beta, f32::ceil);
    }
    (w_bar, h_bar)
}

/// llama.cpp's `mtmd_image_preprocessor_fixed_size`: fitted into the model's square with
/// black padding (`PAD_CEIL`), then normalised.
fn fixed_size(h: &VisionHparams, img: &Bitmap, filter: Filter) -> ImageF32 {
    let side = h.image_size;
    let sized = resize(img, side, side, filter, Fit::PadCeil([0, 0, 0]));
    ImageF32::normalized(&sized, h.image_mean, h.image_std)
}

/// llama.cpp's `mtmd_image_preprocessor_idefics3`: with a longest side in the file, the image
/// is resized (Lanczos) to it keeping its aspect (the other side made even), stretched up to
/// whole tiles, cut into them, and the overview is that image shrunk to one tile; without
/// one (older files), llama.cpp's llava-uhd slicing: the size rounded to whole tiles
/// (bicubic, padded), the overview resized from the original (bicubic).
fn idefics3(h: &VisionHparams, img: &Bitmap) -> Preprocessed {
    let tile = h.image_size;
    let (w, ht) = (img.width, img.height);
    let (refined, overview) = if h.longest_edge > 0 {
        let l = h.longest_edge;
        let aspect = w as f64 / ht as f64;
        // As llama.cpp: truncated, then made even (at least 1, where llama.cpp would make an
        // empty image of an extreme aspect).
        let even = |x: usize| (x + x % 2).max(1);
        let (rw, rh) = if w >= ht {
            (l, even((l as f64 / aspect) as usize))
        } else {
            (even((l as f64 * aspect) as usize), l)
        };
        let (gx, gy) = (rw.div_ceil(tile), rh.div_ceil(tile));
        let resized = resize(img, rw, rh, Filter::Lanczos, Fit::Stretch);
        let refined = resize(&resized, gx * tile, gy * tile, Filter::Lanczos, Fit::Stretch);
        let overview = resize(&refined, tile, tile, Filter::Lanczos, Fit::Stretch);
        (refined, overview)
    } else {
        // calc_size_preserved_ratio with the tile as the alignment: rounded to nearest.
        let round = |x: usize| ((x as f32 / tile as f32).round() as usize * tile).max(tile);
        let (rw, rh) = (round(w), round(ht));
        let overview = resize(img, tile, tile, Filter::Bicubic, Fit::Stretch);
        let refined = resize(img, rw, rh, Filter::Bicubic, Fit::PadCeil([0, 0, 0]));
        (refined, overview)
    };
    let (gx, gy) = (refined.width / tile, refined.height / tile);
    let norm = |b: &Bitmap| ImageF32::normalized(b, h.image_mean, h.image_std);
    let mut entries = vec![norm(&overview)];
    for y in 0..gy {
        for x in 0..gx {
            entries.push(norm(&crop(&refined, x * tile, y * tile, tile, tile)));
        }
    }
    Preprocessed { entries, grid: Some((gx, gy)) }
}

/// The `w × h` pixels of `img` from `(x, y)` (inside it).
fn crop(img: &Bitmap, x: usize, y: usize, w: usize, h: usize) -> Bitmap {
    let mut rgb = Vec::with_capacity(w * h * 3);
    for row in y..y + h {
        let start = (row * img.width + x) * 3;
        rgb.extend_from_slice(&img.rgb[start..start + w * 3]);
    }
    Bitmap { width: w, height: h, rgb }
}
