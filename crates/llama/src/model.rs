//! A loaded model: the mapped GGUF file, its hyperparameters, vocabulary, and every weight as a
//! leaf of a base graph context, bound zero-copy to the file's mapping.

use crate::arch::{self, ModelGraph};
use crate::hparams::HParams;
use crate::placement::{self, LayerPlan, Offload};
use crate::{LlamaError, Result};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use tessera_alloc::alloc_tensors;
use tessera_backend::{Bindings, BufferUsage, Device, MappedBuffer};
use tessera_gguf::GgufFile;
use tessera_tensor::graph::{Context, Flags, TensorId};
use tessera_vocab::Vocab;

/// The file's bytes as a buffer source (the mapping lives as long as any buffer over it).
struct MappedFile(GgufFile);

impl AsRef<[u8]> for MappedFile {
    fn as_ref(&self) -> &[u8] {
        self.0.bytes()
    }
}

/// The weights: one leaf per GGUF tensor in a base [`Context`], bound in place.
pub struct Weights {
    /// Descriptors of every weight (later graphs start from a clone of this).
    pub ctx: Context,
    /// Each weight bound to its memory: the file's mapping, a device buffer, or host memory
    /// holding repacked weights rearranged.
    pub bindings: Bindings,
    by_name: HashMap<String, TensorId>,
    /// The weights an architecture asked for ([`Weights::get`], [`Weights::find`]): after
    /// loading, any other tensor of the file is unused, which is an error.
    used: Arc<Mutex<HashSet<TensorId>>>,
    /// A tied output's own copy of token_embd (offloaded, or rearranged as repacked), which
    /// the sizes do not count: it is not in the file.
    duplicate: Option<TensorId>,
    /// The file, for its metadata.
    file: Arc<MappedFile>,
}

impl Weights {
    /// The file's metadata: what an architecture reads beyond [`HParams`](crate::HParams)
    /// (a downstream architecture's own `{arch}.*` keys).
    pub fn metadata(&self) -> &tessera_gguf::Metadata {
        self.file.0.metadata()
    }

    /// The weight called `name`, checked to have shape `ne` (trailing 1s may be omitted).
    pub fn get(&self, name: &str, ne: &[usize]) -> Result<TensorId> {
        self.find(name, ne)?.ok_or_else(|| LlamaError::MissingTensor(name.to_string()))
    }

    /// Like [`Weights::get`] for a weight that may be absent (biases, optional norms).
    pub fn find(&self, name: &str, ne: &[usize]) -> Result<Option<TensorId>> {
        let Some(&id) = self.by_name.get(name) else { return Ok(None) };
        self.used.lock().unwrap_or_else(|e| e.into_inner()).insert(id);
        let actual = self.ctx.get(id).ne;
        let mut want = [1usize; 4];
        want[..ne.len()].copy_from_slice(ne);
        if actual != want {
            let trim = |v: [usize; 4]| {
                let n = v.iter().rposition(|&d| d != 1).map_or(1, |i| i + 1);
                v[..n].to_vec()
            };
            return Err(LlamaError::TensorShape {
                name: name.into(),
                actual: trim(actual),
                expected: trim(want),
            });
        }
        Ok(Some(id))
    }

    /// The weight called `name`, whatever its shape.
    pub fn id(&self, name: &str) -> Option<TensorId> {
        self.by_name.get(name).copied()
    }

    /// Whether a tensor of that name exists.
    pub fn contains(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    /// Total bytes of all weights in the file.
    pub fn n_bytes(&self) -> usize {
        self.in_file().map(|id| self.ctx.get(id).n_bytes()).sum()
    }

    /// The file's tensors no architecture asked for, in name order.
    fn unused(&self) -> Vec<String> {
        let used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        let mut names: Vec<String> = self
            .by_name
            .iter()
            .filter(|(_, id)| Some(**id) != self.duplicate && !used.contains(id))
            .map(|(n, _)| n.clone())
            .collect();
        names.sort();
        names
    }

    /// The weights in the file (not a tied output's copy).
    fn in_file(&self) -> impl Iterator<Item = TensorId> + '_ {
        self.by_name.values().copied().filter(|&id| Some(id) != self.duplicate)
    }
}

