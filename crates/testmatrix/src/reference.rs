//! The reference evaluator: every op of the graph builder, written out plainly in `f64`.
//!
//! It shares no code with any backend. Sources are read from an [`Image`] (dequantized by the
//! reference dequantizers), results are computed in `f64` from the mathematical definition (exact
//! tanh-GELU, erf-GELU with an `f64` erf, `pow`-per-index RoPE frequencies, ...) and stored back
//! in the destination's type, so a backend is measured against the op, not against another
//! implementation's rounding. What ggml's CPU does differently on purpose (F16 tables, activations
//! quantized to the weight's dot type) is what the per-op NMSE thresholds allow for.

use crate::image::{storage_of, write_values, Image};
use std::f64::consts::PI;
use tessera_tensor::graph::{
    Context, GluOp, Graph, Op, PoolOp, RopeMode, RopeParams, TensorId, UnaryOp,
};

/// Values of one tensor in logical order with its shape.
struct Dense {
    ne: [usize; 4],
    v: Vec<f64>,
}

impl Dense {
    fn at(&self, i0: usize, i1: usize, i2: usize, i3: usize) -> f64 {
        self.v[((i3 * self.ne[2] + i2) * self.ne[1] + i1) * self.ne[0] + i0]
    }
    fn row(&self, i1: usize, i2: usize, i3: usize) -> &[f64] {
        let s = ((i3 * self.ne[2] + i2) * self.ne[1] + i1) * self.ne[0];
        &self.v[s..s + self.ne[0]]
    }
}

/// Visits every index of `ne` in logical order.
fn indices(ne: [usize; 4]) -> impl Iterator<Item = [usize; 4]> {
    (0..ne[3]).flat_map(move |i3| {
        (0..ne[2]).flat_map(move |i2| {
            (0..ne[1]).flat_map(move |i1| (0..ne[0]).map(move |i0| [i0, i1, i2, i3]))
        })
    })
}

/// Runs every node of `graph` in order on `img`, which must hold the graph's leafs; each node's
/// result is stored in its storage in `img`.
///
/// # Panics
/// On an op or type combination the evaluator does not know (a bug in a case definition).
pub fn eval_graph(ctx: &Context, graph: &Graph, img: &mut Image) {
    for &id in graph.nodes() {
        if !ctx.get(id).op.is_view() {
            eval_node(ctx, id, img);
        }
    }
}

