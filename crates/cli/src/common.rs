//! What the model commands share: finding the model (the default one is fetched on first use)
//! and printing pieces as they stream.

use anyhow::{bail, Context as _, Result};
use std::io::Write;
use std::path::{Path, PathBuf};
use tessera_llama::Model;

/// The model at `path`, or the default model (SmolLM2-135M-Instruct), fetched with a progress
/// bar the first time.
pub fn resolve_model(path: Option<&Path>) -> Result<PathBuf> {
    match path {
        Some(p) => Ok(p.to_path_buf()),
        None => {
            eprintln!("no -m given: using the default model, {}", tessera_models::SMOLLM2.file);
            tessera_models::ensure(&tessera_models::SMOLLM2).context("fetching the default model")
        }
    }
}

/// Checks that `path` names a readable file before anything opens it, so the error says what
/// to do: a missing file, a directory, a file that cannot be read.
pub fn check_model_path(path: &Path) -> Result<()> {
    let shown = path.display();
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "{shown}: no such file; give the path of a GGUF model (`tessera run` without -m \
             fetches a default one)"
        ),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            bail!("{shown}: permission denied; make the file readable (chmod +r)")
        }
        Err(e) => bail!("{shown}: {e}"),
        Ok(m) if m.is_dir() => {
            bail!("{shown} is a directory; give the path of a GGUF file in it")
        }
        Ok(_) => match std::fs::File::open(path) {
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                bail!("{shown}: permission denied; make the file readable (chmod +r)")
            }
            Err(e) => bail!("{shown}: {e}"),
            Ok(_) => Ok(()),
        },
    }
}

/// One flat error line from a reader or loader error (which already names the file), with a
/// hint where one helps.
pub fn explain(e: impl std::fmt::Display) -> anyhow::Error {
    let msg = e.to_string();
    if msg.contains("cannot allocate") {
        anyhow::anyhow!(
            "{msg}; a smaller context (-c) needs less memory, and fewer offloaded layers (-ngl) \
             less device memory"
        )
    } else if msg.contains("not a GGUF file") {
        anyhow::anyhow!(
            "{msg}; tessera runs GGUF models (convert others with llama.cpp's convert_hf_to_gguf.py)"
        )
    } else {
        anyhow::anyhow!("{msg}")
    }
}

/// How the model is loaded and where it goes: llama.cpp's device and memory flags.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct OffloadArgs {
    /// Layers to put on the accelerators, counted from the output end (the output layer
    /// counts as one; default: all). A no-op, with a note, when only the CPU is present.
    #[arg(long = "n-gpu-layers", visible_alias = "gpu-layers")]
    pub n_gpu_layers: Option<usize>,
    /// Devices to offload to, comma-separated (`none`: CPU only; default: every accelerator
    /// present). `TESSERA_SIM_DEVICES=N` makes N simulated ones (SIM0..) present.
    #[arg(long = "device", value_delimiter = ',')]
    pub device: Vec<String>,
    /// Share of the offloaded layers per device, e.g. `3,1` (default: equal).
    #[arg(long = "tensor-split", value_delimiter = ',')]
    pub tensor_split: Vec<f32>,
    /// `REGEX=BUFFER_TYPE`: tensors whose name matches go to that buffer type (`CPU` or a
    /// device name), before the layer rule; repeatable.
    #[arg(long = "override-tensor")]
    pub override_tensor: Vec<String>,
    /// Keep every mixture-of-experts weight on the CPU (llama.cpp's `-cmoe`), the rest
    /// offloaded as the other flags say.
    #[arg(long = "cpu-moe")]
    pub cpu_moe: bool,
    /// Keep the mixture-of-experts weights of the first N blocks on the CPU (llama.cpp's
    /// `-ncmoe`).
    #[arg(long = "n-cpu-moe", value_name = "N")]
    pub n_cpu_moe: Option<usize>,
    /// Load a file with tensors its architecture does not use, ignoring them with a warning
    /// (by default an error: such a file is a variant Tessera does not implement, and its
    /// answers would be silently wrong).
    #[arg(long)]
    pub allow_unused_tensors: bool,
    /// Read the model into memory instead of memory-mapping it.
    #[arg(long = "no-mmap")]
    pub no_mmap: bool,
    /// Lock the model's bytes in RAM so they are never paged out (a warning where the
    /// locked-memory limit, `ulimit -l`, is too low).
    #[arg(long)]
    pub mlock: bool,
    /// `KEY=TYPE:VALUE`: replace a metadata value before the model is read (TYPE int,
    /// float, bool or str; repeatable), e.g. `tokenizer.ggml.add_bos_token=bool:false`.
    #[arg(long = "override-kv", value_name = "KEY=TYPE:VALUE")]
    pub override_kv: Vec<String>,
}

