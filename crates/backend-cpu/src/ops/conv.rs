//! IM2COL and POOL_2D (`ggml_compute_forward_im2col`, `ggml_compute_forward_pool_2d`): the
//! same values in the same order as ggml's (an image's samples copied, converted to F16 with
//! round-to-nearest-even where the result is F16; a pooled window summed in f32 row by row,
//! then divided by the kernel's area, padding included).

use crate::{ComputeParams, TensorRef};
use tessera_tensor::graph::PoolOp;
use tessera_tensor::quant as float;
use tessera_tensor::DType;

/// Element `i` of the row at `p` (F32 or F16).
///
/// # Safety
/// `p` must point to a row of at least `i + 1` packed elements of `dtype`.
unsafe fn read(p: *const u8, dtype: DType, i: usize) -> f32 {
    match dtype {
        // SAFETY: caller.
        DType::F16 => float::f16_to_f32(unsafe { p.cast::<u16>().add(i).read_unaligned() }),
        // SAFETY: caller.
        _ => unsafe { p.cast::<f32>().add(i).read_unaligned() },
    }
}

/// IM2COL: `dst` `[IC·KH·KW, OW, OH, N]` (2-D) from image `b`; `k` is the kernel (its shape
/// only). Threads take input channels in turn, as ggml's.
pub(crate) fn im2col(
    p: &ComputeParams,
    dst: &TensorRef,
    k: &TensorRef,
    b: &TensorRef,
    [s0, s1, p0, p1, d0, d1]: [i32; 6],
    is_2d: bool,
) {
    let (n, ic, ih, iw) =
        if is_2d { (b.ne[3], b.ne[2], b.ne[1], b.ne[0]) } else { (b.ne[2], b.ne[1], 1, b.ne[0]) };
    let (kh, kw) = if is_2d { (k.ne[1], k.ne[0]) } else { (1, k.ne[0]) };
    let (oh, ow) = if is_2d { (dst.ne[2], dst.ne[1]) } else { (1, dst.ne[1]) };
    // Bytes between images, between channels, between rows of one channel.
    let (ofs_n, ofs_c, ofs_row) =
        if is_2d { (b.nb[3], b.nb[2], b.nb[1]) } else { (b.nb[2], b.nb[1], 0) };
    let chw = ic * kh * kw;
    let f16 = dst.dtype == DType::F16;
    let (s0, s1, p0, p1, d0, d1) =
        (s0 as i64, s1 as i64, p0 as i64, p1 as i64, d0 as i64, d1 as i64);
    for in_ in 0..n {
        for ioh in 0..oh {
            for iow in 0..ow {
                let row = (in_ * oh * ow + ioh * ow + iow) * chw;
                for iic in (p.ith..ic).step_by(p.nth) {
                    for ikh in 0..kh {
                        for ikw in 0..kw {
                            let iiw = iow as i64 * s0 + ikw as i64 * d0 - p0;
                            let iih = ioh as i64 * s1 + ikh as i64 * d1 - p1;
                            let v = if iih < 0 || iih >= ih as i64 || iiw < 0 || iiw >= iw as i64 {
                                0.0
                            } else {
                                let off = in_ * ofs_n + iic * ofs_c + iih as usize * ofs_row;
                                // SAFETY: (iiw, iih, iic, in_) is inside b (checked above); its
                                // rows are packed (supports).
                                unsafe { read(b.data.add(off), b.dtype, iiw as usize) }
                            };
                            let at = row + iic * kh * kw + ikh * kw + ikw;
                            // SAFETY: `at` < the number of elements of the contiguous dst; each
                            // element is written by the one thread owning its channel.
                            unsafe {
                                if f16 {
                                    dst.data.cast::<u16>().add(at).write(float::f32_to_f16(v));
                                } else {
                                    dst.data.cast::<f32>().add(at).write(v);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// POOL_2D of every plane of `a` into the contiguous F32 `dst`; planes dealt to threads.
pub(crate) fn pool_2d(
    p: &ComputeParams,
    dst: &TensorRef,
    a: &TensorRef,
    op: PoolOp,
    [k0, k1, s0, s1, p0, p1]: [i32; 6],
) {
    let (px, py) = (dst.ne[0], dst.ne[1]);
    let ka = (k0 * k1) as f32;
    for plane in p.split(a.ne[2] * a.ne[3]) {
        let (i2, i3) = (plane % a.ne[2], plane / a.ne[2]);
        for oy in 0..py {
            for ox in 0..px {
                let mut res = match op {
                    PoolOp::Avg => 0.0f32,
                    PoolOp::Max => f32::MIN,
                };
                let ix = ox as i64 * i64::from(s0) - i64::from(p0);
                let iy = oy as i64 * i64::from(s1) - i64::from(p1);
                for ky in 0..i64::from(k1) {
                    let y = iy + ky;
                    if y < 0 || y >= a.ne[1] as i64 {
                        continue;
                    }
                    // SAFETY: row (y, i2, i3) of a.
                    let row = unsafe { a.row_ptr(y as usize, i2, i3) };
                    for kx in 0..i64::from(k0) {
                        let j = ix + kx;
                        if j < 0 || j >= a.ne[0] as i64 {
                            continue;
                        }
                        // SAFETY: element j < ne0 of a packed row (supports).
                        let v = unsafe { read(row, a.dtype, j as usize) };
                        res = match op {
                            PoolOp::Avg => res + v,
                            PoolOp::Max => v.max(res),
                        };
                    }
                }
                if op == PoolOp::Avg {
                    res /= ka;
                }
                let at = ((plane * py) + oy) * px + ox;
                // SAFETY: dst is contiguous F32 of ne0·ne1 per plane; the plane is this thread's.
                unsafe { dst.data.cast::<f32>().add(at).write(res) };
            }
        }
    }
}
