//! The launches of fused windows ([`crate::plan::fusion_windows`]) the kernels take
//! ([`crate::plan::fusable`]).

use super::args::{grid_for, per_row, warps, Arg, THREADS};
use super::nodes::{one, Pending, Resolver};
use crate::plan::{FusionKind, Q8Input, Window};
use crate::types::row_of;
use crate::CudaError;
use tessera_tensor::graph::{GluOp, Op, TensorId};

impl Resolver<'_> {
    /// The launch of a window [`crate::plan::fusable`] accepted (`q8`: a product's Q8_1 input,
    /// for GateUpGlu; `q8_out`: where a norm or gate/up window also writes its output's Q8_1
    /// blocks, [`crate::plan::fold_q8_into_writer`]).
    pub(crate) fn fused(
        &self,
        w: &Window,
        q8: Option<Q8Input>,
        q8_out: Option<u64>,
    ) -> Result<Vec<Pending>, CudaError> {
        let q8_arg = Arg::Ptr(q8_out.unwrap_or(0));
        // The norm windows: the RMS_NORM's epsilon and the rows of its source.
        let norm_of = |norm: TensorId| {
            let d = self.ctx.get(norm);
            let Op::RmsNorm { eps } = d.op else {
                return Err(CudaError::Driver(format!("{:?} window without its RMS_NORM", w.kind)));
            };
            let a = self.ctx.get(d.src[0].expect("a source"));
            Ok((eps, a.ne[1] * a.ne[2] * a.ne[3]))
        };
        let (entry, rows, args) = match w.kind {
            FusionKind::GateUpGlu => return self.gate_up_glu(w, q8, q8_out),
            FusionKind::ProductGroup => return self.product_group(w, q8),
            FusionKind::AttnInputs => {
                let (rq, rk, sk, sv) = (w.nodes[0], w.nodes[1], w.nodes[3], w.nodes[4]);
                let mut args = vec![
                    self.arg(rq)?.into(),
                    self.src(rq, 0)?.into(),
                    self.arg(sk)?.into(),
                    self.src(sk, 2)?.into(),
                    self.src(rk, 0)?.into(),
                    self.arg(sv)?.into(),
                    self.src(sv, 2)?.into(),
                    self.src(sv, 1)?.into(),
                ];
                args.extend(self.rope_params(rq)?);
                let count = |n: TensorId| self.ctx.get(n).n_elements();
                let v_rows = self.ctx.get(sv).src[1].map_or(0, count);
                let most = (count(rq) / 2).max(count(rk) / 2).max(v_rows);
                let mut cfg = grid_for(most);
                cfg.grid_dim.1 = 3;
                return Ok(one("rope_kv_store_op", cfg, args));
            }
            FusionKind::RopeSetRows => {
                let (rope, set) = (w.nodes[0], w.nodes[2]);
                let mut args = vec![
                    self.arg(set)?.into(),
                    self.src(set, 2)?.into(),
                    self.src(rope, 0)?.into(),
                ];
                args.extend(self.rope_params(rope)?);
                let pairs = self.ctx.get(rope).n_elements() / 2;
                return Ok(one("rope_set_rows_op", grid_for(pairs), args));
            }
            FusionKind::RmsNormMul => {
                let (norm, mul) = (w.nodes[0], w.nodes[1]);
                let (eps, rows) = norm_of(norm)?;
                let args = vec![
                    self.arg(mul)?.into(),
                    self.src(norm, 0)?.into(),
                    self.src(mul, 1)?.into(),
                    eps.into(),
                    q8_arg,
                ];
                ("rms_norm_mul_op", rows, args)
            }
            FusionKind::AddRmsNormMul => {
                let (add, norm, mul) = (w.nodes[0], w.nodes[1], w.nodes[2]);
                let (eps, rows) = norm_of(norm)?;
                let args = vec![
                    self.arg(add)?.into(),
                    self.src(add, 0)?.into(),
                    self.src(add, 1)?.into(),
                    self.arg(mul)?.into(),
                    self.src(mul, 1)?.into(),
                    eps.into(),
                    q8_arg,
                ];
                ("add_rms_norm_mul_op", rows, args)
            }
            kind => return Err(CudaError::Driver(format!("no kernel for a {kind:?} window"))),
        };
        Ok(one(entry, per_row(rows, THREADS), args))
    }

    /// The ProductGroup window: the activations to Q8_1 (where the first product is their
    /// first reader), then one `mmvq_group_*` over the two or three weight matrices (and their
    /// biases).
    fn product_group(&self, w: &Window, q8: Option<Q8Input>) -> Result<Vec<Pending>, CudaError> {
        let (products, adds) = w.products_and_adds(self.ctx);
        let weights = |id: TensorId| self.ctx.get(id).src[0].expect("weights");
        let w0 = self.ctx.get(weights(products[0]));
        let entry = row_of(w0.dtype)
            .and_then(|r| r.mmvq_group)
            .ok_or_else(|| CudaError::Driver(format!("a product group of {} weights", w0.dtype)))?;
        let nblocks = w0.ne[0] / 32;
        let x = self.src(products[0], 1)?;
        let (yq, quantize) = self.q8_activations(q8, x.p, nblocks as i64)?;
        // Up to three (weights, row bytes, output, bias, rows); an absent third has no rows,
        // an absent bias address 0. With the bias ADDs, the outputs are theirs.
        let mut parts = [(0u64, 0i64, 0u64, 0u64, 0i32); 3];
        for (j, (part, &p)) in parts.iter_mut().zip(products).enumerate() {
            let wd = self.ctx.get(weights(p));
            let (out, bias) = match adds.get(j) {
                Some(&a) => (self.arg(a)?.p, self.src(a, 1)?.p),
                None => (self.arg(p)?.p, 0),
            };
            let wp = self.arg(weights(p))?.p;
            self.check_block_alignment(wd.dtype, wp, &[wd.nb[1] as i64])?;
            *part = (wp, wd.nb[1] as i64, out, bias, wd.ne[1] as i32);
        }
        let mut args = vec![Arg::Ptr(yq), (nblocks as i32).into()];
        args.extend(parts.iter().map(|p| Arg::Ptr(p.0)));
        args.extend(parts.iter().map(|p| Arg::from(p.1)));
        args.extend(parts.iter().map(|p| Arg::Ptr(p.2)));
        args.extend(parts.iter().map(|p| Arg::Ptr(p.3)));
        args.extend(parts.iter().map(|p| Arg::from(p.4)));
        let wpr = self.warps_per_row(nblocks);
        args.push((wpr as i32).into());
        let rows: i64 = parts.iter().map(|p| i64::from(p.4)).sum();
        let mut v: Vec<Pending> = quantize.into_iter().collect();
        v.push(Pending { entry, cfg: warps(rows as usize * wpr, 8), args });
        Ok(v)
    }

    /// The GateUpGlu window: the activations to Q8_1 (where the gate product is their first
    /// reader), then one `mmvq_glu_*` for both products and the gated unit (writing the
    /// output's Q8_1 blocks at `q8_out` too, where given).
    fn gate_up_glu(
        &self,
        w: &Window,
        q8: Option<Q8Input>,
        q8_out: Option<u64>,
    ) -> Result<Vec<Pending>, CudaError> {
        let (g, u, glu) = (w.nodes[0], w.nodes[1], w.nodes[2]);
        let weights = |n: TensorId| self.ctx.get(n).src[0].expect("weights");
        let wd = self.ctx.get(weights(g));
        let wu = self.ctx.get(weights(u));
        let entry = row_of(wd.dtype).and_then(|r| r.mmvq_glu).ok_or_else(|| {
            CudaError::Driver(format!("a fused gate/up product of {} weights", wd.dtype))
        })?;
        let x = self.src(g, 1)?;
        let dst = self.arg(glu)?;
        let (nrows, nblocks, cols) = (wd.ne[1], wd.ne[0] / 32, x.ne[1]);
        let wpr = self.warps_per_row(nblocks);
        let (yq, quantize) = self.q8_activations(q8, x.p, nblocks as i64 * cols)?;
        let Op::Glu { op, .. } = self.ctx.get(glu).op else {
            return Err(CudaError::Driver("a GateUpGlu window without its GLU".into()));
        };
        let (pg, pu) = (self.arg(weights(g))?.p, self.arg(weights(u))?.p);
        self.check_block_alignment(wd.dtype, pg, &[wd.nb[1] as i64])?;
        self.check_block_alignment(wu.dtype, pu, &[wu.nb[1] as i64])?;
        let args = vec![
            Arg::Ptr(pg),
            Arg::Ptr(pu),
            Arg::Ptr(yq),
            Arg::Ptr(dst.p),
            (nrows as i32).into(),
            (nblocks as i32).into(),
            (wd.nb[1] as i64).into(),
            (wu.nb[1] as i64).into(),
            (cols as i32).into(),
            (dst.nb[1] / 4).into(),
            i32::from(op == GluOp::GeGlu).into(),
            (wpr as i32).into(),
            Arg::Ptr(q8_out.unwrap_or(0)),
            Arg::Ptr(self.counters),
        ];
        let mut v: Vec<Pending> = quantize.into_iter().collect();
        v.push(Pending { entry, cfg: warps(nrows * wpr, 8), args });
        Ok(v)
    }
}
