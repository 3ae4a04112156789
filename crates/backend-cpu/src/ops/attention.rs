//! SOFT_MAX (with mask, scale and ALiBi) and FLASH_ATTN_EXT.
//!
//! Flash attention follows ggml's CPU kernel: each query row is converted once to K's dot type
//! (F16 for an F16 cache, Q8_0 for a Q8_0 cache), then one pass over the KV cells keeps a
//! running maximum, a running sum and the V accumulator (online softmax), skipping cells the
//! mask sets to -inf. The scores are never materialized. With an F16 V the accumulator is
//! f16, rounded after every update as ggml's `VKQ16` (so results track llama.cpp's); other V
//! types accumulate in f32.

use super::rowio::{load, load_row, row_at, store, with_rows};
use super::{attention_f16, vec_f16, vexp};
use crate::matmul::dot_f16;
use crate::matmul::RowDot;
use crate::{ComputeParams, TensorRef};
use std::cell::RefCell;
use tessera_tensor::quant as float;
use tessera_tensor::DType;

/// ggml's ALiBi slope of head `h` of `n_head` (1 when `max_bias` is 0).
pub(super) fn alibi_slope(max_bias: f32, h: usize, n_head: usize) -> f32 {
    if max_bias <= 0.0 {
        return 1.0;
    }
    let n_head_log2 = 1u32 << (n_head as u32).ilog2();
    let m0 = 2f32.powf(-max_bias / n_head_log2 as f32);
    let m1 = 2f32.powf(-(max_bias / 2.0) / n_head_log2 as f32);
    if (h as u32) < n_head_log2 {
        m0.powi(h as i32 + 1)
    } else {
        m1.powi(2 * (h as i32 - n_head_log2 as i32) + 1)
    }
}

/// Reads mask element `i` of a row at `row` (F16 or F32).
///
/// # Safety
/// `row` must be a mask row holding more than `i` elements `nb0` bytes apart.
unsafe fn mask_at(row: *const u8, dtype: DType, nb0: usize, i: usize) -> f32 {
    // SAFETY: caller.
    let p = unsafe { row.add(i * nb0) };
    match dtype {
        // SAFETY: caller.
        DType::F16 => float::f16_to_f32(unsafe { p.cast::<u16>().read_unaligned() }),
        // SAFETY: caller.
        _ => unsafe { p.cast::<f32>().read_unaligned() },
    }
}

/// `softmax(a * scale + slope * mask)` per row (`ggml_compute_forward_soft_max_f32`); the sum
/// of exponentials in f64.
pub(crate) fn soft_max(
    p: &ComputeParams,
    dst: &TensorRef,
    a: &TensorRef,
    [mask, sinks]: [Option<TensorRef>; 2],
    scale: f32,
    max_bias: f32,
) {
    let ne0 = a.ne[0];
    with_rows([ne0, 0, 0, 0], |[x, _, _, _]| {
        for r in p.split(a.n_rows()) {
            let (i1, i2, i3, src) = row_at(a, r);
            // SAFETY: row r of a.
            unsafe { load(src, a.dtype, a.nb[0], x) };
            x.iter_mut().for_each(|v| *v *= scale);
            if let Some(m) = &mask {
                let slope = alibi_slope(max_bias, i2, a.ne[2]);
                // SAFETY: the builder checked that the mask has >= ne1 rows and broadcasts
                // over dims 2 and 3.
                let mrow = unsafe { m.row_ptr(i1, i2 % m.ne[2], i3 % m.ne[3]) };
                for (i, v) in x.iter_mut().enumerate() {
                    // SAFETY: the mask row holds ne0 elements.
                    *v += slope * unsafe { mask_at(mrow, m.dtype, m.nb[0], i) };
                }
            }
            let mut max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            // A sink joins the softmax as one more logit without a value (ggml: in the max,
            // then `expf(sink - max)` in the sum).
            let sink = sinks.as_ref().map(|s| sink_at(s, i2));
            if let Some(s) = sink {
                max = if max > s { max } else { s };
            }
            if max == f32::NEG_INFINITY {
                // Every position masked: no distribution; zeros rather than NaN.
                x.iter_mut().for_each(|v| *v = 0.0);
            } else {
                let mut sum = vexp::soft_max(x, max, p.simd);
                if let Some(s) = sink {
                    sum += f64::from((s - max).exp());
                }
                let inv = (1.0 / sum) as f32;
                x.iter_mut().for_each(|v| *v *= inv);
            }
            // SAFETY: this thread's dst row.
            unsafe { store(dst.row_ptr(i1, i2, i3), dst.dtype, dst.nb[0], x) };
        }
    });
}

