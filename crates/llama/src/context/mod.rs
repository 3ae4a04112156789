//! A model in use (llama.cpp's `llama_context`): the KV cache, the backend, the graph
//! allocator, and `decode`, which splits a batch into micro-batches, builds each one's graph,
//! computes it and keeps the logits of the tokens that asked for them.

use crate::batch::Batch;
use crate::kv_cache::{CellOrder, KvCache, MAX_SEQ};
use crate::lora::LoraAdapter;
use crate::model::Model;
use crate::{LlamaError, Result};
use std::sync::Arc;
use tessera_backend::{Backend, Bindings, BufferType, HostBufferType};
use tessera_sched::{SchedParams, Schedule, Scheduler};
use tessera_tensor::graph::{Context, Graph};
use tessera_tensor::DType;

mod step;
use step::Prepared;

/// How a context is set up (llama.cpp's `llama_context_params`).
#[derive(Debug, Clone)]
pub struct ContextParams {
    /// Cells of KV cache (rounded up to a multiple of 256); 0: the model's training context,
    /// as llama.cpp's `n_ctx = 0`.
    pub n_ctx: usize,
    /// Largest micro-batch.
    pub n_ubatch: usize,
    /// CPU threads.
    pub n_threads: usize,
    /// Flash attention (llama.cpp's CPU default) or the MUL_MAT + SOFT_MAX path.
    pub flash_attn: bool,
    /// K cache type (F16 by default; any type llama.cpp's `-ctk` takes).
    pub type_k: DType,
    /// V cache type (a quantized V needs flash attention: without it, an error).
    pub type_v: DType,
    /// Reuse the previous micro-batch's graph, schedule and memory when the next has the same
    /// shape (llama.cpp's graph reuse; `TESSERA_GRAPH_REUSE_DISABLE=1` turns it off, as
    /// `LLAMA_GRAPH_REUSE_DISABLE` does llama.cpp's).
    pub graph_reuse: bool,
    /// Batch-invariant arithmetic ([`Backend::set_batch_invariant`]): a token's logits do not
    /// depend on what else is in its batch (the server's `--deterministic`), at a cost in
    /// speed; off, the kernels are llama.cpp's choices (its bits).
    ///
    /// [`Backend::set_batch_invariant`]: tessera_backend::Backend::set_batch_invariant
    pub batch_invariant: bool,
    /// An embeddings context (llama.cpp's `embeddings`): decode keeps, for each flagged token,
    /// its final-norm row of `n_embd` values ([`LlamaContext::embeddings_ith`]) instead of
    /// logits, and the LM head is not computed. Pooling is the caller's
    /// ([`Pooling::pool`](crate::Pooling::pool)).
    pub embeddings: bool,
    /// Rotate Q, K and V by Walsh-Hadamard matrices where the cache is quantized, as llama.cpp
    /// does (`TESSERA_ATTN_ROT_DISABLE=1` turns it off, as `LLAMA_ATTN_ROT_DISABLE` does
    /// llama.cpp's).
    pub attn_rotation: bool,
    /// Which free cells a micro-batch takes ([`CellOrder`]): by sequence (the default, what
    /// the server's batch invariance needs) or llama.cpp's ring head (a single sequence's
    /// cells after a context shift then sit where llama.cpp's do, for its bits).
    pub cell_order: CellOrder,
}

impl Default for ContextParams {
    fn default() -> Self {
        ContextParams {
            n_ctx: 4096,
            n_ubatch: 512,
            n_threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            flash_attn: true,
            type_k: DType::F16,
            type_v: DType::F16,
            graph_reuse: std::env::var_os("TESSERA_GRAPH_REUSE_DISABLE").is_none(),
            batch_invariant: false,
            embeddings: false,
            attn_rotation: std::env::var("TESSERA_ATTN_ROT_DISABLE")
                .map_or(true, |v| v.parse::<i64>().unwrap_or(0) == 0),
            cell_order: CellOrder::default(),
        }
    }
}