/// How a model is loaded.
#[derive(Debug, Clone)]
pub struct LoadParams {
    /// Which weights go to which device (`-ngl`, `-ts`, `--device`, `-ot`); CPU only by
    /// default.
    pub offload: Offload,
    /// Mark the weights llama.cpp would move into its repack buffer (its default on x86 with
    /// AVX2: Q4_0, Q4_K and IQ4_NL, with AVX-512 also Q2_K, rows in multiples of 8, decided at the SIMD level in
    /// force at load), so their products follow ggml's repacked kernels' arithmetic. `false`
    /// is llama.cpp's `--no-repack` (`use_extra_bufts = false`).
    pub repack: bool,
    /// Load a file that has tensors the architecture does not use, ignoring them with a
    /// warning (by default that is an error: a variant Tessera does not implement).
    pub allow_unused_tensors: bool,
}

impl Default for LoadParams {
    fn default() -> Self {
        LoadParams { offload: Offload::default(), repack: true, allow_unused_tensors: false }
    }
}

/// A model ready to run: hyperparameters, vocabulary, weights and its architecture's graph.
pub struct Model {
    /// Hyperparameters.
    pub hparams: HParams,
    /// The tokenizer.
    pub vocab: Vocab,
    /// The weights.
    pub weights: Weights,
    /// The architecture's graph builder, holding its tensor ids.
    pub graph: Box<dyn ModelGraph>,
    /// `general.name`, if any.
    pub name: String,
    /// Size of the file in bytes.
    pub file_size: usize,
    /// Chat template (`tokenizer.chat_template`), if any.
    pub chat_template: Option<String>,
    /// How many weights are marked repacked ([`LoadParams::repack`]).
    pub n_repacked: usize,
    /// The devices weights were offloaded to (priority order; the CPU is implied, last).
    pub devices: Vec<Arc<dyn Device>>,
    /// Which device holds each layer (weights and KV cache); `None` is the CPU.
    pub layer_plan: LayerPlan,
    /// Bytes of weights on each device of [`devices`](Model::devices).
    pub device_bytes: Vec<usize>,
    file: Arc<MappedFile>,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model").field("arch", &self.hparams.arch).field("name", &self.name).finish()
    }
}

impl Model {
    /// Loads a GGUF model: maps the file, reads hyperparameters and vocabulary, binds every
    /// tensor in place and lets the registered architecture pick and check its weights.
    /// Weights are marked repacked as llama.cpp's default does ([`LoadParams`]).
    pub fn load(path: impl AsRef<Path>) -> Result<Model> {
        Self::load_with(path, &LoadParams::default())
    }

    /// [`Model::load`] with explicit [`LoadParams`].
    pub fn load_with(path: impl AsRef<Path>, params: &LoadParams) -> Result<Model> {
        let path = path.as_ref();
        let gguf = GgufFile::open(path)
            .map_err(|source| LlamaError::Gguf { path: path.display().to_string(), source })?;
        Self::from_gguf_with(gguf, params)
    }

    /// [`Model::load`] from an opened file.
    pub fn from_gguf(gguf: GgufFile) -> Result<Model> {
        Self::from_gguf_with(gguf, &LoadParams::default())
    }

