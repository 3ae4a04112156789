//! # tessera-server
//!
//! `tessera serve`: llama-server's role. An HTTP server (tokio + axum) that OpenAI client
//! libraries, editor plugins and chat front ends can talk to, over a tessera-llama model.
//!
//! - OpenAI endpoints: `POST /v1/chat/completions` (the GGUF's chat template; streaming as
//!   server-sent events ending `data: [DONE]`), `POST /v1/completions`, `GET /v1/models`;
//!   llama-server's `GET /health`, `POST /tokenize`, `POST /detokenize`, `GET /metrics`
//!   (Prometheus text) and its sampling fields (`top_k`, `min_p`, `repeat_penalty`,
//!   `n_probs`); a chat page at `/`.
//! - **Continuous batching** ([`engine`]): `-np` slots share one unified KV cache as
//!   sequences (one request may use all of `-c`, as in llama-server); every
//!   step decodes one token of each generating slot together with prompt chunks of newly
//!   arrived requests. A bounded queue answers 503 when full. A slot keeps its cells after a
//!   request, so the next request with the same beginning (a multi-turn chat) evaluates only
//!   the new part.
//! - **Bad input** gets a 4xx with OpenAI's error object naming the field ([`api`]), never a
//!   panic; bodies over 1 MiB get 413; with `--api-key` every endpoint but `/health` needs
//!   the bearer key (or `X-Api-Key`); a client that disconnects frees its slot at the next
//!   step; SIGINT or SIGTERM stops accepting connections and lets running replies finish
//!   within a deadline (`--shutdown-timeout`), after which, or at a second signal, they end
//!   with a 503 and every connection still open is closed ([`http::listen`]: header and body
//!   timeouts, a connection cap, clients that stop reading cut off).
//! - Agents' APIs: tool calls (`tools`, `tool_choice`, `tool_calls`; [`chat::tools`]), reasoning
//!   apart from the answer ([`chat::reasoning`]), Anthropic's `POST /v1/messages` ([`api::anthropic`])
//!   and OpenAI's `POST /v1/responses` ([`api::responses`]), all over the same engine.
//! - Embeddings with `--embedding` ([`api::embeddings`]): `POST /v1/embeddings` and llama-server's
//!   `POST /embedding`, pooled by `--pooling` (mean, cls, last, none).
//! - Images with a projector ([`vision`]): the binary hands the server a [`vision::Vision`]
//!   (the server knows no projector); `image_url` parts, Anthropic `image` blocks, Responses
//!   `input_image` and `/completion`'s `multimodal_data` become images in the prompt, cached by
//!   their content hash as tokens are.
//! - llama-server's own endpoints too: `/completion`, `/infill` (the model's FIM tokens),
//!   `/apply-template`, `/props`, `/slots`; CORS for browser front ends on other origins; one
//!   log line per request and per finished generation (`RUST_LOG`), and llama-server's
//!   `timings` in every reply.
//!
//! The crate's rooms: [`api`] (the router and one module per API, with the requests they
//! read and the generating flow they share), [`chat`] (templates, prompts, tools, reasoning,
//! constraints: what a chat is and how its reply is taken apart), [`engine`] (the thread that
//! owns the model's context: slots, batching, sampling, the prompt cache), [`http`] (state,
//! middleware, the accept loop, streaming), and [`error`] (the server's and the requests'
//! error types). A request enters at [`api::router`]; a token leaves the engine's
//! `Worker::step` as an [`engine::Event`] on the request's channel.
//!
//! Design decisions: one engine thread owns the model's context (the model runs many threads
//! of its own; HTTP handlers never block on it), and talks to handlers through a bounded
//! crossbeam queue (jobs in) and per-request tokio channels (events out). Request bodies are
//! read as JSON values and checked field by field, so every error names its field.

#![deny(missing_docs)]

pub mod api;
pub mod chat;
pub mod engine;
pub mod error;
pub mod http;
mod ids;
mod json;
pub mod metrics;
pub mod response_store;
pub mod vision;

pub use chat::reasoning;
pub use http::listen;

pub use error::{ApiError, Result, ServerError};

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tessera_llama::Model;

