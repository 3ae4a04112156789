//! LoRA adapters (llama.cpp's `llama_adapter_lora`): GGUF files of `general.type = adapter`,
//! `adapter.type = lora`, holding a `{weight}.lora_a` / `{weight}.lora_b` pair for each model
//! weight they change, and `adapter.lora.alpha`.
//!
//! An adapter is applied in the graph, never merged into the (quantized) weights: every
//! product `W · x` of an adapted weight becomes `W · x + s · B · (A · x)` (llama.cpp's
//! `build_lora_mm`, and `build_lora_mm_id` for experts), with `s = scale · alpha / rank`
//! (`scale` alone where alpha is 0), the rank being B's first dimension. The token embedding
//! is the exception llama.cpp makes: its pair is stored flipped (A `[rank, n_vocab]`, B
//! `[rank, n_embd]`) and adds `s · B · A[tokens]` to the looked-up rows.
//!
//! Decisions:
//! - **Loading checks the pairs against the model**, as llama.cpp does (same architecture,
//!   every pair whole, every base weight present, shapes that multiply, A stored transposed),
//!   so a wrong adapter is refused at load with the tensor named, not at the first decode.
//! - **The tensors stay where the base weight is**: in the file's mapping for the CPU (never in
//!   a repacking buffer type: the products read A and B as the file stores them), copied to
//!   the device that holds the base weight otherwise, so an offloaded layer's products stay on
//!   its device.
//! - **Adapters are a context's setting** ([`LlamaContext::set_loras`]): the model is shared,
//!   each context (a server slot's, a CLI run's) applies its own list with its own scales, and
//!   a scale of 0 leaves an adapter out of the graph, as llama.cpp's `set_adapters_lora`.
//! - **Several adapters are added in the order given.** llama.cpp adds them in the order of a
//!   hash map keyed by address, so where two adapters change the same weight the last bits of
//!   the sum may differ from its; adapters on different weights give its values exactly.
//!
//! [`LlamaContext::set_loras`]: crate::LlamaContext::set_loras

use crate::model::Model;
use crate::placement;
use crate::weights::MappedFile;
use crate::{LlamaError, Result};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use tessera_alloc::alloc_tensors;
use tessera_backend::{Bindings, Buffer, BufferUsage, MappedBuffer};
use tessera_gguf::GgufFile;
use tessera_tensor::graph::{Context, TensorId};

/// One adapted weight: the base weight (an id of the model's weights) and the pair.
#[derive(Debug, Clone)]
pub(crate) struct LoraPair {
    /// The model weight it changes (`blk.0.attn_q.weight`).
    pub base: String,
    /// That weight's id in the model's contexts.
    pub base_id: TensorId,
    /// `lora_a` in the adapter's context.
    pub a: TensorId,
    /// `lora_b` in the adapter's context.
    pub b: TensorId,
    /// The token embedding's flipped pair (applied to the looked-up rows).
    pub embedding: bool,
}

/// A loaded LoRA adapter for one model.
pub struct LoraAdapter {
    path: String,
    alpha: f32,
    task_name: String,
    prompt_prefix: String,
    ctx: Context,
    bindings: Bindings,
    pairs: Vec<LoraPair>,
    n_bytes: usize,
}

impl std::fmt::Debug for LoraAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoraAdapter")
            .field("path", &self.path)
            .field("alpha", &self.alpha)
            .field("pairs", &self.pairs.len())
            .finish()
    }
}

/// An adapter's error: `path: reason`.
fn bad(path: &str, reason: impl Into<String>) -> LlamaError {
    LlamaError::Lora { path: path.to_string(), reason: reason.into() }
}

impl LoraAdapter {
    /// Loads the adapter at `path` for `model`, checking every pair against its weights.
    pub fn load(model: &Model, path: impl AsRef<Path>) -> Result<LoraAdapter> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let gguf = GgufFile::open(path)
            .map_err(|source| LlamaError::Gguf { path: name.clone(), source })?;
        let md = gguf.metadata();
        let text = |key: &str| md.get(key).and_then(|v| v.as_str()).unwrap_or("").to_string();
        let general_type = text("general.type");
        if general_type != "adapter" {
            return Err(bad(
                &name,
                format!("general.type is '{general_type}', expected 'adapter' (is it a model?)"),
            ));
        }
        let arch = text("general.architecture");
        if arch != model.hparams.arch {
            return Err(bad(
                &name,
                format!(
                    "an adapter for architecture '{arch}', the model is '{}'",
                    model.hparams.arch
                ),
            ));
        }
        let adapter_type = text("adapter.type");
        if adapter_type != "lora" {
            return Err(bad(
                &name,
                format!(
                    "adapter.type is '{adapter_type}', expected 'lora' (control vectors and \
                         other adapters are not LoRA)"
                ),
            ));
        }
        if md.get("adapter.alora.invocation_tokens").is_some() {
            return Err(bad(
                &name,
                "an activated LoRA (adapter.alora.invocation_tokens): Tessera applies LoRA to \
                 every token and does not implement aLoRA's activation",
            ));
        }
        let (task_name, prompt_prefix) =
            (text("adapter.lora.task_name"), text("adapter.lora.prompt_prefix"));
        let alpha = match md.get("adapter.lora.alpha") {
            None => 0.0,
            Some(_) => md.get_f32("adapter.lora.alpha")?,
        };