impl OffloadArgs {
    /// The [`tessera_llama::Offload`] these flags ask for.
    pub fn offload(&self, registry: &tessera_backend::Registry) -> Result<tessera_llama::Offload> {
        let devices =
            tessera_llama::placement::select_devices(registry, &self.device).map_err(explain)?;
        if devices.is_empty() && self.n_gpu_layers.is_some_and(|n| n > 0) {
            eprintln!(
                "note: -ngl {} has no effect: no accelerator is present (CPU only)",
                self.n_gpu_layers.unwrap_or(0)
            );
        }
        let mut overrides = self
            .override_tensor
            .iter()
            .map(|s| tessera_llama::TensorOverride::parse(s).map_err(explain))
            .collect::<Result<Vec<_>>>()?;
        if self.cpu_moe {
            overrides.push(tessera_llama::TensorOverride::cpu_moe());
        }
        overrides.extend(tessera_llama::TensorOverride::n_cpu_moe(self.n_cpu_moe.unwrap_or(0)));
        Ok(tessera_llama::Offload {
            devices,
            n_gpu_layers: self.n_gpu_layers.unwrap_or(usize::MAX / 2),
            tensor_split: self.tensor_split.clone(),
            overrides,
        })
    }
}

/// Loads a model, naming the file once in any error, with a hint where one helps.
/// `no_repack` is llama.cpp's `--no-repack`: weights it would repack keep the plain kernels.
pub fn load(path: &Path, no_repack: bool, offload: &OffloadArgs) -> Result<Model> {
    check_model_path(path)?;
    let registry = crate::devices::registry();
    let params = tessera_llama::LoadParams {
        host: crate::devices::host(&registry),
        offload: offload.offload(&registry)?,
        repack: !no_repack,
        allow_unused_tensors: offload.allow_unused_tensors,
        mmap: !offload.no_mmap,
        mlock: offload.mlock,
        kv_overrides: offload
            .override_kv
            .iter()
            .map(|s| s.parse::<tessera_llama::KvOverride>().map_err(|e| anyhow::anyhow!("{e}")))
            .collect::<Result<_>>()?,
    };
    Model::load_with(path, &params).map_err(explain)
}

/// The backends a model runs on, llama-bench's column: `SIM0,CPU`, or `CPU`.
pub fn backends(model: &Model) -> String {
    let mut names: Vec<&str> = model.devices.iter().map(|d| d.name()).collect();
    names.push("CPU");
    names.join(",")
}

/// `-ngl` as llama-bench prints it: the layers on accelerators (0 on the CPU alone).
pub fn ngl(model: &Model) -> usize {
    let p = &model.layer_plan;
    p.layers.iter().filter(|l| l.is_some()).count() + usize::from(p.output.is_some())
}

/// Opens a GGUF file (memory-mapped), with the same checks and messages as [`load`].
pub fn open_gguf(path: &Path) -> Result<tessera_gguf::GgufFile> {
    check_model_path(path)?;
    tessera_gguf::GgufFile::open(path).map_err(explain)
}

/// Threads to use: `n`, or every core.
pub fn threads(n: Option<usize>) -> usize {
    n.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1)
}