/// How the server runs (`tessera serve`'s flags, as llama-server's).
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address to listen on (127.0.0.1 unless told otherwise).
    pub host: String,
    /// Port (0: any free one).
    pub port: u16,
    /// KV cells in all, shared by the slots.
    pub n_ctx: usize,
    /// Slots (`-np`).
    pub n_parallel: usize,
    /// CPU threads.
    pub n_threads: usize,
    /// Flash attention.
    pub flash_attn: bool,
    /// Sampling defaults for the fields a request does not give (llama-server's sampling
    /// flags; `Sampling::default()` is llama-server's own defaults).
    pub sampling: api::sampling::Sampling,
    /// The KV cache's (K, V) types (`-ctk`, `-ctv`; a quantized V needs flash attention).
    pub cache_types: (tessera_llama::DType, tessera_llama::DType),
    /// Requests that may wait for a slot.
    pub queue: usize,
    /// Most tokens decoded per step (`-b`): prompt chunks fill what generating slots leave.
    /// Below 64, no step reaches the row count from which ggml's CPU flash attention takes
    /// its tiled (f32) algorithm, so a request's tokens get the same bits whatever shares its
    /// step (on models whose matrix kernels are row-invariant: every type but the K-quants).
    pub n_batch: usize,
    /// `--api-key`: one key or several, comma-separated (llama-server's); an empty key is a
    /// configuration error, never a server that accepts an empty key.
    pub api_key: Option<String>,
    /// `--deterministic`: a request gets the same tokens alone or among others, at any `-b`
    /// and slot count (batch-invariant kernels, at a cost in throughput).
    pub deterministic: bool,
    /// A chat template replacing the GGUF's (`--chat-template-file`).
    pub chat_template: Option<String>,
    /// The model's name in responses (`--alias`).
    pub model_name: String,
    /// After SIGINT/SIGTERM (or [`Server::stop`]), how long running replies may go on before
    /// they are ended with a 503; a second signal ends them at once.
    pub shutdown_timeout: std::time::Duration,
    /// `--reasoning-format`: where a reply's `<think>` goes.
    pub reasoning_format: reasoning::ReasoningFormat,
    /// `--reasoning-budget`: most tokens a reply may spend inside `<think>` before the end of
    /// thinking is forced (-1: no limit; 0: closed as soon as opened). A request's
    /// `thinking_budget_tokens` overrides it.
    pub reasoning_budget: i32,
    /// `--reasoning-budget-message`: text put before the forced `</think>`.
    pub reasoning_budget_message: Option<String>,
    /// `--reasoning on|off|auto`: the templates' `enable_thinking` (`Some(false)`: off; `None`,
    /// auto, and `Some(true)` leave it on).
    pub reasoning: Option<bool>,
    /// `--embedding`: serve embeddings ([`api::embeddings`]) instead of generating.
    pub embedding: bool,
    /// `--pooling`: how embeddings pool a sequence (default: the model's `pooling_type`).
    pub pooling: Option<tessera_llama::Pooling>,
    /// `--cache-ram` MiB: host memory for prompts dropped from the slots, reused by later
    /// requests with the same beginning (-1: no limit, 0: off; llama-server's default 8192).
    pub cache_ram_mib: i64,
    /// Timeouts, the connection cap and the CORS origins ([`listen::Hardening`]).
    pub hardening: listen::Hardening,
    /// LoRA adapters loaded for the model (`--lora`, `--lora-scaled`), with their starting
    /// scales; `/lora-adapters` lists them by index.
    pub loras: Vec<(Arc<tessera_llama::LoraAdapter>, f32)>,
    /// `--lora-init-without-apply`: every adapter starts at scale 0.
    pub lora_init_without_apply: bool,
    /// `--context-shift`: a reply that fills the context drops the oldest tokens after the
    /// request's `n_keep` and goes on (llama-server's default: off, the reply ends `length`).
    pub context_shift: bool,
    /// Speculative decoding (`--spec-type`, `-md`, ...): `None` decodes one token per step.
    pub spec: Option<engine::SpecConfig>,
    /// The vision encoder (`--mmproj`): chat requests may hold images.
    pub vision: Option<vision::VisionHandle>,
}