fn eval_node(ctx: &Context, id: TensorId, img: &mut Image) {
    let d = ctx.get(id);
    let src = |slot: usize| d.src[slot].map(|s| Dense { ne: ctx.get(s).ne, v: img.read(ctx, s) });
    let a = src(0).expect("every op has a first source");
    let out: Vec<f64> = match d.op {
        Op::GetRows => get_rows(&a, &src(1).expect("indexes")),
        Op::Add => binary(&a, &src(1).expect("src1"), |x, y| x + y),
        Op::Sub => binary(&a, &src(1).expect("src1"), |x, y| x - y),
        Op::Mul => binary(&a, &src(1).expect("src1"), |x, y| x * y),
        Op::Div => binary(&a, &src(1).expect("src1"), |x, y| x / y),
        Op::Scale { scale, bias } => {
            a.v.iter().map(|&x| x * f64::from(scale) + f64::from(bias)).collect()
        }
        Op::Hadamard => rows_map(&a, |r, o| {
            // H[i][j] = (−1)^popcount(i & j) / sqrt(n).
            let n = r.len();
            let s = 1.0 / (n as f64).sqrt();
            o.extend((0..n).map(|i| {
                let dot: f64 = r
                    .iter()
                    .enumerate()
                    .map(|(j, x)| if (i & j).count_ones() % 2 == 0 { *x } else { -*x })
                    .sum();
                dot * s
            }));
        }),
        Op::RmsNorm { eps } => rows_map(&a, |r, o| {
            let ms = r.iter().map(|x| x * x).sum::<f64>() / r.len() as f64;
            let s = 1.0 / (ms + f64::from(eps)).sqrt();
            o.extend(r.iter().map(|x| x * s));
        }),
        Op::Norm { eps } => rows_map(&a, |r, o| {
            let mean = r.iter().sum::<f64>() / r.len() as f64;
            let var = r.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / r.len() as f64;
            let s = 1.0 / (var + f64::from(eps)).sqrt();
            o.extend(r.iter().map(|x| (x - mean) * s));
        }),
        Op::MulMat => mul_mat(&a, &src(1).expect("src1")),
        Op::MulMatId => mul_mat_id(&a, &src(1).expect("src1"), &src(2).expect("ids")),
        Op::Argsort { descending } => rows_map(&a, |r, o| {
            let mut idx: Vec<usize> = (0..r.len()).collect();
            idx.sort_by(|&i, &j| r[i].total_cmp(&r[j]));
            if descending {
                idx.reverse();
            }
            o.extend(idx.iter().map(|&i| i as f64));
        }),
        Op::AddId => {
            let (b, ids) = (src(1).expect("bias"), src(2).expect("ids"));
            indices(a.ne)
                .map(|[i0, i1, i2, i3]| {
                    a.at(i0, i1, i2, i3) + b.at(i0, ids.at(i1, i2, 0, 0) as usize, 0, 0)
                })
                .collect()
        }
        Op::SwiGluOai { alpha, limit } => {
            let up = src(1).expect("up");
            let (alpha, limit) = (f64::from(alpha), f64::from(limit));
            a.v.iter()
                .zip(&up.v)
                .map(|(&g, &u)| {
                    let x = g.min(limit);
                    let y = u.clamp(-limit, limit);
                    x / (1.0 + (-alpha * x).exp()) * (y + 1.0)
                })
                .collect()
        }
        Op::Clamp { min, max } => {
            a.v.iter().map(|&x| x.min(f64::from(max)).max(f64::from(min))).collect()
        }
        Op::Rope(p) => rope(&a, &src(1).expect("positions"), src(2).as_ref(), &p),
        Op::SoftMax { scale, max_bias } => {
            soft_max(&a, src(1).as_ref(), src(2).as_ref(), scale, max_bias)
        }
        Op::Cpy | Op::Cont | Op::Dup => a.v.clone(),
        Op::SetRows => {
            set_rows(ctx, id, &src(1).expect("rows"), &src(2).expect("indexes"), img);
            return;
        }
        Op::Unary(u) => a.v.iter().map(|&x| unary(u, x)).collect(),
        Op::Glu { op, swapped } => glu(&a, src(1).as_ref(), op, swapped),
        Op::FlashAttnExt { scale, max_bias, softcap } => flash_attn(
            &a,
            &src(1).expect("k"),
            &src(2).expect("v"),
            [src(3).as_ref(), src(4).as_ref()],
            scale,
            max_bias,
            softcap,
        ),
        Op::Concat { dim } => concat(&a, &src(1).expect("src1"), dim, d.ne),
        Op::Im2Col { s0, s1, p0, p1, d0, d1, is_2d } => {
            im2col(&a, &src(1).expect("image"), [s0, s1, p0, p1, d0, d1], is_2d, d.ne)
        }
        Op::Pool2d { op, k0, k1, s0, s1, p0, p1 } => {
            pool_2d(&a, op, [k0, k1, s0, s1, p0, p1], d.ne)
        }
        Op::SumRows => rows_map(&a, |r, o| o.push(r.iter().sum())),
        Op::Argmax => rows_map(&a, |r, o| {
            let mut best = 0;
            for (i, &x) in r.iter().enumerate() {
                if x > r[best] {
                    best = i;
                }
            }
            o.push(best as f64);
        }),
        other => panic!("the reference has no {} (a view op reached compute)", other.name()),
    };
    img.write(ctx, id, &out);
}

fn rows_map(a: &Dense, mut f: impl FnMut(&[f64], &mut Vec<f64>)) -> Vec<f64> {
    let mut out = Vec::with_capacity(a.v.len());
    for r in a.v.chunks(a.ne[0]) {
        f(r, &mut out);
    }
    out
}

