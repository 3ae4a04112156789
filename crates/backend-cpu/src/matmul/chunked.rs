//! ggml's chunked loop: the output cut into 16x16 chunks claimed from a shared counter, each
//! computed with the type's dots (`dot_chunk`), or by dequantizing weight tiles for the types
//! without one (`dequant_chunk`).

use super::activations::{with_scratch, Activations};
use super::{for_each_claimed, kernel, row_targets, Kernel, Tile, VecDot, VecDot4, TILE};
use crate::{ComputeParams, SimdLevel, TensorRef};
use std::cell::RefCell;
use tessera_tensor::{quant, DType};

thread_local! {
    /// Per-thread f32 scratch: dequantized src0 tiles.
    static TILE_F32: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Cuts `nr0` × `nr1` outputs into chunks (ggml's scheme: 16×16, or 64 rows when either side
/// is one; one range per thread along the longer side when there are too few to balance) and
/// runs `f(rows0, rows1)` on the chunks this thread claims from the shared counter, which
/// `mul_mat` set to `p.nth` before its barrier.
pub(super) fn for_each_chunk(
    p: &ComputeParams,
    nr0: usize,
    nr1: usize,
    mut f: impl FnMut(std::ops::Range<usize>, std::ops::Range<usize>),
) {
    let chunk = if nr0 == 1 || nr1 == 1 { 64 } else { 16 };
    let (mut nchunk0, mut nchunk1) = (nr0.div_ceil(chunk), nr1.div_ceil(chunk));
    if nchunk0 * nchunk1 < 4 * p.nth {
        // Too few chunks to balance dynamically: one range per thread along the longer side.
        (nchunk0, nchunk1) = if nr0 > nr1 { (p.nth, 1) } else { (1, p.nth) };
    }
    let (dr0, dr1) = (nr0.div_ceil(nchunk0), nr1.div_ceil(nchunk1));
    for_each_claimed(p, nchunk0 * nchunk1, |current| {
        let (c0, c1) = (current % nchunk0, current / nchunk0);
        let rows0 = (dr0 * c0).min(nr0)..(dr0 * (c0 + 1)).min(nr0);
        let rows1 = (dr1 * c1).min(nr1)..(dr1 * (c1 + 1)).min(nr1);
        f(rows0, rows1);
    });
}

/// Computes dst rows `rows1` × columns `rows0` with a dot kernel, in 16×16 tiles. src1 rows
/// go in groups that share their src0 matrix: as wide as the register tile where one exists
/// (four src0 rows per call, the last few by the four-row kernel), else four at a time where
/// a four-row kernel exists, else one.
pub(super) fn dot_chunk(
    dst: &TensorRef,
    src0: &TensorRef,
    act: &Activations,
    (dot, dot4, tile): (VecDot, Option<VecDot4>, Option<Tile>),
    rows0: std::ops::Range<usize>,
    rows1: std::ops::Range<usize>,
) {
    let (k, nb01) = (src0.ne[0], src0.nb[1]);
    for t1 in rows1.clone().step_by(TILE) {
        let e1 = (t1 + TILE).min(rows1.end);
        // Each src1 row's src0 matrix, converted row and dst row, found once per tile (the
        // index arithmetic divides).
        let mut mats = [std::ptr::null(); TILE];
        let mut ys_all = [std::ptr::null(); TILE];
        let mut outs_all = [std::ptr::null_mut(); TILE];
        for r1 in t1..e1 {
            (mats[r1 - t1], outs_all[r1 - t1]) = row_targets(dst, src0, &act.src1, r1);
            ys_all[r1 - t1] = act.row(r1);
        }
        for t0 in rows0.clone().step_by(TILE) {
            let e0 = (t0 + TILE).min(rows0.end);
            let mut r1 = t1;
            while r1 < e1 {
                let i = r1 - t1;
                let w = mats[i];
                let fits = |g: usize| r1 + g <= e1 && mats[i + g - 1] == w;
                let group = match (tile, dot4) {
                    (Some(t), _) if fits(t.cols) => t.cols,
                    (_, Some(_)) if fits(4) => 4,
                    _ => 1,
                };
                let mut ys = [std::ptr::null(); 8];
                let mut outs = [std::ptr::null_mut(); 8];
                ys[..group].copy_from_slice(&ys_all[i..i + group]);
                outs[..group].copy_from_slice(&outs_all[i..i + group]);
                let mut r0 = t0;
                if let Some(t) = tile.filter(|t| t.cols == group) {
                    while r0 + 4 <= e0 {
                        let x0 = w.wrapping_add(r0 * nb01);
                        let xs = [
                            x0,
                            x0.wrapping_add(nb01),
                            x0.wrapping_add(2 * nb01),
                            x0.wrapping_add(3 * nb01),
                        ];
                        let at = outs.map(|o| o.wrapping_add(r0));
                        // SAFETY: src0 rows r0..r0+4 of matrix `w` and src1 rows r1..r1+group,
                        // as for the dots below; elements r0..r0+4 of those dst rows, which
                        // this thread owns.
                        unsafe { (t.f)(k, xs, &ys, &at) };
                        r0 += 4;
                    }
                }
                for r0 in r0..e0 {
                    let x = w.wrapping_add(r0 * nb01);
                    for (yc, oc) in ys[..group].chunks(4).zip(outs[..group].chunks(4)) {
                        match (dot4, <[*const u8; 4]>::try_from(yc)) {
                            (Some(dot4), Ok(y4)) => {
                                // SAFETY: src0 row r0 of matrix `w` and these src1 rows are
                                // within their tensors, each holding `k` elements of the
                                // kernel's types (checked by `check_shapes` / the conversion),
                                // and `kernel` picked a level this CPU runs.
                                let v = unsafe { dot4(k, x, y4) };
                                for (o, v) in oc.iter().zip(v) {
                                    // SAFETY: r0 < ne0 of the dst row; this thread owns it.
                                    unsafe { o.add(r0).write(v) };
                                }
                            }
                            _ => {
                                for (&y, o) in yc.iter().zip(oc) {
                                    // SAFETY: as above, for one src1 row.
                                    let v = unsafe { dot(k, x, y) };
                                    // SAFETY: r0 < ne0 of the dst row; this thread owns it.
                                    unsafe { o.add(r0).write(v) };
                                }
                            }
                        }
                    }
                }
                r1 += group;
            }
        }
    }
}

/// Computes a chunk for a weight type without a dot kernel: each tile of up to 16 src0 rows
/// is dequantized to f32 once per src0 matrix, then dotted with the f32 src1 rows.
pub(super) fn dequant_chunk(
    dst: &TensorRef,
    src0: &TensorRef,
    act: &Activations,
    simd: SimdLevel,
    rows0: std::ops::Range<usize>,
    rows1: std::ops::Range<usize>,
) {
    let (k, nb01) = (src0.ne[0], src0.nb[1]);
    let row_bytes = src0.row_size();
    let dot = kernel(DType::F32, simd);
    let Kernel::Dot { dot, .. } = dot else { unreachable!("F32 has a dot kernel") };
    with_scratch(&TILE_F32, TILE * k, |tile| {
        for t1 in rows1.clone().step_by(TILE) {
            let e1 = (t1 + TILE).min(rows1.end);
            for t0 in rows0.clone().step_by(TILE) {
                let e0 = (t0 + TILE).min(rows0.end);
                let mut cached: Option<*const u8> = None;
                for r1 in t1..e1 {
                    let (w, out) = row_targets(dst, src0, &act.src1, r1);
                    if cached != Some(w) {
                        for (r0, f) in (t0..e0).zip(tile.chunks_exact_mut(k)) {
                            // SAFETY: src0 row r0 of matrix `w` is `row_bytes` readable bytes.
                            let bytes = unsafe {
                                std::slice::from_raw_parts(w.wrapping_add(r0 * nb01), row_bytes)
                            };
                            quant::dequantize_row(src0.dtype, bytes, f)
                                .expect("dequantizable type (checked by supports) and exact sizes");
                        }
                        cached = Some(w);
                    }
                    let y = act.row(r1);
                    for (r0, f) in (t0..e0).zip(tile.chunks_exact(k)) {
                        // SAFETY: `f` holds k floats, `y` is an f32 src1 row of k elements,
                        // and the kernel's level runs on this CPU.
                        let v = unsafe { dot(k, f.as_ptr().cast(), y) };
                        // SAFETY: r0 < ne0 of the dst row; this thread owns the element.
                        unsafe { out.add(r0).write(v) };
                    }
                }
            }
        }
    });
}