/// A started server: its address, and a way to stop it.
pub struct Server {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The KV cache's cells (what one request may use).
    pub n_ctx: usize,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// Stops accepting connections, lets running requests finish, and waits for the end.
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// Blocks until the server stops (SIGINT/SIGTERM, or [`stop`](Server::stop) elsewhere).
    pub fn wait(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

/// The keys of `--api-key` (comma-separated), each non-empty.
fn api_keys(spec: Option<&str>) -> Result<Vec<String>> {
    let Some(spec) = spec else { return Ok(Vec::new()) };
    let keys: Vec<String> = spec.split(',').map(|k| k.trim().to_string()).collect();
    if keys.iter().any(String::is_empty) {
        return Err(ServerError::Config(
            "--api-key: an empty key (or an empty entry in a comma-separated list) would let \
             anyone in; give a key, or no --api-key"
                .into(),
        ));
    }
    Ok(keys)
}

/// Resolves at SIGINT or SIGTERM (never without `handle_signals`).
async fn signal(handle_signals: bool) {
    if !handle_signals {
        return std::future::pending::<()>().await;
    }
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

/// What a server with images cannot do (as llama-server, which refuses speculation and turns
/// the context shift off with a projector): refused by name at start.
fn check_vision(
    v: &Arc<dyn vision::Vision>,
    model: &Model,
    cfg: &ServerConfig,
    embeddings: bool,
) -> Result<()> {
    let refuse = |what: &str| {
        Err(ServerError::Config(format!("--mmproj with {what}: not supported with images")))
    };
    if v.n_embd() != model.hparams.n_embd {
        return Err(ServerError::Config(format!(
            "--mmproj: the projector ({}) makes embeddings {} wide, the model is {} wide (the \
             mmproj file of another model?)",
            v.name(),
            v.n_embd(),
            model.hparams.n_embd
        )));
    }
    if cfg.spec.is_some() {
        return refuse("speculative decoding (-md, --spec-type)");
    }
    if cfg.context_shift {
        return refuse("--context-shift (an image cannot be cut in half)");
    }
    if embeddings {
        return refuse("--embedding");
    }
    Ok(())
}

/// Starts the engine and the HTTP server on their own threads; returns once it listens.
/// With `handle_signals`, SIGINT and SIGTERM stop it gracefully.
pub fn start(model: Arc<Model>, cfg: ServerConfig, handle_signals: bool) -> Result<Server> {
    if cfg.reasoning_budget < -1 {
        return Err(ServerError::Config(format!(
            "--reasoning-budget {}: give -1 (no limit) or a number of tokens",
            cfg.reasoning_budget
        )));
    }
    let embeddings = match (cfg.embedding, cfg.pooling) {
        (false, Some(p)) => {
            return Err(ServerError::Config(format!("--pooling {p}: needs --embedding")));
        }
        (false, None) => None,
        (true, p) => match p.unwrap_or(model.hparams.pooling) {
            tessera_llama::Pooling::Rank => {
                return Err(ServerError::Config(
                    "--pooling rank: reranking is not supported; use mean, cls, last or none"
                        .into(),
                ));
            }
            p => Some(p),
        },
    };
    if let Some(p) = embeddings {
        tracing::info!(pooling = %p, "embeddings mode: the generating endpoints answer 501");
    }
    let template = cfg.chat_template.clone().or_else(|| model.chat_template.clone());
    if let Some(t) = &template {
        // A template that cannot render a plain exchange would fail every chat request.
        tessera_llama::chat::apply(
            t,
            &[("user", "hi"), ("assistant", "hello"), ("user", "?")],
            true,
            &model.vocab,
        )
        .map_err(|e| {
            let whose = if cfg.chat_template.is_some() {
                "--chat-template-file"
            } else {
                "the model's chat template"
            };
            ServerError::Config(format!("{whose} does not render: {e}"))
        })?;
    }
    if let Some(v) = &cfg.vision {
        check_vision(&v.0, &model, &cfg, embeddings.is_some())?;
    }
    let api_keys = api_keys(cfg.api_key.as_deref())?;
    let metrics = Arc::new(metrics::Metrics::default());
    let engine = engine::Engine::start(
        model.clone(),
        engine::EngineConfig {
            n_ctx: cfg.n_ctx,
            n_parallel: cfg.n_parallel,
            n_threads: cfg.n_threads,
            flash_attn: cfg.flash_attn,
            cache_types: cfg.cache_types,
            n_batch: cfg.n_batch,
            queue: cfg.queue,
            deterministic: cfg.deterministic,
            embeddings,
            cache_ram: match cfg.cache_ram_mib {
                n if n < 0 => usize::MAX,
                n => (n as usize).saturating_mul(1 << 20),
            },
            loras: cfg.loras.iter().map(|(a, _)| a.clone()).collect(),
            context_shift: cfg.context_shift,
            spec: cfg.spec.clone(),
            vision: cfg.vision.clone(),
        },
        metrics.clone(),
    )?;
    let constrainer = chat::constrain::Constrainer::new(model.clone())?;
    let state = Arc::new(http::AppState {
        model,
        model_name: cfg.model_name.clone(),
        template: template.map(chat::Template::new),
        constrainer,
        engine,
        metrics,
        api_keys,
        body_timeout: cfg.hardening.timeout,
        cors_origins: cfg.hardening.cors_origins.clone(),
        reasoning_format: cfg.reasoning_format,
        enable_thinking: cfg.reasoning != Some(false),
        responses: Default::default(),
        reasoning_budget: i64::from(cfg.reasoning_budget),
        reasoning_budget_message: cfg.reasoning_budget_message.clone().unwrap_or_default(),
        sampling: cfg.sampling.clone(),
        loras: engine::LoraTable::new(cfg.loras.clone(), cfg.lora_init_without_apply),
        speculative: cfg.spec.as_ref().map(|s| s.source.name()),
        vision: cfg.vision.as_ref().map(|v| v.0.clone()),
        max_body: match cfg.vision {
            Some(_) => http::middleware::MAX_BODY_IMAGES,
            None => http::middleware::MAX_BODY,
        },
    });
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let listener =
        rt.block_on(tokio::net::TcpListener::bind((cfg.host.as_str(), cfg.port))).map_err(
            |source| ServerError::Bind { addr: format!("{}:{}", cfg.host, cfg.port), source },
        )?;
    let addr = listener.local_addr()?;
    let n_ctx = state.engine.n_ctx;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let app = api::router(state.clone());
    let deadline = cfg.shutdown_timeout;
    let hardening = cfg.hardening.clone();
    let st2 = state.clone();
    let thread = std::thread::Builder::new().name("tessera-http".into()).spawn(move || {
        rt.block_on(async move {
            let (hard_tx, hard_rx) = tokio::sync::oneshot::channel::<()>();
            let stop = async move {
                tokio::select! {
                    _ = rx => {}
                    _ = signal(handle_signals) => {}
                }
                tracing::info!(
                    "shutting down: running replies may finish within {:.0} s (a second \
                     signal ends them now)",
                    deadline.as_secs_f64()
                );
                // The deadline, or a second signal, ends what still runs; a moment later
                // (the 503 events on their way to clients that read) every connection still
                // open is dropped, whatever its client does.
                tokio::spawn(async move {
                    let grace = tokio::select! {
                        _ = tokio::time::sleep(deadline) => Duration::from_secs(1),
                        _ = signal(handle_signals) => Duration::from_millis(200),
                    };
                    st2.engine.abort();
                    tokio::time::sleep(grace).await;
                    let _ = hard_tx.send(());
                });
            };
            let hard = async move {
                let _ = hard_rx.await;
            };
            listen::serve(listener, app, hardening, stop, hard).await;
        });
        // The runtime is dropped with this thread's closure: connection tasks still open end.
        // Requests are done; stop the engine (it lets running slots finish first).
        drop(state);
    })?;
    tracing::info!(%addr, "listening");
    Ok(Server { addr, n_ctx, shutdown: Some(tx), thread: Some(thread) })
}
