//! A loaded model: the mapped GGUF file, its hyperparameters, vocabulary, and every weight as a
//! leaf of a base graph context, bound zero-copy to the file's mapping.

use crate::arch::{self, ModelGraph};
use crate::hparams::HParams;
use crate::placement::{self, LayerPlan, Offload};
use crate::weights::{MappedFile, Weights};
use crate::{LlamaError, Result};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use tessera_alloc::alloc_tensors;
use tessera_backend::{Bindings, BufferUsage, Device, MappedBuffer};
use tessera_gguf::GgufFile;
use tessera_tensor::graph::{Context, TensorDesc, TensorId};
use tessera_vocab::Vocab;

/// How a model is loaded.
#[derive(Clone)]
pub struct LoadParams {
    /// The host CPU as a device, from the registry the program composes: the weights no
    /// device takes stay with it (offered first to its extra buffer types, such as the CPU
    /// backend's repacked layout), and every graph ends on its backend. Only the program knows
    /// which backend crate provides it (`tessera_backend_cpu::CpuDevice`).
    pub host: Arc<dyn Device>,
    /// Which weights go to which device (`-ngl`, `-ts`, `--device`, `-ot`); CPU only by
    /// default.
    pub offload: Offload,
    /// Offer the weights the CPU keeps to the host device's extra buffer types
    /// ([`Device::extra_buffer_types`]: for the CPU backend, llama.cpp's repack buffer, whose
    /// products follow ggml's repacked kernels' arithmetic). `false` is llama.cpp's
    /// `--no-repack` (`use_extra_bufts = false`).
    pub repack: bool,
    /// Load a file that has tensors the architecture does not use, ignoring them with a
    /// warning (by default that is an error: a variant Tessera does not implement).
    pub allow_unused_tensors: bool,
    /// Memory-map the file (the default); `false` reads it whole into memory first
    /// (llama.cpp's `--no-mmap`).
    pub mmap: bool,
    /// Lock the file's bytes in RAM (llama.cpp's `--mlock`); where the system refuses (the
    /// locked-memory limit), a warning says so and the model loads unlocked, as llama.cpp's.
    pub mlock: bool,
    /// Metadata values replaced before the model is read (llama.cpp's `--override-kv`).
    pub kv_overrides: Vec<crate::KvOverride>,
}

impl LoadParams {
    /// llama.cpp's defaults (CPU only, repacking on) with `host` as the CPU.
    pub fn new(host: Arc<dyn Device>) -> Self {
        LoadParams {
            host,
            offload: Offload::default(),
            repack: true,
            allow_unused_tensors: false,
            mmap: true,
            mlock: false,
            kv_overrides: Vec::new(),
        }
    }
}

impl std::fmt::Debug for LoadParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadParams")
            .field("host", &self.host.name())
            .field("offload", &self.offload)
            .field("repack", &self.repack)
            .field("allow_unused_tensors", &self.allow_unused_tensors)
            .field("mmap", &self.mmap)
            .field("mlock", &self.mlock)
            .field("kv_overrides", &self.kv_overrides)
            .finish()
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
    /// How many weights the host device's extra buffer types hold ([`LoadParams::repack`]).
    pub n_repacked: usize,
    /// The devices weights were offloaded to (priority order; the CPU is implied, last).
    pub devices: Vec<Arc<dyn Device>>,
    /// Which device holds each layer (weights and KV cache); `None` is the CPU.
    pub layer_plan: LayerPlan,
    /// Bytes of weights on each device of [`devices`](Model::devices).
    pub device_bytes: Vec<usize>,
    /// The host CPU device ([`LoadParams::host`]): contexts compute on its backend last.
    pub host: Arc<dyn Device>,
    offload: Offload,
    file: Arc<MappedFile>,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model").field("arch", &self.hparams.arch).field("name", &self.name).finish()
    }
}

impl Model {
    /// Loads a GGUF model with llama.cpp's defaults ([`LoadParams::new`]) and `host` as the
    /// CPU: maps the file, reads hyperparameters and vocabulary, binds every tensor in place
    /// and lets the registered architecture pick and check its weights.
    pub fn load(path: impl AsRef<Path>, host: Arc<dyn Device>) -> Result<Model> {
        Self::load_with(path, &LoadParams::new(host))
    }

    /// [`Model::load`] with explicit [`LoadParams`].
    pub fn load_with(path: impl AsRef<Path>, params: &LoadParams) -> Result<Model> {
        let path = path.as_ref();
        let gguf_error = |source| LlamaError::Gguf { path: path.display().to_string(), source };
        let gguf = if params.mmap { GgufFile::open(path) } else { GgufFile::read(path) }
            .map_err(gguf_error)?;
        if params.mlock {
            if let Err(e) = gguf.lock() {
                tracing::warn!(
                    file = %path.display(),
                    error = %e,
                    "--mlock: the model could not be locked in RAM (raise the locked-memory \
                     limit, ulimit -l); it stays unlocked"
                );
            }
        }
        Self::from_gguf_with(gguf, params)
    }

    /// [`Model::load`] from an opened file.
    pub fn from_gguf(gguf: GgufFile, host: Arc<dyn Device>) -> Result<Model> {
        Self::from_gguf_with(gguf, &LoadParams::new(host))
    }