/// Writes token pieces to stdout as soon as they form whole UTF-8 characters
/// ([`tessera_llama::TextStream`], the server's too).
#[derive(Default)]
pub struct Streamer {
    stream: tessera_llama::TextStream,
}

impl Streamer {
    /// Adds a piece's bytes and prints what is complete.
    pub fn push(&mut self, bytes: &[u8]) {
        let text = self.stream.push_bytes(bytes).text;
        self.write(&text);
    }

    /// Adds sampled token `tok` and prints what is complete; `true` when it ends the reply
    /// (an end-of-generation token, which prints nothing).
    pub fn push_token(&mut self, vocab: &tessera_llama::Vocab, tok: u32) -> bool {
        let chunk = self.stream.push_token(vocab, tok);
        self.write(&chunk.text);
        chunk.end.is_some()
    }

    fn write(&self, text: &str) {
        let mut so = std::io::stdout().lock();
        let _ = so.write_all(text.as_bytes());
        let _ = so.flush();
    }

    /// Prints whatever is left (an incomplete character as U+FFFD) and ends the line; the
    /// next piece starts a new stream.
    pub fn finish(&mut self) {
        let rest = std::mem::take(&mut self.stream).finish();
        print!("{rest}");
        println!();
    }
}

/// Human size: `91.94 MiB`.
pub fn human_bytes(n: usize) -> String {
    let n = n as f64;
    if n >= 1024.0 * 1024.0 * 1024.0 {
        format!("{:.2} GiB", n / (1024.0 * 1024.0 * 1024.0))
    } else {
        format!("{:.2} MiB", n / (1024.0 * 1024.0))
    }
}

/// The CPU's model name (`/proc/cpuinfo` on Linux), or `unknown`.
pub fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// The SIMD level the kernels run at (`TESSERA_SIMD` lowers it) and whether they use VNNI
/// (the AVX-512 level on a CPU with it).
pub fn simd() -> (tessera_backend_cpu::SimdLevel, bool) {
    let level = tessera_backend_cpu::SimdLevel::from_env();
    (level, level == tessera_backend_cpu::SimdLevel::Avx512 && tessera_backend_cpu::has_vnni())
}

/// [`simd`] as one word: `avx2`, `avx512+vnni`, ...
pub fn simd_level() -> String {
    let (level, vnni) = simd();
    format!("{level}{}", if vnni { "+vnni" } else { "" })
}