    /// [`Model::load_with`] from an opened file.
    pub fn from_gguf_with(gguf: GgufFile, params: &LoadParams) -> Result<Model> {
        let file = Arc::new(MappedFile(gguf));
        let g = &file.0;
        let md = g.metadata();
        let arch_name = md.get_str("general.architecture")?.to_string();
        let builder = arch::lookup(&arch_name)?;
        let buffer: Arc<dyn tessera_backend::Buffer> = Arc::new(MappedBuffer::new(file.clone()));
        let n_vocab_hint =
            g.tensors().iter().find(|t| t.name == "token_embd.weight").map(|t| t.ne[1] as usize);
        let hparams = HParams::from_metadata(md, n_vocab_hint)?;
        let offload = &params.offload;
        let layer_plan = LayerPlan::new(hparams.n_layer, offload);
        let mut ctx = Context::new();
        let mut bindings = Bindings::new();
        let mut by_name = HashMap::new();
        let level = tessera_backend_cpu::SimdLevel::from_env();
        let mut n_repacked = 0;
        // Tensors bound for each device, with the file offset of their bytes.
        let mut on_device: Vec<Vec<(TensorId, usize)>> = vec![Vec::new(); offload.devices.len()];
        // Repacked weights the CPU keeps in a layout of its own (Q4_0: eight rows
        // interleaved): copied, rearranged, into host memory instead of read from the mapping.
        let mut rearranged: Vec<(TensorId, usize)> = Vec::new();
        // 2-D weights (MUL_MAT) and 3-D expert stacks (MUL_MAT_ID), as llama.cpp's repack
        // buffer type takes both.
        let repacks = |dtype, ne: &[usize]| {
            let matrices = ne.get(3..).is_none_or(|r| r.iter().all(|&d| d == 1)) && ne[1] > 1;
            params.repack && matrices && tessera_backend_cpu::repack_applies(dtype, ne[1], level)
        };
        for info in g.tensors() {
            let ne: Vec<usize> = info.ne.iter().map(|&d| d as usize).collect();
            let id = ctx.new_tensor(info.dtype, &ne)?;
            ctx.set_name(id, &info.name);
            // llama.cpp repacks the 2-D weights its matrix products read; marking one that
            // only GET_ROWS reads (an untied token_embd) changes nothing while the bytes keep
            // the file's layout, and a token_embd tied as the output is repacked by llama.cpp
            // too (its duplicate for the output). A weight whose bytes get rearranged must
            // reach MUL_MAT only: an embedding keeps the file's layout (and, tied, the output
            // gets a rearranged copy below).
            // Only weights the CPU keeps are repacked: one placed on a device keeps the file's
            // layout (llama.cpp asks a layer's device for its buffer types, and only the CPU's
            // list has the repack type), whatever kernels that device runs.
            let device = placement::tensor_device(&info.name, &layer_plan, offload)?;
            let rearrange = tessera_backend_cpu::repack_rearranges(info.dtype);
            let embedding = info.name.contains("embd");
            let repacked =
                device.is_none() && repacks(info.dtype, &ne) && !(rearrange && embedding);
            if repacked {
                ctx.set_flags(id, Flags::REPACKED);
                n_repacked += 1;
            }
            let off = info.data_offset as usize;
            match device {
                None if repacked && rearrange => rearranged.push((id, off)),
                None => bindings.bind(&ctx, id, buffer.clone(), off)?,
                Some(d) => on_device[d].push((id, off)),
            }
            by_name.insert(info.name.clone(), id);
        }
        let mut duplicate = None;
        // Tied embeddings: the head gets a copy of token_embd of its own where it is offloaded
        // (as llama.cpp duplicates it: TENSOR_DUPLICATED), or where its repacked bytes are
        // rearranged (llama.cpp's repack buffer holds the duplicate).
        if let (Some(&emb), false) =
            (by_name.get("token_embd.weight"), by_name.contains_key("output.weight"))
        {
            let src = ctx.get(emb).clone();
            let repacked = layer_plan.output.is_none() && repacks(src.dtype, &src.ne);
            let rearrange = repacked && tessera_backend_cpu::repack_rearranges(src.dtype);
            if layer_plan.output.is_some() || rearrange {
                let id = ctx.new_tensor(src.dtype, &src.ne)?;
                ctx.set_name(id, "output.weight");
                if repacked {
                    ctx.set_flags(id, Flags::REPACKED);
                    n_repacked += usize::from(rearrange);
                }
                let off = g.tensor("token_embd.weight")?.data_offset as usize;
                match layer_plan.output {
                    Some(d) => on_device[d].push((id, off)),
                    None => rearranged.push((id, off)),
                }
                by_name.insert("output.weight".into(), id);
                duplicate = Some(id);
            }
        }
        if n_repacked > 0 {
            tracing::info!(n_repacked, "weights repacked (llama.cpp's CPU_REPACK arithmetic)");
        }
        // The bytes a weight is given: the file's, rearranged where it is repacked into a
        // layout of the CPU's own.
        let bytes = g.bytes();
        let weight_bytes = |ctx: &Context, id: TensorId, off: usize| {
            let d = ctx.get(id);
            let file = &bytes[off..off + d.n_bytes()];
            if !d.flags.contains(Flags::REPACKED)
                || !tessera_backend_cpu::repack_rearranges(d.dtype)
            {
                return std::borrow::Cow::Borrowed(file);
            }
            // Never the file's bytes under a rearranged type's flag: the rule that marked the
            // weight (`repack_applies`: rows in eights, whole blocks) is the layout's condition.
            let rows = d.ne[1] * d.ne[2] * d.ne[3];
            let v = tessera_backend_cpu::repack_layout(d.dtype, file, rows, d.ne[0]);
            std::borrow::Cow::Owned(v.expect("a repacked weight is whole groups of eight rows"))
        };
        let mut device_bytes = vec![0; offload.devices.len()];
        let host = placement::host_device();
        let lists = on_device.iter().enumerate().map(|(d, l)| (Some(d), l));
        for (d, list) in lists.chain([(None, &rearranged)]) {
            if list.is_empty() {
                continue;
            }
            let dev = d.map_or(&host, |d| &offload.devices[d]);
            let buft = dev.buffer_type();
            let ids: Vec<TensorId> = list.iter().map(|&(id, _)| id).collect();
            let mut size = 0;
            for b in alloc_tensors(&buft, &ctx, ids, &mut bindings)? {
                b.set_usage(BufferUsage::Weights);
                size += b.size();
            }
            for &(id, off) in list {
                bindings.set(&ctx, id, &weight_bytes(&ctx, id, off))?;
            }
            match d {
                Some(d) => {
                    device_bytes[d] += size;
                    tracing::info!(
                        device = dev.name(),
                        tensors = list.len(),
                        mib = size as f64 / (1 << 20) as f64,
                        "weights offloaded"
                    );
                }
                None => tracing::info!(
                    tensors = list.len(),
                    mib = size as f64 / (1 << 20) as f64,
                    "repacked weights rearranged into host memory"
                ),
            }
        }
        let weights =
            Weights { ctx, bindings, by_name, used: Arc::default(), duplicate, file: file.clone() };
        let vocab = Vocab::from_metadata(md)?;
        let graph = builder.load(&weights, &hparams)?;
        let unused = weights.unused();
        if !unused.is_empty() {
            if !params.allow_unused_tensors {
                let names = unused.into_iter().take(20).collect();
                return Err(LlamaError::UnusedTensors { arch: arch_name, names });
            }
            tracing::warn!(
                arch = %arch_name,
                tensors = %unused.join(", "),
                "ignoring tensors this architecture does not use (--allow-unused-tensors)"
            );
        }
        let name = md.get("general.name").and_then(|v| v.as_str()).unwrap_or("").to_string();
        let chat_template =
            md.get("tokenizer.chat_template").and_then(|v| v.as_str()).map(str::to_string);
        tracing::info!(arch = %arch_name, name = %name, layers = hparams.n_layer, "model loaded");
        Ok(Model {
            hparams,
            vocab,
            weights,
            graph,
            name,
            file_size: g.bytes().len(),
            chat_template,
            n_repacked,
            devices: offload.devices.clone(),
            layer_plan,
            device_bytes,
            file,
        })
    }

    /// The GGUF file's metadata.
    pub fn metadata(&self) -> &tessera_gguf::Metadata {
        self.file.0.metadata()
    }

    /// Number of parameters (elements of all weights).
    pub fn n_params(&self) -> usize {
        self.weights.in_file().map(|id| self.weights.ctx.get(id).n_elements()).sum()
    }
}