    /// [`Model::load_with`] from an opened file.
    pub fn from_gguf_with(mut gguf: GgufFile, params: &LoadParams) -> Result<Model> {
        for o in &params.kv_overrides {
            o.apply(gguf.metadata_mut())?;
        }
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
        // The host's extra buffer types (llama.cpp's `make_cpu_buft_list`), offered each weight
        // the CPU keeps, in order; what none takes stays in the file's mapping.
        let extras = if params.repack { params.host.extra_buffer_types() } else { Vec::new() };
        let mut n_repacked = 0;
        // Tensors bound for each device, and for each extra buffer type, with the file offset
        // of their bytes (copied in at the end).
        let mut on_device: Vec<Vec<(TensorId, usize)>> = vec![Vec::new(); offload.devices.len()];
        let mut in_extra: Vec<Vec<(TensorId, usize)>> = vec![Vec::new(); extras.len()];
        // The first extra buffer type that takes weight `desc`; an embedding (read by
        // GET_ROWS) only by one that keeps the file's layout.
        let extra_for = |desc: &TensorDesc, embedding: bool| {
            extras
                .iter()
                .position(|b| b.supports_weight(desc) && (!embedding || b.keeps_layout(desc)))
        };
        for info in g.tensors() {
            let ne: Vec<usize> = info.ne.iter().map(|&d| d as usize).collect();
            let id = ctx.new_tensor(info.dtype, &ne)?;
            ctx.set_name(id, &info.name);
            // Only weights the CPU keeps go to its extra buffer types: one placed on a device
            // keeps the file's layout (llama.cpp asks a layer's device for its buffer types,
            // and only the CPU's list has the repack type), whatever kernels that device runs.
            // A tied token_embd is an embedding here; the output gets a copy of its own below.
            let device = placement::tensor_device(&info.name, &layer_plan, offload)?;
            let embedding = info.name.contains("embd");
            let extra = if device.is_none() { extra_for(ctx.get(id), embedding) } else { None };
            let off = info.data_offset as usize;
            match (device, extra) {
                (Some(d), _) => on_device[d].push((id, off)),
                (None, Some(e)) => in_extra[e].push((id, off)),
                (None, None) => bindings.bind(&ctx, id, buffer.clone(), off)?,
            }
            by_name.insert(info.name.clone(), id);
        }
        let mut duplicate = None;
        // Tied embeddings: the head gets a copy of token_embd of its own where it is offloaded
        // (as llama.cpp duplicates it: TENSOR_DUPLICATED), or where an extra buffer type that
        // rearranges its bytes takes it (llama.cpp's repack buffer holds the duplicate).
        if let (Some(&emb), false) =
            (by_name.get("token_embd.weight"), by_name.contains_key("output.weight"))
        {
            let src = ctx.get(emb).clone();
            let extra = match layer_plan.output {
                None => extra_for(&src, false).filter(|&e| !extras[e].keeps_layout(&src)),
                Some(_) => None,
            };
            if layer_plan.output.is_some() || extra.is_some() {
                let id = ctx.new_tensor(src.dtype, &src.ne)?;
                ctx.set_name(id, "output.weight");
                let off = g.tensor("token_embd.weight")?.data_offset as usize;
                match (layer_plan.output, extra) {
                    (Some(d), _) => on_device[d].push((id, off)),
                    (None, Some(e)) => in_extra[e].push((id, off)),
                    (None, None) => unreachable!("a copy is made for a device or a buffer type"),
                }
                by_name.insert("output.weight".into(), id);
                duplicate = Some(id);
            }
        }
        // Every tensor of a device or an extra buffer type: allocated in its buffer type, then
        // its bytes copied in from the file (`set_tensor`: a buffer type with a layout of its
        // own rearranges them).
        let bytes = g.bytes();
        let mut device_bytes = vec![0; offload.devices.len()];
        let lists = on_device
            .iter()
            .enumerate()
            .map(|(d, l)| (Some(d), offload.devices[d].buffer_type(), l))
            .chain(in_extra.iter().zip(&extras).map(|(l, b)| (None, b.clone(), l)));
        for (d, buft, list) in lists {
            if list.is_empty() {
                continue;
            }
            let ids: Vec<TensorId> = list.iter().map(|&(id, _)| id).collect();
            let mut size = 0;
            for b in alloc_tensors(&buft, &ctx, ids, &mut bindings)? {
                b.set_usage(BufferUsage::Weights);
                size += b.size();
            }
            for &(id, off) in list {
                bindings.set(&ctx, id, &bytes[off..off + ctx.get(id).n_bytes()])?;
            }
            let mib = size as f64 / (1 << 20) as f64;
            match d {
                Some(d) => {
                    device_bytes[d] += size;
                    let device = offload.devices[d].name();
                    tracing::info!(device, tensors = list.len(), mib, "weights offloaded");
                }
                None => {
                    n_repacked += list.len();
                    let buffer_type = buft.name();
                    tracing::info!(buffer_type, tensors = list.len(), mib, "weights repacked");
                }
            }
        }
        let weights = Weights::new(ctx, bindings, by_name, duplicate, file.clone());
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
            host: params.host.clone(),
            offload: params.offload.clone(),
            file,
        })
    }

    /// The GGUF file's metadata.
    pub fn metadata(&self) -> &tessera_gguf::Metadata {
        self.file.0.metadata()
    }

    /// The placement the model was loaded with (LoRA adapters follow it).
    pub fn offload(&self) -> &Offload {
        &self.offload
    }

    /// Number of parameters (elements of all weights).
    pub fn n_params(&self) -> usize {
        self.weights.in_file().map(|id| self.weights.ctx.get(id).n_elements()).sum()
    }
}