/// The matrix products' paths for `model`'s weights on `level` (`run -v`): per weight type
/// and layout, the path of one activation row (decoding) and of a prompt's `n_prompt` rows
/// (`tessera_backend_cpu::plan`).
pub fn matmul_paths(
    model: &Model,
    level: tessera_backend_cpu::SimdLevel,
    n_prompt: usize,
) -> String {
    use tessera_backend_cpu::plan::{plan, Batch, Cpu, Weight};
    let w = &model.weights;
    let mut kinds: Vec<Weight> = Vec::new();
    for id in w.ctx.ids() {
        let d = w.ctx.get(id);
        let Some(s) = w.bindings.storage(&w.ctx, id) else { continue };
        let repacked = tessera_backend_cpu::is_repacked(&*s.buffer);
        // Matrices (and expert stacks) on the CPU; norms and biases are vectors.
        if d.ne[1] < 2 || d.ne[3] != 1 || !(s.buffer.is_host() || repacked) {
            continue;
        }
        // A stack of experts is multiplied matrix by matrix (MUL_MAT_ID).
        let k = Weight { dtype: d.dtype, matrix: true, repacked };
        if !kinds.contains(&k) {
            kinds.push(k);
        }
    }
    let cpu = Cpu::at(level);
    kinds
        .iter()
        .map(|&k| {
            let layout = if k.repacked { " (repacked)" } else { "" };
            format!(
                "  {}{layout}: 1 row {}, {n_prompt} rows {}",
                k.dtype,
                plan(k, Batch::matrix(1), cpu),
                plan(k, Batch::matrix(n_prompt.max(1)), cpu)
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// One line on what runs: CPU, SIMD level and kernel family (llama-bench's system info), as
/// the model's host device describes itself.
pub fn system_info(model: &Model) -> String {
    format!("CPU: {}", model.host.description())
}

/// The KV cache's types: llama.cpp's `-ctk/--cache-type-k` and `-ctv/--cache-type-v`.
#[derive(clap::Args, Debug, Clone)]
pub struct CacheArgs {
    /// K cache type: f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0 or q5_1.
    #[arg(long = "cache-type-k", value_name = "TYPE", default_value = "f16")]
    pub cache_type_k: String,
    /// V cache type, as the K one's (a quantized V needs flash attention).
    #[arg(long = "cache-type-v", value_name = "TYPE", default_value = "f16")]
    pub cache_type_v: String,
}

/// The cache types llama.cpp accepts (`kv_cache_types` of its argument parser).
pub const CACHE_TYPES: [tessera_tensor::DType; 9] = {
    use tessera_tensor::DType::*;
    [F32, F16, BF16, Q8_0, Q4_0, Q4_1, IQ4_NL, Q5_0, Q5_1]
};

/// `name` as a cache type (`flag` names the option in the error).
pub fn cache_type(name: &str, flag: &str) -> Result<tessera_tensor::DType> {
    CACHE_TYPES.iter().copied().find(|t| t.name().eq_ignore_ascii_case(name)).ok_or_else(|| {
        let names: Vec<String> = CACHE_TYPES.iter().map(|t| t.name().to_lowercase()).collect();
        anyhow::anyhow!("{flag} {name}: unsupported cache type (one of {})", names.join(", "))
    })
}

/// The (K, V) types, checked with flash attention `flash_attn` as llama.cpp checks them: a
/// quantized V cache needs flash attention.
pub fn cache_types(
    k: &str,
    v: &str,
    flash_attn: bool,
) -> Result<(tessera_tensor::DType, tessera_tensor::DType)> {
    let (k, v) = (cache_type(k, "--cache-type-k")?, cache_type(v, "--cache-type-v")?);
    if v.block_size() > 1 && !flash_attn {
        anyhow::bail!(
            "--cache-type-v {}: V cache quantization requires flash attention (-fa on or auto)",
            v.name().to_lowercase()
        );
    }
    Ok((k, v))
}

impl CacheArgs {
    /// The (K, V) types of these flags ([`cache_types`]).
    pub fn types(
        &self,
        flash_attn: bool,
    ) -> Result<(tessera_tensor::DType, tessera_tensor::DType)> {
        cache_types(&self.cache_type_k, &self.cache_type_v, flash_attn)
    }
}

/// The KV cache's size as llama.cpp's log line gives it: `n_ctx` cells of every layer, K and V
/// of their types (`size = … MiB (… cells, … layers), K (q8_0): … MiB, V (q8_0): … MiB`).
pub fn kv_cache_line(
    model: &Model,
    n_ctx: usize,
    (k, v): (tessera_tensor::DType, tessera_tensor::DType),
) -> String {
    let hp = &model.hparams;
    let bytes = |t: tessera_tensor::DType, width: usize| {
        t.row_size(width as u64).unwrap_or(0) as usize * n_ctx
    };
    let kb: usize = (0..hp.n_layer).map(|il| bytes(k, hp.n_embd_k_gqa(il))).sum();
    let vb: usize = (0..hp.n_layer).map(|il| bytes(v, hp.n_embd_v_gqa(il))).sum();
    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    format!(
        "KV cache: size = {:.2} MiB ({n_ctx} cells, {} layers), K ({}): {:.2} MiB, V ({}): {:.2} MiB",
        mib(kb + vb),
        hp.n_layer,
        k.name(),
        mib(kb),
        v.name(),
        mib(vb)
    )
}