/// Head `h`'s sink (F32 `[n_head]`).
pub(super) fn sink_at(sinks: &TensorRef, h: usize) -> f32 {
    assert!(h < sinks.ne[0], "attention sinks: head {h} of {}", sinks.ne[0]);
    // SAFETY: element h < ne[0] of the F32 sinks (supports checks the type).
    unsafe { sinks.data.add(h * sinks.nb[0]).cast::<f32>().read_unaligned() }
}

/// ggml's sink correction at the end of one flash-attention row: the sink joins the running
/// max and sum (`S = S·ms + vs`, one FMA where `fused`), the accumulator rescaled when the sink
/// is the new max. Returns the new sum.
pub(super) fn apply_sink(sink: f32, max: f32, sum: f32, acc: &mut [f32], fused: bool) -> f32 {
    let (ms, vs) = if sink > max {
        let ms = (max - sink).exp();
        acc.iter_mut().for_each(|a| *a *= ms);
        (ms, 1.0)
    } else {
        (1.0, (sink - max).exp())
    };
    if fused {
        sum.mul_add(ms, vs)
    } else {
        sum * ms + vs
    }
}

thread_local! {
    /// Per-thread bytes: the query row converted to K's dot type.
    static QCONV: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// Per-thread f16 accumulator of an F16 V.
    static VKQ16: RefCell<Vec<u16>> = const { RefCell::new(Vec::new()) };
}

/// One query row's attention over a range of KV cells, as ggml's
/// `ggml_compute_forward_flash_attn_ext_f16_one_chunk` computes it: the shapes, types and
/// kernels of one FLASH_ATTN_EXT node, chosen once.
pub(super) struct RowAttention<'t> {
    q: &'t TensorRef,
    k: &'t TensorRef,
    v: &'t TensorRef,
    mask: Option<&'t TensorRef>,
    /// Query rows, heads, KV cells, heads per KV head.
    n_q: usize,
    n_head: usize,
    n_kv: usize,
    group: usize,
    max_bias: f32,
    softcap: f32,
    /// The score scale (divided by the cap when soft-capping, as ggml).
    kq_scale: f32,
    kdot: Option<RowDot>,
    f32dot: RowDot,
    /// K's dot kernel, else F32's over dequantized rows.
    qdot: RowDot,
    v_plain: bool,
    v16: bool,
    /// An F16 K uses ggml_vec_dot_f16's summation order.
    k16: bool,
    /// `S = S*ms + vs` is one FMA (ggml's C contracted where the CPU has FMA).
    pub(super) fused: bool,
}

/// A thread's buffers for [`RowAttention::attend`].
pub(super) struct RowScratch<'b> {
    qf: &'b mut [f32],
    /// The V accumulator as f32 (`dv`): the result of `attend`.
    pub(super) acc: &'b mut [f32],
    vrow: &'b mut [f32],
    krow: &'b mut [f32],
    qc: &'b mut Vec<u8>,
    acc16: &'b mut [u16],
}