        // Pair up `*.lora_a` and `*.lora_b` by base name; norms are skipped (as llama.cpp).
        let mut halves: BTreeMap<String, [Option<usize>; 2]> = BTreeMap::new();
        for (i, t) in gguf.tensors().iter().enumerate() {
            if let Some(base) = t.name.strip_suffix(".lora_a") {
                halves.entry(base.to_string()).or_default()[0] = Some(i);
            } else if let Some(base) = t.name.strip_suffix(".lora_b") {
                halves.entry(base.to_string()).or_default()[1] = Some(i);
            } else if t.name.ends_with("_norm.weight") {
                tracing::warn!(adapter = %name, tensor = %t.name, "LoRA norm vectors are not applied (as llama.cpp)");
            } else {
                return Err(bad(
                    &name,
                    format!("tensor '{}' is neither a .lora_a nor a .lora_b", t.name),
                ));
            }
        }
        if halves.is_empty() {
            return Err(bad(&name, "no lora_a/lora_b tensors"));
        }

        let file = Arc::new(MappedFile(gguf));
        let mapped: Arc<dyn Buffer> = Arc::new(MappedBuffer::new(file.clone()));
        let mut ctx = Context::new();
        let mut bindings = Bindings::new();
        let mut pairs = Vec::new();
        let mut on_device: Vec<Vec<(TensorId, usize)>> = vec![Vec::new(); model.devices.len()];
        let infos = file.0.tensors();
        for (base, [a, b]) in halves {
            let (Some(a), Some(b)) = (a, b) else {
                return Err(bad(
                    &name,
                    format!("the pair for '{base}' lacks its lora_a or lora_b"),
                ));
            };
            let Some(base_id) = model.weights.id(&base) else {
                return Err(bad(
                    &name,
                    format!(
                        "'{base}' is not a weight of the model (an adapter for another model?)"
                    ),
                ));
            };
            let w = model.weights.ctx.get(base_id).ne;
            let (ia, ib) = (&infos[a], &infos[b]);
            let dim = |ne: &[u64], i: usize| ne.get(i).copied().unwrap_or(1) as usize;
            let (a0, a1, a2) = (dim(&ia.ne, 0), dim(&ia.ne, 1), dim(&ia.ne, 2));
            let (b0, b1, b2) = (dim(&ib.ne, 0), dim(&ib.ne, 1), dim(&ib.ne, 2));
            let embedding = base.ends_with("token_embd.weight");
            let shape = |t: &tessera_gguf::TensorInfo| format!("{:?}", t.ne);
            let mismatch = || {
                bad(
                    &name,
                    format!(
                        "'{base}' is {:?} in the model, its pair has lora_a {} and lora_b {} \
                         (an adapter for another model?)",
                        &w[..w.iter().rposition(|&d| d != 1).map_or(1, |i| i + 1)],
                        shape(ia),
                        shape(ib)
                    ),
                )
            };
            if embedding {
                // Flipped: A [rank, n_vocab], B [rank, n_embd].
                if w[0] != b1 || w[1] != a1 || a0 != b0 {
                    return Err(mismatch());
                }
            } else {
                if w[0] != a0 || w[1] != b1 || a2 != w[2] || b2 != w[2] {
                    return Err(mismatch());
                }
                if a1 != b0 {
                    return Err(bad(
                        &name,
                        format!(
                            "'{base}': lora_a {} is not transposed to lora_b {} (adapters from \
                             llama.cpp's old finetune example are not supported)",
                            shape(ia),
                            shape(ib)
                        ),
                    ));
                }
            }
            let device = placement::tensor_device(&base, &model.layer_plan, model.offload())?;
            let mut import = |i: usize| -> Result<TensorId> {
                let info = &infos[i];
                let ne: Vec<usize> = info.ne.iter().map(|&d| d as usize).collect();
                let id = ctx.new_tensor(info.dtype, &ne)?;
                ctx.set_name(id, &info.name);
                let off = info.data_offset as usize;
                match device {
                    Some(d) => on_device[d].push((id, off)),
                    None => bindings.bind(&ctx, id, mapped.clone(), off)?,
                }
                Ok(id)
            };
            let (a, b) = (import(a)?, import(b)?);
            pairs.push(LoraPair { base, base_id, a, b, embedding });
        }
        let bytes = file.0.bytes();
        for (d, list) in on_device.iter().enumerate() {
            if list.is_empty() {
                continue;
            }
            let ids: Vec<TensorId> = list.iter().map(|&(id, _)| id).collect();
            for buf in alloc_tensors(&model.devices[d].buffer_type(), &ctx, ids, &mut bindings)? {
                buf.set_usage(BufferUsage::Weights);
            }
            for &(id, off) in list {
                bindings.set(&ctx, id, &bytes[off..off + ctx.get(id).n_bytes()])?;
            }
        }
        let n_bytes = ctx.ids().map(|id| ctx.get(id).n_bytes()).sum();
        tracing::info!(
            adapter = %name,
            pairs = pairs.len(),
            alpha,
            mib = n_bytes as f64 / (1 << 20) as f64,
            "LoRA adapter loaded"
        );
        Ok(LoraAdapter {
            path: name,
            alpha,
            task_name,
            prompt_prefix,
            ctx,
            bindings,
            pairs,
            n_bytes,
        })
    }

    /// The file it was loaded from.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// `adapter.lora.alpha` (0 where the file has none: the scale is then used as is).
    pub fn alpha(&self) -> f32 {
        self.alpha
    }

    /// `adapter.lora.task_name` (empty where absent), as llama-server lists it.
    pub fn task_name(&self) -> &str {
        &self.task_name
    }

    /// `adapter.lora.prompt_prefix` (empty where absent), as llama-server lists it.
    pub fn prompt_prefix(&self) -> &str {
        &self.prompt_prefix
    }

    /// The model weights it changes, in name order.
    pub fn targets(&self) -> impl Iterator<Item = &str> + '_ {
        self.pairs.iter().map(|p| p.base.as_str())
    }

    /// Bytes of its tensors.
    pub fn n_bytes(&self) -> usize {
        self.n_bytes
    }

    /// The pairs, for the graph.
    pub(crate) fn pairs(&self) -> &[LoraPair] {
        &self.pairs
    }

    /// Checks that the adapter was loaded for `model` (the same weights under the same ids).
    pub(crate) fn check_model(&self, model: &Model) -> Result<()> {
        for p in &self.pairs {
            if model.weights.id(&p.base) != Some(p.base_id) {
                return Err(bad(&self.path, "loaded for another model"));
            }
        }
        Ok(())
    }

    /// Adds tensor `id` of the adapter to a graph's context and bindings (bound to the same
    /// memory), returning its id there.
    pub(crate) fn import(
        &self,
        id: TensorId,
        ctx: &mut Context,
        bindings: &mut Bindings,
    ) -> Result<TensorId> {
        let d = self.ctx.get(id);
        let new = ctx.new_tensor(d.dtype, &d.ne)?;
        ctx.set_name(new, &d.name);
        let s = self
            .bindings
            .storage(&self.ctx, id)
            .ok_or_else(|| bad(&self.path, format!("tensor '{}' has no memory", d.name)))?;
        bindings.bind(ctx, new, s.buffer, s.offset)?;
        Ok(new)
    }
}