/// A model with a KV cache and a backend: decodes batches, keeps the requested logits.
pub struct LlamaContext<'m> {
    model: &'m Model,
    params: ContextParams,
    base_ctx: Context,
    base_bindings: Bindings,
    kv: KvCache,
    sched: Scheduler,
    prev: Option<Prepared>,
    n_reused: usize,
    logits: Vec<f32>,
    /// Outputs are their logits' argmax, computed in the graph ([`Self::set_argmax_outputs`]).
    argmax_outputs: bool,
    /// The argmaxes of the last decode's outputs, in output order.
    argmax: Vec<u32>,
    /// Their bytes as read (kept between steps).
    argmax_raw: Vec<u8>,
    output_of: Vec<Option<usize>>,
    observe: Vec<String>,
    observed: std::collections::HashMap<String, Vec<f32>>,
    loras: Vec<(Arc<LoraAdapter>, f32)>,
}

impl<'m> LlamaContext<'m> {
    /// A context over `model`.
    pub fn new(model: &'m Model, mut params: ContextParams) -> Result<Self> {
        let hp = &model.hparams;
        if params.n_ctx == 0 {
            params.n_ctx = hp.n_ctx_train;
        }
        params.n_ctx = params.n_ctx.max(1).next_multiple_of(256);
        params.n_ubatch = params.n_ubatch.clamp(1, params.n_ctx);
        if params.type_v.block_size() > 1 && !params.flash_attn {
            // As llama.cpp refuses it (the MUL_MAT path reads V transposed, by element).
            return Err(LlamaError::Setting {
                flag: "type_v".into(),
                reason: format!(
                    "{}: V cache quantization requires flash attention",
                    params.type_v.name()
                ),
            });
        }
        let v_widths: Vec<usize> = (0..hp.n_layer).map(|il| hp.n_embd_v_gqa(il)).collect();
        if !params.flash_attn && v_widths.iter().any(|&w| w != v_widths[0]) {
            return Err(LlamaError::BadValue {
                key: format!("{}.attention.head_count_kv", hp.arch),
                reason: "layers of different V widths need flash attention".into(),
            });
        }
        let mut base_ctx = model.weights.ctx.clone();
        let mut base_bindings = model.weights.bindings.clone();
        let host: Arc<dyn BufferType> = Arc::new(HostBufferType);
        let layer_buft = |il: usize| match model.layer_plan.layers.get(il).copied().flatten() {
            Some(d) => model.devices[d].buffer_type(),
            None => host.clone(),
        };
        let mut kv = KvCache::new_placed(
            &mut base_ctx,
            &mut base_bindings,
            hp,
            params.n_ctx,
            (params.type_k, params.type_v),
            !params.flash_attn,
            &layer_buft,
        )?;
        kv.order = params.cell_order;
        // The model's devices in priority order, the CPU last (ggml's scheduler rule).
        let mut backends: Vec<Box<dyn Backend>> = Vec::new();
        for dev in &model.devices {
            let mut b = dev.init_backend()?;
            b.set_n_threads(params.n_threads)?;
            if params.batch_invariant {
                b.set_batch_invariant(true)?;
            }
            backends.push(b);
        }
        let mut cpu = model.host.init_backend()?;
        cpu.set_n_threads(params.n_threads)?;
        if params.batch_invariant {
            cpu.set_batch_invariant(true)?;
        }
        backends.push(cpu);
        let sched = Scheduler::new(backends, SchedParams::default())?;
        tracing::info!(
            n_ctx = params.n_ctx,
            flash_attn = params.flash_attn,
            threads = params.n_threads,
            "context created"
        );
        Ok(LlamaContext {
            model,
            params,
            base_ctx,
            base_bindings,
            kv,
            sched,
            prev: None,
            n_reused: 0,
            logits: Vec::new(),
            argmax_outputs: false,
            argmax: Vec::new(),
            argmax_raw: Vec::new(),
            output_of: Vec::new(),
            observe: Vec::new(),
            observed: Default::default(),
            loras: Vec::new(),
        })
    }