impl<'t> RowAttention<'t> {
    /// The node's kernel; `params` = [scale, max_bias, softcap].
    pub(super) fn new(
        p: &ComputeParams,
        [q, k, v]: [&'t TensorRef; 3],
        mask: Option<&'t TensorRef>,
        [scale, max_bias, softcap]: [f32; 3],
    ) -> Self {
        let kdot = RowDot::new(k.dtype, p.simd);
        let f32dot = RowDot::new(DType::F32, p.simd).expect("F32 has a dot kernel");
        RowAttention {
            q,
            k,
            v,
            mask,
            n_q: q.ne[1],
            n_head: q.ne[2],
            n_kv: k.ne[1],
            group: q.ne[2] / k.ne[2],
            max_bias,
            softcap,
            kq_scale: if softcap != 0.0 { scale / softcap } else { scale },
            kdot,
            f32dot,
            qdot: kdot.unwrap_or(f32dot),
            v_plain: matches!(v.dtype, DType::F32 | DType::F16),
            v16: v.dtype == DType::F16,
            k16: k.dtype == DType::F16,
            fused: p.simd >= crate::SimdLevel::Avx2 && crate::simd::has_fma(),
        }
    }

    /// Runs `f` with this thread's buffers.
    pub(super) fn with_scratch<R>(&self, f: impl FnOnce(&mut RowScratch) -> R) -> R {
        let (d, dv) = (self.q.ne[0], self.v.ne[0]);
        with_rows([d, dv, dv, d], |[qf, acc, vrow, krow]| {
            QCONV.with(|cell| {
                VKQ16.with(|cell16| {
                    let mut qc = cell.borrow_mut();
                    let mut acc16v = cell16.borrow_mut();
                    if acc16v.len() < dv {
                        acc16v.resize(dv, 0);
                    }
                    let need = self.qdot.converted_size(d).max(d * 4);
                    if qc.len() < need {
                        qc.resize(need, 0);
                    }
                    let acc16 = &mut acc16v[..dv];
                    f(&mut RowScratch { qf, acc, vrow, krow, qc: &mut qc, acc16 })
                })
            })
        })
    }

    /// One query row (`iq` 0, batch 0) of every head of `heads` (which share a KV head) against
    /// KV cells `cells`, at once (`attention_f16::attend_group`): head `h`'s V sum goes to
    /// `acc[(h - heads.start)·dv..]`, its (max, sum) to `out`. `false` where the group kernel
    /// does not apply (another cache type, ALiBi, a mask that differs per head, no kernel):
    /// run the heads through [`attend`](Self::attend).
    pub(super) fn attend_heads(
        &self,
        p: &ComputeParams,
        b: &mut RowScratch,
        heads: std::ops::Range<usize>,
        cells: std::ops::Range<usize>,
        acc: &mut [f32],
        out: &mut [(f32, f32)],
    ) -> bool {
        let (q, k, v, d) = (self.q, self.k, self.v, self.q.ne[0]);
        let hk = heads.start / self.group;
        let same_kv = (heads.end - 1) / self.group == hk;
        let packed = k.nb[0] == 2 && v.nb[0] == 2;
        if !(self.k16 && self.v16 && packed && same_kv && self.max_bias <= 0.0) {
            return false;
        }
        let mask = match self.mask {
            None => None,
            Some(m) if m.dtype == DType::F16 && m.nb[0] == 2 && m.ne[2] == 1 && m.ne[3] == 1 => {
                // SAFETY: row 0 of the mask (the one query row), shared by every head.
                Some(unsafe { m.row_ptr(0, 0, 0) }.cast::<u16>().cast_const())
            }
            Some(_) => return false,
        };
        let mut qcs: Vec<Vec<u8>> = Vec::with_capacity(heads.len());
        for h in heads.clone() {
            // SAFETY: (0, h, 0) is a row of q.
            unsafe { load(q.row_ptr(0, h, 0), q.dtype, q.nb[0], b.qf) };
            self.qdot.convert(b.qf, b.qc);
            qcs.push(b.qc[..d * 2].to_vec());
        }
        let rows: Vec<attention_f16::Row> = qcs
            .iter()
            .map(|qc| attention_f16::Row {
                q: qc.as_ptr().cast(),
                // SAFETY: cell 0 of the KV head's rows (the loop stays inside k and v).
                k: unsafe { k.row_ptr(0, hk, 0) },
                // SAFETY: as above.
                v: unsafe { v.row_ptr(0, hk, 0) },
                k_stride: k.nb[1],
                v_stride: v.nb[1],
                mask,
                slope: 1.0,
                kq_scale: self.kq_scale,
                softcap: self.softcap,
            })
            .collect();
        // SAFETY: every row's pointers cover the cells (< n_kv); acc and out sized per head.
        unsafe { attention_f16::attend_group(&rows, d, v.ne[0], acc, out, cells, p.simd) }
    }

    /// Query row `iq` of head `h` (batch `i3`) against KV cells `cells`: leaves the
    /// unnormalised V sum in `b.acc` (f32; from the f16 accumulator for an F16 V) and returns
    /// the running (max, sum). Cells the mask sets to -inf are skipped.
    pub(super) fn attend(
        &self,
        p: &ComputeParams,
        b: &mut RowScratch,
        (iq, h, i3): (usize, usize, usize),
        cells: std::ops::Range<usize>,
    ) -> (f32, f32) {
        let (q, k, v, d) = (self.q, self.k, self.v, self.q.ne[0]);
        let hk = h / self.group;
        // SAFETY: (iq, h, i3) is a row of q.
        unsafe { load(q.row_ptr(iq, h, i3), q.dtype, q.nb[0], b.qf) };
        self.qdot.convert(b.qf, b.qc);
        let slope = alibi_slope(self.max_bias, h, self.n_head);
        let mrow = self.mask.map(|m| {
            // SAFETY: the mask has >= n_q rows and broadcasts over dims 2, 3.
            (unsafe { m.row_ptr(iq, h % m.ne[2], i3 % m.ne[3]) }, m)
        });
        // An F16 cache with packed rows and an F16 (or no) mask: the same loop without calls.
        let packed = k.nb[0] == 2 && v.nb[0] == 2;
        let mask16 = match &mrow {
            Some((row, m)) if m.dtype == DType::F16 && m.nb[0] == 2 => {
                Some(Some(row.cast::<u16>().cast_const()))
            }
            Some(_) => None,
            None => Some(None),
        };
        if let (true, true, true, Some(mask)) = (self.k16, self.v16, packed, mask16) {
            let row = attention_f16::Row {
                q: b.qc.as_ptr().cast(),
                // SAFETY: cell 0 of the KV head's rows (the loop stays inside k and v).
                k: unsafe { k.row_ptr(0, hk, i3) },
                // SAFETY: as above.
                v: unsafe { v.row_ptr(0, hk, i3) },
                k_stride: k.nb[1],
                v_stride: v.nb[1],
                mask,
                slope,
                kq_scale: self.kq_scale,
                softcap: self.softcap,
            };
            // SAFETY: the rows of every cell of `cells` (< n_kv) are inside k, v and the mask.
            if let Some(r) = unsafe { attention_f16::attend(&row, d, b.acc, cells.clone(), p.simd) }
            {
                return r;
            }
        }
        let (mut max, mut sum) = (f32::NEG_INFINITY, 0f32);
        let fused = self.fused;
        b.acc.iter_mut().for_each(|a| *a = 0.0);
        b.acc16.iter_mut().for_each(|a| *a = 0);
        for ic in cells {
            let mv = match &mrow {
                // SAFETY: mask rows hold n_kv elements.
                Some((row, m)) => slope * unsafe { mask_at(*row, m.dtype, m.nb[0], ic) },
                None => 0.0,
            };
            if mv == f32::NEG_INFINITY {
                continue;
            }
            // SAFETY: (ic, hk, i3) is a row of k (and of v below).
            let kp = unsafe { k.row_ptr(ic, hk, i3) };
            let mut s = if self.k16 {
                // SAFETY: k's row holds d f16 values; qc holds q converted to d f16.
                unsafe { dot_f16::dot(d, kp.cast(), b.qc.as_ptr().cast(), p.simd) }
            } else if self.kdot.is_some() {
                // SAFETY: k's row holds d elements of its type; qc was converted from d
                // floats by the same kernel.
                unsafe { self.qdot.dot(d, kp, b.qc.as_ptr()) }
            } else {
                // SAFETY: k's packed row of d elements.
                unsafe { load_row(kp, k.dtype, k.nb[0], b.krow) };
                // SAFETY: both hold d floats.
                unsafe { self.f32dot.dot(d, b.krow.as_ptr().cast(), b.qc.as_ptr()) }
            };
            s *= self.kq_scale;
            if self.softcap != 0.0 {
                s = self.softcap * s.tanh();
            }
            s += mv;
            let (ms, vs) = if s > max {
                let ms = if max == f32::NEG_INFINITY { 0.0 } else { (max - s).exp() };
                max = s;
                (ms, 1.0)
            } else {
                (1.0, (s - max).exp())
            };
            // SAFETY: v's row (ic, hk, i3) holds dv elements.
            let vp = unsafe { v.row_ptr(ic, hk, i3) };
            if self.v16 {
                if ms != 1.0 {
                    vec_f16::scale(b.acc16, ms, p.simd);
                }
                // SAFETY: the F16 row holds dv packed values (supports checks packing).
                unsafe { vec_f16::mad(b.acc16, vp.cast(), vs, p.simd) };
            } else {
                if self.v_plain {
                    // SAFETY: as above.
                    unsafe { load(vp, v.dtype, v.nb[0], b.vrow) };
                } else {
                    // SAFETY: v's packed row.
                    unsafe { load_row(vp, v.dtype, v.nb[0], b.vrow) };
                }
                if ms != 1.0 {
                    b.acc.iter_mut().for_each(|a| *a *= ms);
                }
                for (a, &x) in b.acc.iter_mut().zip(b.vrow.iter()) {
                    *a = if fused { x.mul_add(vs, *a) } else { *a + vs * x };
                }
            }
            // ggml's `S = S*ms + vs`, contracted to one FMA where the CPU has it.
            sum = if fused { sum.mul_add(ms, vs) } else { sum * ms + vs };
        }
        if self.v16 {
            for (a, &h) in b.acc.iter_mut().zip(b.acc16.iter()) {
                *a = float::f16_to_f32(h);
            }
        }
        (max, sum)
    }
}

/// `softmax(q·kᵀ·scale [softcapped] + slope·mask) · v` for every query row, head and batch
/// (`ggml_compute_forward_flash_attn_ext_f16`), a row at a time. q `[D, n_q, n_head, ne3]` F32,
/// k `[D, n_kv, n_head_kv, ne3]`, v `[DV, n_kv, n_head_kv, ne3]`, mask `[n_kv, >= n_q, m2,
/// m3]`; dst `[DV, n_head, n_q, ne3]` F32. `params` = [scale, max_bias, softcap].
pub(crate) fn flash_attn_ext(
    p: &ComputeParams,
    dst: &TensorRef,
    qkv: [&TensorRef; 3],
    [mask, sinks]: [Option<TensorRef>; 2],
    params: [f32; 3],
) {
    let a = RowAttention::new(p, qkv, mask.as_ref(), params);
    let (n_q, n_head) = (a.n_q, a.n_head);
    a.with_scratch(|b| {
        for r in p.split(n_q * n_head * qkv[0].ne[3]) {
            let (iq, h, i3) = (r % n_q, (r / n_q) % n_head, r / (n_q * n_head));
            let (max, mut sum) = a.attend(p, b, (iq, h, i3), 0..a.n_kv);
            if let Some(s) = &sinks {
                sum = apply_sink(sink_at(s, h), max, sum, b.acc, a.fused);
            }
            let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
            b.acc.iter_mut().for_each(|x| *x *= inv);
            // SAFETY: dst row (h, iq, i3) belongs to this thread (one per query row).
            unsafe { store(dst.row_ptr(h, iq, i3), dst.dtype, dst.nb[0], b.acc) };
        }
    });
}
