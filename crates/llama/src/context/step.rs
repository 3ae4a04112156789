//! One micro-batch of `LlamaContext::decode`: its graph built by the model's architecture,
//! scheduled and allocated (or the previous one reused when the shape is the same, as
//! llama.cpp's graph reuse), its inputs written, computed, its logits kept.

use super::LlamaContext;
use crate::batch::Batch;
use crate::graph::Builder;
use crate::kv_cache::{graph_input, KvInputs};
use crate::lora::LoraSet;
use crate::{LlamaError, Result};
use tessera_backend::Bindings;
use tessera_sched::Schedule;
use tessera_tensor::graph::{Context, Graph, TensorId};
use tessera_tensor::DType;

/// The input tensors of one micro-batch's graph.
#[derive(Clone, Copy)]
struct Inputs {
    tokens: TensorId,
    /// The embeddings of an embeddings batch (instead of `tokens`).
    embd: Option<TensorId>,
    pos: TensorId,
    out_ids: TensorId,
    /// What the attention reads the cache through (the cache's own inputs).
    kv: KvInputs,
}

/// (tokens, outputs, cells read, observing, embeddings input, argmax outputs).
type GraphKey = (usize, usize, usize, bool, bool, bool);

/// A micro-batch's graph, scheduled and allocated: kept for the next micro-batch of the same
/// shape (llama.cpp's graph reuse), which only writes new input values.
pub(super) struct Prepared {
    /// What fixes the graph's structure.
    pub(super) key: GraphKey,
    pub(super) ctx: Context,
    pub(super) schedule: Schedule,
    bindings: Bindings,
    inp: Inputs,
    /// The logits, or their argmax (I32, one a row) with argmax outputs.
    logits: TensorId,
    outputs: Vec<TensorId>,
}