/// The adapted products of one graph: for each adapted model weight, the pairs (imported into
/// the graph's context) and their scales, in the order the adapters were given.
#[derive(Debug, Clone, Default)]
pub struct LoraSet {
    /// Keyed by (weight, token-embedding pair).
    by_weight: std::collections::HashMap<(TensorId, bool), Vec<LoraMat>>,
}

/// One adapter's pair for one weight, in a graph's context.
#[derive(Debug, Clone, Copy)]
pub struct LoraMat {
    /// `lora_a`.
    pub a: TensorId,
    /// `lora_b`.
    pub b: TensorId,
    /// `scale · alpha / rank` (or `scale`).
    pub scale: f32,
}

impl LoraSet {
    /// The pairs of `loras` (adapters and their scales; 0 leaves one out) imported into a
    /// graph's `ctx` and `bindings`.
    pub(crate) fn import(
        loras: &[(Arc<LoraAdapter>, f32)],
        ctx: &mut Context,
        bindings: &mut Bindings,
    ) -> Result<LoraSet> {
        let mut set = LoraSet::default();
        for (adapter, scale) in loras.iter().filter(|(_, s)| *s != 0.0) {
            for p in adapter.pairs() {
                let (a, b) =
                    (adapter.import(p.a, ctx, bindings)?, adapter.import(p.b, ctx, bindings)?);
                let rank = ctx.get(b).ne[0] as f32;
                let s = if adapter.alpha != 0.0 { scale * adapter.alpha / rank } else { *scale };
                set.by_weight.entry((p.base_id, p.embedding)).or_default().push(LoraMat {
                    a,
                    b,
                    scale: s,
                });
            }
        }
        Ok(set)
    }

    /// The pairs that change the products of weight `w` (none: an empty slice).
    pub fn of(&self, w: TensorId) -> &[LoraMat] {
        self.by_weight.get(&(w, false)).map_or(&[], Vec::as_slice)
    }

    /// The flipped pairs that change the rows looked up in token embedding `w`. A tied output
    /// head does not take them (llama.cpp would multiply by the flipped pair there and abort).
    pub fn of_embedding(&self, w: TensorId) -> &[LoraMat] {
        self.by_weight.get(&(w, true)).map_or(&[], Vec::as_slice)
    }

    /// Whether no adapter is applied.
    pub fn is_empty(&self) -> bool {
        self.by_weight.is_empty()
    }
}
