//! Decoded images: 8-bit RGB, as llama.cpp's `mtmd_helper_bitmap_init_from_buf` makes them with
//! stb_image (`req_comp = 3`): grey is repeated over the channels, alpha is dropped (not
//! blended), 16-bit samples keep their high byte, an animation gives its first frame.
//! PNG, JPEG, GIF and WebP (which stb_image lacks) are decoded by the `image` crate.
//!
//! Images are untrusted: the format is sniffed from the bytes, and the declared size is checked
//! against [`ImageLimits`] before any pixel is decoded.

use crate::{MtmdError, Result};
use image::{DynamicImage, ImageReader};
use std::io::Cursor;

/// An 8-bit RGB image, rows top to bottom, pixels interleaved (`[r, g, b, r, ...]`).
#[derive(Clone, PartialEq, Eq)]
pub struct Bitmap {
    /// Width in pixels.
    pub width: usize,
    /// Height in pixels.
    pub height: usize,
    /// `width · height · 3` bytes.
    pub rgb: Vec<u8>,
}

impl std::fmt::Debug for Bitmap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Bitmap({}x{})", self.width, self.height)
    }
}

/// Sizes an image may have (checked on the declared size, before decoding).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageLimits {
    /// Largest width or height in pixels.
    pub max_side: u32,
    /// Largest width × height.
    pub max_pixels: u64,
}

impl Default for ImageLimits {
    /// 16384 pixels a side, 33.5 megapixels (an 8K photo fits; a 50-megapixel one does not).
    fn default() -> Self {
        ImageLimits { max_side: 16384, max_pixels: 1 << 25 }
    }
}

impl Bitmap {
    /// A bitmap from raw RGB bytes (checked to be `width · height · 3`).
    pub fn from_rgb(width: usize, height: usize, rgb: Vec<u8>) -> Result<Bitmap> {
        if width == 0 || height == 0 || rgb.len() != width * height * 3 {
            return Err(MtmdError::Image {
                what: "raw RGB".into(),
                reason: format!("{} bytes for {width}x{height} pixels", rgb.len()),
            });
        }
        Ok(Bitmap { width, height, rgb })
    }

    /// Decodes an encoded image (`what` names it in errors: a file, a request field).
    pub fn decode(bytes: &[u8], what: &str, limits: ImageLimits) -> Result<Bitmap> {
        let err = |reason: String| MtmdError::Image { what: what.into(), reason };
        let reader = ImageReader::new(Cursor::new(bytes))
            .with_guessed_format()
            .map_err(|e| err(format!("cannot read: {e}")))?;
        let Some(format) = reader.format() else {
            return Err(err("not a PNG, JPEG, GIF or WebP image".into()));
        };
        let (w, h) =
            reader.into_dimensions().map_err(|e| err(format!("corrupt {format:?} header: {e}")))?;
        if w == 0 || h == 0 {
            return Err(err(format!("{w}x{h} pixels")));
        }
        if w > limits.max_side
            || h > limits.max_side
            || u64::from(w) * u64::from(h) > limits.max_pixels
        {
            return Err(err(format!(
                "{w}x{h} pixels ({:.1} megapixels) is over the limit of {} a side and {:.1} \
                 megapixels",
                (u64::from(w) * u64::from(h)) as f64 / 1e6,
                limits.max_side,
                limits.max_pixels as f64 / 1e6
            )));
        }
        let mut reader = ImageReader::new(Cursor::new(bytes))
            .with_guessed_format()
            .map_err(|e| err(format!("cannot read: {e}")))?;
        let mut l = image::Limits::default();
        l.max_image_width = Some(limits.max_side);
        l.max_image_height = Some(limits.max_side);
        reader.limits(l);
        let img = reader.decode().map_err(|e| err(format!("corrupt {format:?} data: {e}")))?;
        Ok(to_rgb(img))
    }

    /// A 64-bit hash of the pixels and the size (FNV-1a): equal images hash equal, whatever
    /// file format carried them (llama-server keys cached images by such a hash).
    pub fn content_hash(&self) -> u64 {
        const PRIME: u64 = 0x0000_0100_0000_01b3;
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let size = [(self.width as u64).to_le_bytes(), (self.height as u64).to_le_bytes()];
        for &b in size.iter().flatten().chain(&self.rgb) {
            h = (h ^ u64::from(b)).wrapping_mul(PRIME);
        }
        h
    }

    /// Reads and decodes an image file.
    pub fn open(path: &std::path::Path, limits: ImageLimits) -> Result<Bitmap> {
        let what = path.display().to_string();
        let bytes = std::fs::read(path)
            .map_err(|e| MtmdError::Image { what: what.clone(), reason: e.to_string() })?;
        Bitmap::decode(&bytes, &what, limits)
    }
}

/// stb_image's conversion to 3 channels of 8 bits.
fn to_rgb(img: DynamicImage) -> Bitmap {
    let (width, height) = (img.width() as usize, img.height() as usize);
    let rgb = match img {
        DynamicImage::ImageLuma16(_)
        | DynamicImage::ImageLumaA16(_)
        | DynamicImage::ImageRgb16(_)
        | DynamicImage::ImageRgba16(_) => {
            // stb_image keeps the high byte of 16-bit samples (the image crate would round).
            let wide = img.to_rgb16();
            wide.into_raw().into_iter().map(|v| (v >> 8) as u8).collect()
        }
        other => other.to_rgb8().into_raw(),
    };
    Bitmap { width, height, rgb }
}