impl LlamaContext<'_> {
    pub(super) fn decode_ubatch(
        &mut self,
        batch: &Batch,
        range: std::ops::Range<usize>,
        slots: &[usize],
    ) -> Result<()> {
        let n_tok = range.len();
        let mut out_idx: Vec<i32> =
            range.clone().filter(|&i| batch.logits[i]).map(|i| (i - range.start) as i32).collect();
        let keep = !out_idx.is_empty();
        if !keep {
            // The graph still needs an output; compute one row and drop it.
            out_idx.push(n_tok as i32 - 1);
        }
        let n_kv = self.kv.n_kv();
        let key = (
            n_tok,
            out_idx.len(),
            n_kv,
            !self.observe.is_empty(),
            batch.is_embd(),
            self.argmax_outputs,
        );
        let t0 = std::time::Instant::now();
        let (prepared, reused) = match self.prev.take() {
            Some(p) if self.params.graph_reuse && p.key == key => {
                self.n_reused += 1;
                (p, true)
            }
            _ => (self.build_graph(key)?, false),
        };
        tracing::trace!(reused, "step: graph ready in {} us", t0.elapsed().as_micros());
        let result = self.run_prepared(&prepared, batch, range, slots, &out_idx, keep);
        self.prev = Some(prepared);
        result
    }

    /// Builds, schedules and allocates the graph of a micro-batch of shape `key`.
    fn build_graph(&mut self, key: GraphKey) -> Result<Prepared> {
        let (n_tok, n_out, n_kv, _, embd, argmax) = key;
        let model = self.model;
        let hp = &model.hparams;
        let kv_size = self.kv.size();
        let mut ctx = self.base_ctx.clone();
        let inp = Inputs {
            tokens: graph_input(&mut ctx, DType::I32, &[n_tok], "inp_tokens")?,
            embd: match embd {
                true => Some(graph_input(&mut ctx, DType::F32, &[hp.n_embd, n_tok], "inp_embd")?),
                false => None,
            },
            pos: graph_input(&mut ctx, DType::I32, &[n_tok * hp.n_pos_per_token()], "inp_pos")?,
            out_ids: graph_input(&mut ctx, DType::I32, &[n_out], "inp_out_ids")?,
            kv: self.kv.new_inputs(&mut ctx, hp, n_tok, n_kv)?,
        };
        let mut bindings = self.base_bindings.clone();
        let lora = LoraSet::import(&self.loras, &mut ctx, &mut bindings)?;
        let mut b = Builder {
            ctx,
            hp,
            n_tokens: n_tok,
            n_outputs: n_out,
            inp_tokens: inp.tokens,
            inp_embd: inp.embd,
            inp_pos: inp.pos,
            inp_out_ids: inp.out_ids,
            kv: inp.kv,
            cache: &self.kv.layers,
            n_kv,
            kv_size,
            // The cache's layout decides the attention path: V in rows for flash attention.
            flash_attn: !self.kv.v_trans,
            embeddings: self.params.embeddings,
            attn_rotation: self.params.attn_rotation,
            lora: &lora,
            pins: Vec::new(),
        };
        let logits = model.graph.build(&mut b)?;
        let pins = std::mem::take(&mut b.pins);
        let mut ctx = b.ctx;
        let (want, what) = if self.params.embeddings {
            (hp.n_embd, "embeddings (n_embd)")
        } else {
            (hp.n_vocab, "logits (n_vocab)")
        };
        let got = ctx.get(logits).ne;
        if got[0] != want || got[1] != n_out {
            return Err(LlamaError::BadValue {
                key: format!("{}: graph output", hp.arch),
                reason: format!(
                    "the graph returned [{}, {}], expected {what} rows [{want}, {n_out}]",
                    got[0], got[1]
                ),
            });
        }
        // With argmax outputs the graph ends on ARGMAX (the logits stay an intermediate).
        let logits = if argmax { ctx.argmax(logits)? } else { logits };
        let mut outputs = vec![logits];
        if !self.observe.is_empty() {
            let watched: Vec<TensorId> = ctx
                .ids()
                .filter(|&id| self.observe.iter().any(|n| *n == ctx.get(id).name))
                .collect();
            for id in watched {
                ctx.set_output(id);
                outputs.push(id);
            }
        }
        let graph = Graph::build_with_pins(&ctx, &pins, &outputs);
        let schedule = self.sched.alloc_graph(&mut ctx, &graph, &mut bindings)?;

        Ok(Prepared { key, ctx, schedule, bindings, inp, logits, outputs })
    }

    /// Writes a micro-batch's inputs into its prepared graph, computes it and keeps the
    /// logits and observed tensors.
    fn run_prepared(
        &mut self,
        p: &Prepared,
        batch: &Batch,
        range: std::ops::Range<usize>,
        slots: &[usize],
        out_idx: &[i32],
        keep: bool,
    ) -> Result<()> {
        let hp = &self.model.hparams;
        let (ctx, bindings, inp) = (&p.ctx, &p.bindings, p.inp);
        let n_kv = p.key.2;
        // Inputs.
        match inp.embd {
            Some(id) => {
                let w = hp.n_embd;
                bindings.set_f32(ctx, id, &batch.embd[range.start * w..range.end * w])?;
            }
            None => {
                let toks: Vec<i32> =
                    batch.tokens[range.clone()].iter().map(|&t| t as i32).collect();
                bindings.set_i32(ctx, inp.tokens, &toks)?;
            }
        }
        let pos = &batch.pos[range.clone()];
        if hp.rope_sections.is_some() {
            // M-RoPE: all times, then heights, widths and extras (text: (p, p, p, 0)).
            let grid: Vec<[i32; 2]> = range.clone().map(|i| batch.grid_pos(i)).collect();
            let extra = range.clone().map(|i| batch.mrope.get(i).map_or(0, |m| m[2]));
            let all: Vec<i32> = pos
                .iter()
                .copied()
                .chain(grid.iter().map(|g| g[0]))
                .chain(grid.iter().map(|g| g[1]))
                .chain(extra)
                .collect();
            bindings.set_i32(ctx, inp.pos, &all)?;
        } else {
            bindings.set_i32(ctx, inp.pos, pos)?;
        }
        bindings.set_i32(ctx, inp.out_ids, out_idx)?;
        let seqs = &batch.seq_id[range.clone()];
        let grid: Vec<[i32; 2]> = range.clone().map(|i| batch.grid_pos(i)).collect();
        self.kv.set_inputs(&inp.kv, ctx, bindings, hp, n_kv, (pos, &grid), seqs, slots)?;
        let t_inputs = std::time::Instant::now();
        self.sched.compute(ctx, &p.schedule, bindings)?;
        let t_computed = std::time::Instant::now();
        if keep && p.key.5 {
            let n = ctx.get(p.logits).n_elements();
            self.argmax_raw.resize(4 * n, 0);
            bindings.read(ctx, p.logits, &mut self.argmax_raw)?;
            let ids = self.argmax_raw.chunks_exact(4);
            self.argmax.extend(ids.map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u32));
        } else if keep {
            bindings.append_f32(ctx, p.logits, &mut self.logits)?;
        }
        tracing::trace!(
            tokens = range.len(),
            "step: compute {} us, logits read {} us",
            (t_computed - t_inputs).as_micros(),
            t_computed.elapsed().as_micros()
        );
        self.observed.clear();
        for &id in &p.outputs[1..] {
            let d = ctx.get(id);
            if d.dtype == DType::F32 && d.is_contiguous() {
                self.observed.insert(d.name.clone(), bindings.get_f32(ctx, id)?);
            }
        }
        Ok(())
    }
}
