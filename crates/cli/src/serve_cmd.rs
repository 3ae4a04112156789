//! `tessera serve`: the OpenAI-compatible server (llama-server), flags as llama-server's.

use crate::common;
use anyhow::{Context as _, Result};
use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;

/// Options of `tessera serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Model file (GGUF); default: SmolLM2-135M-Instruct.
    #[arg(short = 'm', long)]
    model: Option<PathBuf>,
    /// The model's multimodal projector (GGUF mmproj file, llama-server's -mm): chat requests
    /// may then hold images (OpenAI image_url parts with data: URLs, Anthropic image blocks,
    /// Responses input_image, /completion's multimodal_data).
    #[arg(long = "mmproj", value_name = "FILE")]
    mmproj: Option<PathBuf>,
    /// Keep the vision encoder on the CPU when the model's layers are offloaded.
    #[arg(long = "no-mmproj-offload")]
    no_mmproj_offload: bool,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port.
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// KV cache cells, one unified cache the slots share (one request may use them all);
    /// 0: the model's training context.
    #[arg(short = 'c', long = "ctx-size", default_value_t = 4096)]
    ctx_size: usize,
    /// Slots: requests decoded together (continuous batching), 1 or more.
    #[arg(long = "parallel", default_value_t = 4)]
    parallel: usize,
    /// The model's name in `/v1/models` and replies (default: the file's name).
    #[arg(short = 'a', long = "alias")]
    alias: Option<String>,
    /// Seconds running replies may take to finish after SIGINT/SIGTERM; then (or at a second
    /// signal) they end with a 503 and the server exits.
    #[arg(long = "shutdown-timeout", default_value_t = 10.0)]
    shutdown_timeout: f64,
    /// Same answers under any load: a request gets the same tokens alone or among others, at
    /// any -b and -np (batch-invariant kernels: no tiled attention or tiled K-quant order;
    /// costs prompt-processing speed). Without it, the kernels are llama.cpp's, whose choice
    /// depends on the step's size.
    #[arg(long)]
    deterministic: bool,
    /// Where a reply's `<think>...</think>` goes: `deepseek` (or `auto`) into
    /// `reasoning_content`, `none` left in `content` (llama-server's flag).
    #[arg(long = "reasoning-format", default_value = "auto", value_parser = ["auto", "deepseek", "none"])]
    reasoning_format: String,
    /// Most tokens a reply may spend inside `<think>`; then the end of thinking is forced
    /// (-1: no limit; 0: closed as soon as opened). A request's `thinking_budget_tokens`
    /// overrides it.
    #[arg(long = "reasoning-budget", default_value_t = -1, allow_negative_numbers = true)]
    reasoning_budget: i32,
    /// Text put before the forced `</think>` when the reasoning budget is spent.
    #[arg(long = "reasoning-budget-message")]
    reasoning_budget_message: Option<String>,
    /// Thinking on or off through the chat template's `enable_thinking` (auto: on).
    #[arg(long = "reasoning", default_value = "auto", value_parser = ["on", "off", "auto"])]
    reasoning: String,
    /// Serve embeddings (`/v1/embeddings`, `/embedding`) instead of generating, as
    /// llama-server's --embeddings; the generating endpoints then answer 501.
    #[arg(long = "embedding", visible_alias = "embeddings")]
    embedding: bool,
    /// How embeddings pool a sequence's tokens: none, mean, cls, last (default: the model's
    /// `pooling_type`, else none). Needs --embedding.
    #[arg(long = "pooling", value_parser = ["none", "mean", "cls", "last", "rank"])]
    pooling: Option<String>,
    /// MiB of host memory for prompts dropped from the slots: a later request with the same
    /// beginning gets them back instead of computing them (-1: no limit, 0: off).
    #[arg(long = "cache-ram", default_value_t = 8192, allow_negative_numbers = true)]
    cache_ram: i64,
    /// No log output (llama.cpp's --log-disable); by default one line per request.
    #[arg(long = "log-disable")]
    pub log_disable: bool,
    /// Threads (default: every core).
    #[arg(short = 't', long)]
    threads: Option<usize>,
    /// Most tokens decoded per step (generating slots' next tokens plus prompt chunks). Under
    /// 64, a request's answer does not depend on what shares its steps (no step is large
    /// enough for the tiled flash attention), except on K-quant, IQ4_XS and IQ1/IQ2/IQ3
    /// models, whose batches of 8+ rows take llama.cpp's tiled order.
    #[arg(short = 'b', long = "batch-size", default_value_t = 512)]
    batch_size: usize,
    /// Requests that may wait for a free slot before new ones get 503.
    #[arg(long = "queue", default_value_t = 64)]
    queue: usize,
    /// Require `Authorization: Bearer KEY` (or `X-Api-Key: KEY`) on every endpoint but
    /// /health; several keys comma-separated. Default: $LLAMA_API_KEY, as llama-server (a
    /// key on the command line shows in `ps`; prefer the variable or --api-key-file).
    #[arg(long = "api-key")]
    api_key: Option<String>,
    /// A file of API keys, one per line (llama-server's flag); joins --api-key's.
    #[arg(long = "api-key-file")]
    api_key_file: Option<PathBuf>,
    /// Seconds a request body may take to arrive, and a blocked write to a client (a stream it
    /// stopped reading) may take to make progress, before the connection is closed
    /// (llama-server's -to/--timeout).
    #[arg(long = "timeout", default_value_t = 600.0)]
    timeout: f64,
    /// Seconds a request's headers may take to arrive before the connection is closed.
    #[arg(long = "header-timeout", default_value_t = 10.0)]
    header_timeout: f64,
    /// Most connections open at once; more are closed as they arrive (0: half the process's
    /// open-file limit, at most 4096).
    #[arg(long = "max-connections", default_value_t = 0)]
    max_connections: usize,
    /// An origin browsers may call the server from (repeat for several); default any origin,
    /// with credentials, as llama-server.
    #[arg(long = "cors-origin")]
    cors_origin: Vec<String>,
    /// A Jinja chat template to use instead of the model's.
    #[arg(long = "chat-template-file")]
    chat_template_file: Option<PathBuf>,
    /// Flash attention: on, off or auto (llama.cpp's `-fa`; auto is on: every model
    /// Tessera runs supports it on every backend).
    #[arg(long = "flash-attn", default_value = "auto", value_parser = ["on", "off", "auto"])]
    flash_attn: String,
    /// Keep weights llama.cpp would repack on the plain kernels (llama.cpp's --no-repack).
    #[arg(long = "no-repack")]
    no_repack: bool,
    /// Device placement (`-ngl`, `--device`, `-ts`, `-ot`).
    #[command(flatten)]
    offload: common::OffloadArgs,
    /// The KV cache's types (`-ctk`, `-ctv`).
    #[command(flatten)]
    cache: common::CacheArgs,
    /// Sampling defaults for what a request does not give (llama-server's flags).
    #[command(flatten)]
    sampling: crate::sampling_args::SamplingArgs,
    /// LoRA adapters (`--lora`, `--lora-scaled`), listed by `GET /lora-adapters`.
    #[command(flatten)]
    lora: crate::lora_args::LoraArgs,
    /// Load the LoRA adapters at scale 0 (apply them later with `POST /lora-adapters`, or a
    /// request's `lora`).
    #[arg(long = "lora-init-without-apply")]
    lora_init_without_apply: bool,
    /// A reply that fills the context drops the oldest tokens after the request's `n_keep`
    /// and goes on (llama-server's `--context-shift`; default off: it ends with `length`).
    #[arg(long = "context-shift", overrides_with = "no_context_shift")]
    context_shift: bool,
    /// End a reply that fills the context (the default).
    #[arg(long = "no-context-shift")]
    no_context_shift: bool,
    /// Speculative decoding per slot (`--spec-type`, `-md`, ...).
    #[command(flatten)]
    spec: crate::spec_args::SpecArgs,
}