    /// The model.
    pub fn model(&self) -> &'m Model {
        self.model
    }

    /// The parameters in force (after rounding).
    pub fn params(&self) -> &ContextParams {
        &self.params
    }

    /// The KV cache.
    pub fn kv_cache(&self) -> &KvCache {
        &self.kv
    }

    /// The KV cache, to remove sequences or clear it.
    pub fn kv_cache_mut(&mut self) -> &mut KvCache {
        &mut self.kv
    }

    /// Copies out the K/V of sequence `seq`'s cells at positions below `p1` (llama.cpp's
    /// `llama_state_seq_get_data`), e.g. to keep a prompt in host memory.
    pub fn seq_save(&self, seq: u32, p1: i32) -> Result<crate::SeqState> {
        self.kv.seq_save(&self.base_ctx, &self.base_bindings, seq, p1)
    }

    /// Puts a saved state's cells at positions below `p1` back as sequence `seq` (which must
    /// be empty): the next decode continues from them as from the tokens that made them.
    pub fn seq_restore(&mut self, seq: u32, state: &crate::SeqState, p1: i32) -> Result<()> {
        self.kv.seq_restore(&self.base_ctx, &self.base_bindings, seq, state, p1)
    }

    /// Changes the number of CPU threads.
    pub fn set_n_threads(&mut self, n: usize) -> Result<()> {
        self.params.n_threads = n.max(1);
        for i in 0..self.sched.n_backends() {
            self.sched.backend_mut(i).set_n_threads(n)?;
        }
        Ok(())
    }

    /// [`decode`](Self::decode) for a batch that checks proposed tokens (speculative decoding's
    /// verification, every row wanting logits): the backends take their batched kernels at any
    /// size ([`Backend::set_prefer_batched`]; on the CPU the tiled attention below its 64 rows,
    /// several times less attention work a row deep in the cache). The rows' logits may differ
    /// from plain decoding's in the last bits, as a batch's already may; with batch-invariant
    /// arithmetic this is `decode`.
    ///
    /// [`Backend::set_prefer_batched`]: tessera_backend::Backend::set_prefer_batched
    pub fn decode_verification(&mut self, batch: &Batch) -> Result<()> {
        let prefer = !self.params.batch_invariant;
        let set = |ctx: &mut Self, on: bool| -> Result<()> {
            for i in 0..ctx.sched.n_backends() {
                ctx.sched.backend_mut(i).set_prefer_batched(on)?;
            }
            Ok(())
        };
        set(self, prefer)?;
        let r = self.decode(batch);
        set(self, false)?;
        r
    }

    /// The scheduler running the graphs (its backends: the model's devices, then the CPU).
    pub fn scheduler(&self) -> &Scheduler {
        &self.sched
    }

    /// Installs llama.cpp's eval callback (`cb_eval`) on the scheduler: asked about every node
    /// before it is computed, shown each node it asked for once computed (on whatever device,
    /// read through the bindings); returning `false` then stops the micro-batch. `None`
    /// removes it.
    pub fn set_eval_callback(&mut self, cb: Option<tessera_sched::EvalCallback>) {
        self.sched.set_eval_callback(cb);
    }

    /// The last micro-batch's graph context and schedule (where each node ran, the splits),
    /// e.g. to print or export it.
    pub fn last_schedule(&self) -> Option<(&Context, &Schedule)> {
        self.prev.as_ref().map(|p| (&p.ctx, &p.schedule))
    }

    /// Whether tokens are kept from the cache cells after their own positions (llama.cpp's
    /// `llama_set_causal_attn`; on by default): multimodal models attend over an image's
    /// tokens in both directions while its embeddings are decoded.
    pub fn set_causal_attn(&mut self, causal: bool) {
        self.kv.causal = causal;
    }

    /// How many micro-batches ran on the previous one's graph (graph reuse).
    pub fn n_graph_reused(&self) -> usize {
        self.n_reused
    }

    /// Splits and cross-backend copies of the last micro-batch's graph (1 and 0 on the CPU
    /// alone).
    pub fn last_splits(&self) -> (usize, usize) {
        self.prev.as_ref().map_or((0, 0), |p| (p.schedule.n_splits(), p.schedule.n_copies()))
    }

    /// Keeps the values of the graph tensors with these names (`"l_out-3"`, `"ffn_inp-0"`, ...,
    /// as llama.cpp names them) at every later decode, for [`observed`](Self::observed): the
    /// role of llama.cpp's eval callback when comparing intermediate results.
    pub fn observe(&mut self, names: Vec<String>) {
        self.observe = names;
        self.prev = None;
    }

    /// Applies these LoRA adapters with these scales to every later decode (llama.cpp's
    /// `llama_set_adapters_lora`), replacing the previous list; a scale of 0 leaves an adapter
    /// out. The cache is the caller's: tokens already in it keep what they were computed with.
    /// Each adapter must have been loaded for this context's model.
    pub fn set_loras(&mut self, loras: Vec<(Arc<LoraAdapter>, f32)>) -> Result<()> {
        let same = |a: &[(Arc<LoraAdapter>, f32)], b: &[(Arc<LoraAdapter>, f32)]| {
            let on = |l: &[(Arc<LoraAdapter>, f32)]| -> Vec<(*const LoraAdapter, u32)> {
                l.iter()
                    .filter(|(_, s)| *s != 0.0)
                    .map(|(a, s)| (Arc::as_ptr(a), s.to_bits()))
                    .collect()
            };
            on(a) == on(b)
        };
        if same(&loras, &self.loras) {
            return Ok(());
        }
        for (adapter, scale) in &loras {
            adapter.check_model(self.model)?;
            if !scale.is_finite() {
                return Err(LlamaError::Setting {
                    flag: "--lora-scaled".into(),
                    reason: format!("{}: scale {scale} is not a finite number", adapter.path()),
                });
            }
        }
        self.loras = loras;
        self.prev = None;
        Ok(())
    }

    /// The LoRA adapters applied and their scales ([`set_loras`](Self::set_loras)).
    pub fn loras(&self) -> &[(Arc<LoraAdapter>, f32)] {
        &self.loras
    }

    /// The values of the observed tensors of the last micro-batch.
    pub fn observed(&self) -> &std::collections::HashMap<String, Vec<f32>> {
        &self.observed
    }

    /// The logits of batch token `i` of the last [`decode`](Self::decode), if it asked for them
    /// (never in an embeddings context).
    pub fn logits_ith(&self, i: usize) -> Option<&[f32]> {
        if self.params.embeddings {
            return None;
        }
        let n = self.model.hparams.n_vocab;
        let o = (*self.output_of.get(i)?)?;
        self.logits.get(o * n..(o + 1) * n)
    }

    /// With `on`, each output of the next decodes is its logits' argmax (the first largest,
    /// greedy's rule), computed at the end of the graph on the backend that has the logits
    /// (ARGMAX), and only that token is read back: [`argmax_ith`](Self::argmax_ith) gives it,
    /// and no logits are kept ([`logits_ith`](Self::logits_ith) is `None`). For greedy
    /// decoding with nothing banned or masked: on a GPU it saves reading a vocabulary of floats
    /// a token (513 KB on a 128k vocabulary). An embeddings context has no logits: an error.
    pub fn set_argmax_outputs(&mut self, on: bool) -> Result<()> {
        if on && self.params.embeddings {
            return Err(LlamaError::Setting {
                flag: "argmax outputs".into(),
                reason: "an embeddings context computes no logits".into(),
            });
        }
        self.argmax_outputs = on;
        Ok(())
    }

    /// Whether outputs are argmaxes ([`set_argmax_outputs`](Self::set_argmax_outputs)).
    pub fn argmax_outputs(&self) -> bool {
        self.argmax_outputs
    }

    /// With argmax outputs ([`set_argmax_outputs`](Self::set_argmax_outputs)), the argmax of
    /// batch token `i`'s logits in the last [`decode`](Self::decode), if it asked for them.
    pub fn argmax_ith(&self, i: usize) -> Option<u32> {
        if !self.argmax_outputs {
            return None;
        }
        let o = (*self.output_of.get(i)?)?;
        self.argmax.get(o).copied()
    }

    /// In an embeddings context, the final-norm row (`n_embd` values) of batch token `i` of the
    /// last [`decode`](Self::decode), if it asked for it.
    pub fn embeddings_ith(&self, i: usize) -> Option<&[f32]> {
        if !self.params.embeddings {
            return None;
        }
        let n = self.model.hparams.n_embd;
        let o = (*self.output_of.get(i)?)?;
        self.logits.get(o * n..(o + 1) * n)
    }

    /// All logits of the last decode, one row of `n_vocab` per output, in batch order (in an
    /// embeddings context, rows of `n_embd`).
    pub fn logits(&self) -> &[f32] {
        &self.logits
    }

    /// Rotates the cached K of every cell whose position [`KvCache::seq_add`] moved (the
    /// K-shift; `decode` does it first by itself): a no-op when nothing moved.
    pub fn apply_shift(&mut self) -> Result<()> {
        if !self.kv.has_shift() {
            return Ok(());
        }
        let Some(g) = crate::kv_shift::build(
            self.model,
            &self.base_ctx,
            &self.kv,
            self.params.attn_rotation,
        )?
        else {
            self.kv.clear_shift();
            return Ok(());
        };
        let mut ctx = g.ctx;
        let graph = Graph::build(&ctx, &g.outputs);
        let mut bindings = self.base_bindings.clone();
        // The scheduler's memory is the shift's now: the kept graph must be made again.
        self.prev = None;
        let schedule = self.sched.alloc_graph(&mut ctx, &graph, &mut bindings)?;
        bindings.set_i32(&ctx, g.shift, &self.kv.shifts())?;
        if let Some(rows) = g.rows {
            let idx: Vec<i32> = (0..self.kv.size() as i32).collect();
            bindings.set_i32(&ctx, rows, &idx)?;
        }
        self.sched.compute(&ctx, &schedule, &bindings)?;
        self.kv.clear_shift();
        tracing::debug!("K-shift applied");
        Ok(())
    }

    /// Runs `batch` through the model: its tokens enter the KV cache, and the logits of the
    /// tokens flagged in `batch.logits` are kept.
    pub fn decode(&mut self, batch: &Batch) -> Result<()> {
        self.apply_shift()?;
        let hp = &self.model.hparams;
        batch.validate(hp.n_vocab, hp.n_embd, MAX_SEQ)?;
        let n = batch.len();
        self.logits.clear();
        self.argmax.clear();
        self.output_of = vec![None; n];
        let mut n_out = 0;
        for (i, &want) in batch.logits.iter().enumerate() {
            if want {
                self.output_of[i] = Some(n_out);
                n_out += 1;
            }
        }
        let width = if self.params.embeddings { hp.n_embd } else { hp.n_vocab };
        if !self.argmax_outputs {
            self.logits.reserve(n_out * width);
        }
        let mut start = 0;
        while start < n {
            let end = (start + self.params.n_ubatch).min(n);
            let slots = self.kv.find_slot_for(&batch.seq_id[start..end])?;
            let grid: Vec<[i32; 2]> = (start..end).map(|i| batch.grid_pos(i)).collect();
            self.kv.apply(&slots, &batch.pos[start..end], &batch.seq_id[start..end], &grid);
            if let Err(e) = self.decode_ubatch(batch, start..end, &slots) {
                self.kv.release(&slots);
                return Err(e);
            }
            start = end;
        }
        Ok(())
    }
}