fn get_rows(a: &Dense, idx: &Dense) -> Vec<f64> {
    let mut out = Vec::new();
    for [_, i10, i11, i12] in indices([1, idx.ne[0], idx.ne[1], idx.ne[2]]) {
        let r = idx.at(i10, i11, i12, 0) as usize;
        out.extend_from_slice(a.row(r, i11, i12));
    }
    out
}

fn binary(a: &Dense, b: &Dense, f: impl Fn(f64, f64) -> f64) -> Vec<f64> {
    indices(a.ne)
        .map(|[i0, i1, i2, i3]| {
            let (n, m) = (a.at(i0, i1, i2, i3), &b.ne);
            f(n, b.at(i0 % m[0], i1 % m[1], i2 % m[2], i3 % m[3]))
        })
        .collect()
}

fn mul_mat_id(a: &Dense, b: &Dense, ids: &Dense) -> Vec<f64> {
    indices([a.ne[1], ids.ne[0], ids.ne[1], 1])
        .map(|[i0, e, t, _]| {
            let x = ids.at(e, t, 0, 0) as usize;
            (0..a.ne[0]).map(|k| a.at(k, i0, x, 0) * b.at(k, e % b.ne[1], t, 0)).sum()
        })
        .collect()
}

fn mul_mat(a: &Dense, b: &Dense) -> Vec<f64> {
    let (r2, r3) = (b.ne[2] / a.ne[2], b.ne[3] / a.ne[3]);
    indices([a.ne[1], b.ne[1], b.ne[2], b.ne[3]])
        .map(|[i0, i1, i2, i3]| {
            let (w, x) = (a.row(i0, i2 / r2, i3 / r3), b.row(i1, i2, i3));
            w.iter().zip(x).map(|(p, q)| p * q).sum()
        })
        .collect()
}

/// YaRN correction dims, computed in f32 exactly as `ggml_rope_yarn_corr_dims` (their floor and
/// ceil decide which dims are ramped, so they must not differ by rounding).
fn yarn_corr_dims(p: &RopeParams) -> [f32; 2] {
    let n_dims = p.n_dims as f32;
    let corr = |n_rot: f32| {
        n_dims * (p.n_ctx_orig as f32 / (n_rot * 2.0 * std::f32::consts::PI)).ln()
            / (2.0 * p.freq_base.ln())
    };
    [corr(p.beta_fast).floor().max(0.0), corr(p.beta_slow).ceil().min(n_dims - 1.0)]
}

/// The position and angle exponent of pair `i` of a token (`pos(k)`: its k-th position):
/// `ggml_rope_multi`'s section rules for the multi modes.
fn rope_angle_source(p: &RopeParams, i: usize, pos: &dyn Fn(usize) -> f64) -> (f64, usize) {
    let Some(s) = p.mode.sections() else { return (pos(0), i) };
    let s = s.map(|x| x as usize);
    let sector = i % (s[0] + s[1] + s[2] + s[3]);
    let starts = [0, s[0], s[0] + s[1], s[0] + s[1] + s[2]];
    let k = match p.mode {
        RopeMode::Imrope(_) => match sector % 3 {
            1 if sector < 3 * s[1] => 1,
            2 if sector < 3 * s[2] => 2,
            0 if sector < 3 * s[0] => 0,
            _ => 3,
        },
        // Sections in order: t, h, w, then the extra position for the rest.
        _ => match sector {
            x if x >= starts[3] => 3,
            x if x >= starts[2] => 2,
            x if x >= starts[1] => 1,
            _ => 0,
        },
    };
    // The vision mode starts each section's angles afresh.
    let steps = if matches!(p.mode, RopeMode::Vision(_)) { sector - starts[k] } else { i };
    (pos(k), steps)
}

