//! The HTTP side every API shares: the state handlers read ([`AppState`]), the middleware
//! (request log, CORS, API key, body limit and timeout: [`middleware`]), the hardened accept
//! loop ([`listen`]) and bounded server-sent-event channels ([`sse`]). The routes and their
//! handlers are in [`crate::api`].

pub mod listen;
pub mod middleware;
pub mod sse;

use crate::engine::Engine;
use crate::metrics::Metrics;
use axum::extract::State;
use std::sync::Arc;
use tessera_llama::Model;

/// What the handlers share.
pub struct AppState {
    /// The model (vocabulary, template).
    pub model: Arc<Model>,
    /// The name `/v1/models` lists and responses carry.
    pub model_name: String,
    /// The chat template in force.
    pub template: Option<crate::chat::Template>,
    /// Compiles structured-output constraints.
    pub constrainer: crate::chat::constrain::Constrainer,
    /// The engine.
    pub engine: Engine,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// The API keys (`--api-key`, comma-separated, or `--api-key-file`); empty: no key needed.
    pub api_keys: Vec<String>,
    /// A request body must arrive within it (`--timeout`).
    pub body_timeout: std::time::Duration,
    /// Origins browsers may call from (empty: any, as llama-server).
    pub cors_origins: Vec<String>,
    /// `--reasoning-format`.
    pub reasoning_format: crate::chat::reasoning::ReasoningFormat,
    /// The templates' `enable_thinking` (`--reasoning off` turns it off).
    pub enable_thinking: bool,
    /// Responses kept for `previous_response_id` and `GET /v1/responses/{id}`.
    pub responses: crate::response_store::ResponseStore,
    /// `--reasoning-budget` (-1: no limit).
    pub reasoning_budget: i64,
    /// Sampling defaults for what a request does not give (`tessera serve`'s sampling flags).
    pub sampling: crate::api::sampling::Sampling,
    /// `--reasoning-budget-message`.
    pub reasoning_budget_message: String,
    /// The LoRA adapters and their global scales (`/lora-adapters`).
    pub loras: crate::engine::LoraTable,
    /// The speculation source's llama.cpp name, if the server speculates.
    pub speculative: Option<&'static str>,
    /// The vision encoder (`--mmproj`), if the server takes images.
    pub vision: Option<std::sync::Arc<dyn crate::vision::Vision>>,
    /// Largest request body in bytes.
    pub max_body: usize,
}

/// The state extractor every handler takes.
pub(crate) type St = State<Arc<AppState>>;

/// A request body as the handlers take it: read whole, within the time and size limits, by
/// [`middleware`] before the handler runs (so taking it cannot fail).
pub(crate) type Body = axum::body::Bytes;
