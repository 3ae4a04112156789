//! llama.cpp's image resizing (`img_tool::resize` in tools/mtmd/mtmd-image.cpp): Pillow's
//! separable resampling with its fixed-point arithmetic (22 fraction bits, weights rounded
//! half away from zero, a horizontal pass then a vertical one, each result clipped to 0..=255),
//! and the aspect-preserving resize into a padded canvas.

use crate::Bitmap;

/// The resampling filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filter {
    /// Triangle, support 1.
    Bilinear,
    /// Cubic with a = -0.5 (Pillow's), support 2.
    Bicubic,
    /// Lanczos-3.
    Lanczos,
}

/// How an image is fitted into a target size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// Stretched to the target.
    Stretch,
    /// Scaled to fit inside, sizes rounded up, centred on a canvas of the colour
    /// (llama.cpp's `PAD_CEIL`).
    PadCeil([u8; 3]),
    /// As `PadCeil` with sizes and offsets rounded to nearest (`PAD_NEAREST`).
    PadNearest([u8; 3]),
}

const PRECISION_BITS: u32 = 32 - 8 - 2;

impl Filter {
    fn support(self) -> f64 {
        match self {
            Filter::Bilinear => 1.0,
            Filter::Bicubic => 2.0,
            Filter::Lanczos => 3.0,
        }
    }

    fn weight(self, x: f64) -> f64 {
        match self {
            Filter::Lanczos => {
                if (-3.0..3.0).contains(&x) {
                    sinc(x) * sinc(x / 3.0)
                } else {
                    0.0
                }
            }
            Filter::Bilinear => {
                let x = x.abs();
                if x < 1.0 {
                    1.0 - x
                } else {
                    0.0
                }
            }
            Filter::Bicubic => {
                let x = x.abs();
                let a = -0.5;
                if x < 1.0 {
                    ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
                } else if x < 2.0 {
                    (((x - 5.0) * x + 8.0) * x - 4.0) * a
                } else {
                    0.0
                }
            }
        }
    }
}

fn sinc(v: f64) -> f64 {
    if v == 0.0 {
        return 1.0;
    }
    let pi_v = v * std::f64::consts::PI;
    pi_v.sin() / pi_v
}

/// Per output pixel: the first input pixel, how many, and their fixed-point weights.
struct Coeffs {
    ksize: usize,
    bounds: Vec<(usize, usize)>,
    weights: Vec<i32>,
}

fn precompute(filter: Filter, in_size: usize, out_size: usize) -> Coeffs {
    let scale = in_size as f64 / out_size as f64;
    let filterscale = scale.max(1.0);
    let support = filter.support() * filterscale;
    let ksize = support.ceil() as usize * 2 + 1;
    let mut pre = vec![0f64; out_size * ksize];
    let mut bounds = Vec::with_capacity(out_size);
    for xx in 0..out_size {
        let center = (xx as f64 + 0.5) * scale;
        let ss = 1.0 / filterscale;
        // C's truncating casts of non-negative values.
        let xmin = ((center - support + 0.5) as i64).max(0) as usize;
        let xmax = ((center + support + 0.5) as i64).min(in_size as i64) as usize - xmin;
        let row = &mut pre[xx * ksize..(xx + 1) * ksize];
        let mut ww = 0.0;
        for (x, w) in row.iter_mut().enumerate().take(xmax) {
            *w = filter.weight(((x + xmin) as f64 - center + 0.5) * ss);
            ww += *w;
        }
        if ww != 0.0 {
            row.iter_mut().take(xmax).for_each(|w| *w /= ww);
        }
        bounds.push((xmin, xmax));
    }
    let fxp = f64::from(1u32 << PRECISION_BITS);
    let weights =
        pre.iter().map(|&w| (w * fxp + if w < 0.0 { -0.5 } else { 0.5 }) as i32).collect();
    Coeffs { ksize, bounds, weights }
}

fn clip8(v: i32) -> u8 {
    v.clamp(0, 255) as u8
}

fn horizontal(src: &[u8], in_w: usize, h: usize, out_w: usize, c: &Coeffs) -> Vec<u8> {
    let mut out = vec![0u8; out_w * h * 3];
    for y in 0..h {
        let src_row = &src[y * in_w * 3..(y + 1) * in_w * 3];
        let dst_row = &mut out[y * out_w * 3..(y + 1) * out_w * 3];
        for (xx, &(xmin, xcnt)) in c.bounds.iter().enumerate() {
            let k = &c.weights[xx * c.ksize..];
            let mut ss = [1i32 << (PRECISION_BITS - 1); 3];
            for x in 0..xcnt {
                let p = &src_row[(xmin + x) * 3..(xmin + x) * 3 + 3];
                for (s, &v) in ss.iter_mut().zip(p) {
                    *s = s.wrapping_add(i32::from(v).wrapping_mul(k[x]));
                }
            }
            for (ch, s) in ss.iter().enumerate() {
                dst_row[xx * 3 + ch] = clip8(s >> PRECISION_BITS);
            }
        }
    }
    out
}