fn rope(a: &Dense, pos: &Dense, ff: Option<&Dense>, p: &RopeParams) -> Vec<f64> {
    let n_dims = p.n_dims;
    let corr = yarn_corr_dims(p);
    let (fs, ext) = (f64::from(p.freq_scale), f64::from(p.ext_factor));
    let mut out = a.v.clone();
    let ne0 = a.ne[0];
    let n_pairs = if matches!(p.mode, RopeMode::Vision(_)) { ne0 / 2 } else { n_dims / 2 };
    for (r, row) in out.chunks_mut(ne0).enumerate() {
        let i2 = (r / a.ne[1]) % a.ne[2];
        let position = |k: usize| pos.v[i2 + k * a.ne[2]];
        for i in 0..n_pairs {
            let f = ff.map_or(1.0, |f| f.v[i]);
            let (position, steps) = rope_angle_source(p, i, &position);
            let extrap =
                position * f64::from(p.freq_base).powf(-2.0 * steps as f64 / n_dims as f64) / f;
            let interp = fs * extrap;
            let mut mscale = f64::from(p.attn_factor);
            let theta = if ext != 0.0 {
                let y = (i as f32 - corr[0]) / (corr[1] - corr[0]).max(0.001);
                let ramp = f64::from(1.0 - y.clamp(0.0, 1.0)) * ext;
                mscale *= 1.0 + 0.1 * (1.0 / fs).ln();
                interp * (1.0 - ramp) + extrap * ramp
            } else {
                interp
            };
            let (sin, cos) = (theta.sin() * mscale, theta.cos() * mscale);
            let (j0, j1) = match p.mode {
                RopeMode::Norm => (2 * i, 2 * i + 1),
                RopeMode::Neox | RopeMode::Mrope(_) | RopeMode::Imrope(_) => (i, i + n_dims / 2),
                RopeMode::Vision(_) => (i, i + n_dims),
            };
            let (x0, x1) = (row[j0], row[j1]);
            row[j0] = x0 * cos - x1 * sin;
            row[j1] = x0 * sin + x1 * cos;
        }
    }
    out
}

/// ALiBi slope of head `h` of `n_head` (`max_bias = 0`: 1).
fn alibi_slope(max_bias: f32, h: usize, n_head: usize) -> f64 {
    if max_bias <= 0.0 {
        return 1.0;
    }
    let log2 = 1usize << n_head.ilog2();
    let mb = f64::from(max_bias);
    if h < log2 {
        2f64.powf(-mb / log2 as f64).powi(h as i32 + 1)
    } else {
        2f64.powf(-(mb / 2.0) / log2 as f64).powi(2 * (h - log2) as i32 + 1)
    }
}

/// The softmax of `w` in place; a `sink` is one more logit in the denominator, with no value.
fn softmax_in_place(w: &mut [f64], sink: Option<f64>) {
    let max = w.iter().copied().chain(sink).fold(f64::NEG_INFINITY, f64::max);
    let mut sum = sink.map_or(0.0, |s| (s - max).exp());
    for x in w.iter_mut() {
        *x = (*x - max).exp();
        sum += *x;
    }
    for x in w.iter_mut() {
        *x /= sum;
    }
}

fn soft_max(
    a: &Dense,
    mask: Option<&Dense>,
    sinks: Option<&Dense>,
    scale: f32,
    max_bias: f32,
) -> Vec<f64> {
    let mut out = Vec::with_capacity(a.v.len());
    for [_, i1, i2, i3] in indices([1, a.ne[1], a.ne[2], a.ne[3]]) {
        let slope = alibi_slope(max_bias, i2, a.ne[2]);
        let mut w: Vec<f64> = a.row(i1, i2, i3).iter().map(|x| x * f64::from(scale)).collect();
        if let Some(m) = mask {
            let mr = m.row(i1, i2 % m.ne[2], i3 % m.ne[3]);
            for (x, mv) in w.iter_mut().zip(mr) {
                *x += slope * mv;
            }
        }
        softmax_in_place(&mut w, sinks.map(|s| s.v[i2]));
        out.extend_from_slice(&w);
    }
    out
}

fn set_rows(ctx: &Context, id: TensorId, b: &Dense, idx: &Dense, img: &mut Image) {
    let d = ctx.get(id);
    let (root, base) = storage_of(ctx, id);
    let mut row_desc = d.clone();
    row_desc.ne = [d.ne[0], 1, 1, 1];
    let mut bytes = img.root(root).expect("SET_ROWS destination").to_vec();
    for [_, i1, i2, i3] in indices([1, b.ne[1], b.ne[2], b.ne[3]]) {
        let r = idx.at(i1, i2 % idx.ne[1], i3 % idx.ne[2], 0) as usize;
        let at = base + r * d.nb[1] + i2 * d.nb[2] + i3 * d.nb[3];
        write_values(&row_desc, &mut bytes, at, b.row(i1, i2, i3));
    }
    img.insert(root, bytes);
}