/// The API keys: --api-key (else $LLAMA_API_KEY) and the lines of --api-key-file, joined by
/// commas as `ServerConfig::api_key` takes them; an empty key is refused there.
fn api_keys(a: &ServeArgs) -> Result<Option<String>> {
    let mut keys: Vec<String> = Vec::new();
    match &a.api_key {
        Some(k) => keys.push(k.clone()),
        None => keys.extend(std::env::var("LLAMA_API_KEY").ok()),
    }
    if let Some(f) = &a.api_key_file {
        let text = std::fs::read_to_string(f)
            .with_context(|| format!("--api-key-file {}", f.display()))?;
        let lines: Vec<String> =
            text.lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect();
        if lines.is_empty() {
            anyhow::bail!("--api-key-file {}: no key in the file", f.display());
        }
        if let Some(l) = lines.iter().find(|l| l.contains(',')) {
            anyhow::bail!(
                "--api-key-file {}: a key may not contain a comma ({} characters)",
                f.display(),
                l.len()
            );
        }
        keys.extend(lines);
    }
    Ok((!keys.is_empty()).then(|| keys.join(",")))
}

/// Runs the server until SIGINT or SIGTERM.
pub fn run(a: ServeArgs) -> Result<()> {
    let path = common::resolve_model(a.model.as_deref())?;
    let model = Arc::new(common::load(&path, a.no_repack, &a.offload)?);
    let vision = match &a.mmproj {
        Some(p) => {
            let threads = common::threads(a.threads);
            use tessera_server::vision::Vision as _;
            let v = crate::serve_vision::MtmdVision::load(
                p,
                model.clone(),
                threads,
                !a.no_mmproj_offload,
            )?;
            eprintln!("tessera serve: images on ({} projector, {})", v.name(), p.display());
            Some(tessera_server::vision::VisionHandle(Arc::new(v)))
        }
        None => None,
    };
    let spec = a.spec.server_config(&model, a.no_repack)?;
    let chat_template = match &a.chat_template_file {
        Some(f) => {
            Some(std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?)
        }
        None => None,
    };
    let name = match &a.alias {
        Some(n) => n.clone(),
        None => path.file_name().map_or("model".into(), |n| n.to_string_lossy().into_owned()),
    };
    let seconds = |flag: &str, v: f64, min: f64| {
        if v >= min && v.is_finite() && v < 1e9 {
            Ok(std::time::Duration::from_secs_f64(v))
        } else {
            Err(anyhow::anyhow!("{flag} {v}: give seconds, {min} or more"))
        }
    };
    let shutdown_timeout = seconds("--shutdown-timeout", a.shutdown_timeout, 0.0)?;
    let hardening = tessera_server::listen::Hardening {
        timeout: seconds("--timeout", a.timeout, 1.0)?,
        header_timeout: seconds("--header-timeout", a.header_timeout, 1.0)?,
        max_connections: a.max_connections,
        cors_origins: a.cors_origin.clone(),
    };
    let api_key = api_keys(&a)?;
    let cfg = tessera_server::ServerConfig {
        host: a.host.clone(),
        port: a.port,
        n_ctx: a.ctx_size,
        n_parallel: a.parallel,
        n_threads: common::threads(a.threads),
        flash_attn: a.flash_attn != "off",
        cache_types: a.cache.types(a.flash_attn != "off")?,
        sampling: tessera_server::api::sampling::Sampling::from_params(
            // Built once here so a bad combination (`--samplers infill`) fails at start.
            &{
                a.sampling.chain(&model.vocab)?;
                a.sampling.params()?
            },
            a.sampling.order()?,
            &a.sampling.bias(&model.vocab)?,
        ),
        queue: a.queue,
        n_batch: a.batch_size,
        api_key,
        deterministic: a.deterministic,
        reasoning_format: if a.reasoning_format == "none" {
            tessera_server::reasoning::ReasoningFormat::None
        } else {
            tessera_server::reasoning::ReasoningFormat::Deepseek
        },
        reasoning_budget: a.reasoning_budget,
        reasoning_budget_message: a.reasoning_budget_message.clone(),
        reasoning: match a.reasoning.as_str() {
            "on" => Some(true),
            "off" => Some(false),
            _ => None,
        },
        embedding: a.embedding,
        cache_ram_mib: a.cache_ram,
        pooling: a.pooling.as_deref().map(tessera_llama::Pooling::parse).transpose()?,
        chat_template,
        model_name: name,
        shutdown_timeout,
        hardening,
        loras: a.lora.load(&model)?,
        lora_init_without_apply: a.lora_init_without_apply,
        context_shift: a.context_shift && !a.no_context_shift,
        spec,
        vision,
    };
    let server = tessera_server::start(model, cfg, true).map_err(common::explain)?;
    if a.embedding {
        eprintln!(
            "tessera serve: listening on http://{} (embeddings at /v1/embeddings and /embedding, \
             up to {} inputs per batch)",
            server.addr, a.parallel
        );
    } else {
        eprintln!(
            "tessera serve: listening on http://{} ({} slots sharing a {}-token context; chat \
             page at /, OpenAI API at /v1)",
            server.addr, a.parallel, server.n_ctx
        );
    }
    server.wait();
    eprintln!("tessera serve: stopped");
    Ok(())
}