fn vertical(src: &[u8], w: usize, out_h: usize, c: &Coeffs) -> Vec<u8> {
    let row_len = w * 3;
    let mut out = vec![0u8; row_len * out_h];
    let mut acc = vec![0i32; row_len];
    for (yy, &(ymin, ycnt)) in c.bounds.iter().enumerate() {
        let k = &c.weights[yy * c.ksize..];
        acc.iter_mut().for_each(|a| *a = 1 << (PRECISION_BITS - 1));
        for y in 0..ycnt {
            let src_row = &src[(ymin + y) * row_len..(ymin + y + 1) * row_len];
            for (a, &v) in acc.iter_mut().zip(src_row) {
                *a = a.wrapping_add(i32::from(v).wrapping_mul(k[y]));
            }
        }
        for (o, &a) in out[yy * row_len..(yy + 1) * row_len].iter_mut().zip(&acc) {
            *o = clip8(a >> PRECISION_BITS);
        }
    }
    out
}

/// Pillow's resampling of `img` to `width × height` (both at least 1).
pub fn resample(img: &Bitmap, width: usize, height: usize, filter: Filter) -> Bitmap {
    let (w, h) = (img.width, img.height);
    let rgb = match (width != w, height != h) {
        (true, true) => {
            let t = horizontal(&img.rgb, w, h, width, &precompute(filter, w, width));
            vertical(&t, width, height, &precompute(filter, h, height))
        }
        (true, false) => horizontal(&img.rgb, w, h, width, &precompute(filter, w, width)),
        (false, true) => vertical(&img.rgb, w, height, &precompute(filter, h, height)),
        (false, false) => img.rgb.clone(),
    };
    Bitmap { width, height, rgb }
}

/// `img` fitted into `width × height` as `fit` says (llama.cpp's `img_tool::resize`).
pub fn resize(img: &Bitmap, width: usize, height: usize, filter: Filter, fit: Fit) -> Bitmap {
    if (img.width, img.height) == (width, height) {
        return img.clone();
    }
    let (color, nearest) = match fit {
        Fit::Stretch => return resample(img, width, height, filter),
        Fit::PadCeil(c) => (c, false),
        Fit::PadNearest(c) => (c, true),
    };
    // In f32, as llama.cpp computes them.
    let scale = (width as f32 / img.width as f32).min(height as f32 / img.height as f32);
    let fit_side = |side: usize, target: usize| {
        let v = side as f32 * scale;
        (if nearest { v.round() } else { v.ceil() } as usize).min(target)
    };
    let (new_w, new_h) = (fit_side(img.width, width), fit_side(img.height, height));
    let inner = resample(img, new_w.max(1), new_h.max(1), filter);
    let offset = |target: usize, new: usize| {
        if nearest {
            ((target - new) as f32 / 2.0).round() as usize
        } else {
            (target - new) / 2
        }
    };
    let (ox, oy) = (offset(width, inner.width), offset(height, inner.height));
    let mut rgb: Vec<u8> = color.iter().copied().cycle().take(width * height * 3).collect();
    for y in 0..inner.height {
        let src = &inner.rgb[y * inner.width * 3..(y + 1) * inner.width * 3];
        let start = ((y + oy) * width + ox) * 3;
        rgb[start..start + src.len()].copy_from_slice(src);
    }
    Bitmap { width, height, rgb }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flat_image_stays_flat_under_every_filter_and_fit() {
        let img = Bitmap { width: 13, height: 7, rgb: [200, 17, 90].repeat(13 * 7) };
        for filter in [Filter::Bilinear, Filter::Bicubic, Filter::Lanczos] {
            for (w, h) in [(13, 7), (40, 21), (5, 3), (13, 30), (1, 1)] {
                let out = resize(&img, w, h, filter, Fit::Stretch);
                assert_eq!(out.rgb, [200, 17, 90].repeat(w * h), "{filter:?} to {w}x{h}");
            }
            // Fitted into a square: the image's colour inside, the padding's outside.
            for fit in [Fit::PadCeil([1, 2, 3]), Fit::PadNearest([1, 2, 3])] {
                let out = resize(&img, 26, 26, filter, fit);
                let inside = out.rgb.chunks(3).filter(|p| *p == [200, 17, 90]).count();
                let pad = out.rgb.chunks(3).filter(|p| *p == [1, 2, 3]).count();
                assert_eq!((inside, pad), (26 * 14, 26 * 12), "{filter:?} {fit:?}");
            }
        }
    }
}