/// `erf` in f64: Taylor series near 0, continued fraction for `erfc` further out (both to
/// well below 1e-13 relative, far tighter than any threshold here).
pub fn erf(x: f64) -> f64 {
    let ax = x.abs();
    let r = if ax < 2.5 {
        let (mut term, mut sum, x2) = (ax, ax, ax * ax);
        for n in 1..200 {
            term *= -x2 / n as f64;
            let t = term / (2 * n + 1) as f64;
            sum += t;
            if t.abs() < 1e-17 * sum.abs() {
                break;
            }
        }
        sum * 2.0 / PI.sqrt()
    } else if ax < 27.0 {
        // erfc(x) = exp(-x^2)/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + 2/(x + ...))))).
        let mut f = ax;
        for k in (1..120).rev() {
            f = ax + (k as f64 / 2.0) / f;
        }
        1.0 - (-ax * ax).exp() / PI.sqrt() / f
    } else {
        1.0
    };
    r.copysign(x)
}

fn gelu_tanh(x: f64) -> f64 {
    0.5 * x * (1.0 + ((2.0 / PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
}

fn unary(op: UnaryOp, x: f64) -> f64 {
    match op {
        UnaryOp::Gelu => gelu_tanh(x),
        UnaryOp::GeluErf => 0.5 * x * (1.0 + erf(x / 2f64.sqrt())),
        UnaryOp::Silu => x / (1.0 + (-x).exp()),
        UnaryOp::Tanh => x.tanh(),
    }
}

fn glu(a: &Dense, b: Option<&Dense>, op: GluOp, swapped: bool) -> Vec<f64> {
    let act = |x: f64| match op {
        GluOp::SwiGlu => unary(UnaryOp::Silu, x),
        GluOp::GeGlu => gelu_tanh(x),
    };
    match b {
        Some(b) => a.v.iter().zip(&b.v).map(|(&g, &u)| act(g) * u).collect(),
        None => rows_map(a, |r, o| {
            let (first, second) = r.split_at(r.len() / 2);
            let (g, u) = if swapped { (second, first) } else { (first, second) };
            o.extend(g.iter().zip(u).map(|(&g, &u)| act(g) * u));
        }),
    }
}

fn flash_attn(
    q: &Dense,
    k: &Dense,
    v: &Dense,
    [mask, sinks]: [Option<&Dense>; 2],
    scale: f32,
    max_bias: f32,
    softcap: f32,
) -> Vec<f64> {
    let (n_q, n_head, n_kv, dv) = (q.ne[1], q.ne[2], k.ne[1], v.ne[0]);
    let group = n_head / k.ne[2];
    let mut out = vec![0f64; dv * n_head * n_q * q.ne[3]];
    for [_, iq, h, i3] in indices([1, n_q, n_head, q.ne[3]]) {
        let slope = alibi_slope(max_bias, h, n_head);
        let qr = q.row(iq, h, i3);
        let mut w = vec![f64::NEG_INFINITY; n_kv];
        for (ic, wc) in w.iter_mut().enumerate() {
            let mv = mask.map_or(0.0, |m| slope * m.at(ic, iq, h % m.ne[2], i3 % m.ne[3]));
            if mv == f64::NEG_INFINITY {
                continue;
            }
            let dot: f64 = qr.iter().zip(k.row(ic, h / group, i3)).map(|(x, y)| x * y).sum();
            let mut s = dot * f64::from(scale);
            if softcap != 0.0 {
                s = f64::from(softcap) * (s / f64::from(softcap)).tanh();
            }
            *wc = s + mv;
        }
        softmax_in_place(&mut w, sinks.map(|s| s.v[h]));
        let o = ((i3 * n_q + iq) * n_head + h) * dv;
        for (ic, &p) in w.iter().enumerate() {
            for (x, &vv) in out[o..o + dv].iter_mut().zip(v.row(ic, h / group, i3)) {
                *x += p * vv;
            }
        }
    }
    out
}

fn concat(a: &Dense, b: &Dense, dim: usize, ne: [usize; 4]) -> Vec<f64> {
    indices(ne)
        .map(|mut i| {
            if i[dim] < a.ne[dim] {
                a.at(i[0], i[1], i[2], i[3])
            } else {
                i[dim] -= a.ne[dim];
                b.at(i[0], i[1], i[2], i[3])
            }
        })
        .collect()
}

/// `dst[c·KH·KW + ky·KW + kx, ow, oh, n] = b[ow·s0 + kx·d0 − p0, oh·s1 + ky·d1 − p1, c, n]`
/// (0 outside); 1-D: `dst[c·K + kx, ow, n] = b[ow·s0 + kx·d0 − p0, c, n]`.
fn im2col(
    k: &Dense,
    b: &Dense,
    [s0, s1, p0, p1, d0, d1]: [i32; 6],
    is_2d: bool,
    ne: [usize; 4],
) -> Vec<f64> {
    let (kw, kh) = (k.ne[0] as i64, if is_2d { k.ne[1] as i64 } else { 1 });
    let [s0, s1, p0, p1, d0, d1] = [s0, s1, p0, p1, d0, d1].map(i64::from);
    indices(ne)
        .map(|[i0, ow, oh_or_n, n2]| {
            let i0 = i0 as i64;
            let (c, ky, kx) = (i0 / (kh * kw), (i0 / kw) % kh, i0 % kw);
            let x = ow as i64 * s0 + kx * d0 - p0;
            if is_2d {
                let y = oh_or_n as i64 * s1 + ky * d1 - p1;
                if x < 0 || y < 0 || x >= b.ne[0] as i64 || y >= b.ne[1] as i64 {
                    return 0.0;
                }
                b.at(x as usize, y as usize, c as usize, n2)
            } else {
                if x < 0 || x >= b.ne[0] as i64 {
                    return 0.0;
                }
                b.at(x as usize, c as usize, oh_or_n, 0)
            }
        })
        .collect()
}

/// Average (over the whole window, padding included) or maximum of each window.
fn pool_2d(a: &Dense, op: PoolOp, [k0, k1, s0, s1, p0, p1]: [i32; 6], ne: [usize; 4]) -> Vec<f64> {
    indices(ne)
        .map(|[ox, oy, i2, i3]| {
            let mut acc = if op == PoolOp::Avg { 0.0 } else { f64::NEG_INFINITY };
            for ky in 0..k1 {
                let y = (oy as i64) * i64::from(s1) - i64::from(p1) + i64::from(ky);
                for kx in 0..k0 {
                    let x = (ox as i64) * i64::from(s0) - i64::from(p0) + i64::from(kx);
                    if x < 0 || y < 0 || x >= a.ne[0] as i64 || y >= a.ne[1] as i64 {
                        continue;
                    }
                    let v = a.at(x as usize, y as usize, i2, i3);
                    acc = if op == PoolOp::Avg { acc + v } else { acc.max(v) };
                }
            }
            if op == PoolOp::Avg {
                acc / f64::from(k0 * k1)
            } else {
                acc
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_matches_known_values() {
        // erf(0.5), erf(1), erf(2), erf(3), erf(5) to 15 digits.
        for (x, e) in [
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (2.0, 0.995_322_265_018_952_7),
            (3.0, 0.999_977_909_503_001_4),
            (5.0, 0.999_999_999_998_462_5),
        ] {
            assert!((erf(x) - e).abs() < 1e-14, "erf({x}) = {} not {e}", erf(x));
            assert!((erf(-x) + e).abs() < 1e-14);
        }
    }

    #[test]
    fn alibi_slopes_follow_ggml() {
        // 8 heads, max_bias 8: slopes 2^-1, 2^-2, ..., 2^-8.
        for h in 0..8 {
            assert!((alibi_slope(8.0, h, 8) - 2f64.powi(-(h as i32) - 1)).abs() < 1e-15);
        }
        assert_eq!(alibi_slope(0.0, 3, 8), 1.0);
    }
}
