//! The APIs, one module each: OpenAI's chat and completions ([`openai`]), llama-server's own
//! endpoints ([`native`]), Anthropic's messages ([`anthropic`]), OpenAI's responses
//! ([`responses`]) and embeddings ([`embeddings`]); the requests they read ([`request`],
//! [`fields`], [`sampling`]) and the generating flow they share ([`generate`]).
//!
//! A request enters at [`router`], passes the middleware ([`crate::http::middleware`]), and
//! reaches its handler, which reads the body field by field and, to generate, calls
//! `generate::start`: that queues a job on the engine, whose events come back as the reply.

pub mod anthropic;
pub mod embeddings;
pub mod fields;
pub mod generate;
pub mod native;
pub mod openai;
pub mod request;
pub mod responses;
pub mod sampling;

use crate::http::AppState;
use axum::routing::{get, post};
use axum::Router;
use std::sync::Arc;

/// The router with every endpoint.
pub fn router(state: Arc<AppState>) -> Router {
    let routes = Router::new()
        .route("/", get(native::page))
        .route("/health", get(native::health))
        .route("/v1/models", get(native::models))
        .route("/v1/chat/completions", post(openai::chat))
        .route("/chat/completions", post(openai::chat))
        .route("/v1/completions", post(openai::completions))
        .route("/completions", post(openai::completions))
        .route("/completion", post(native::completion))
        .route("/v1/messages", post(anthropic::messages))
        .route("/v1/responses", post(responses::responses))
        .route(
            "/v1/responses/{id}",
            get(responses::get_response).delete(responses::delete_response),
        )
        .route("/infill", post(native::infill))
        .route("/v1/embeddings", post(embeddings::oai_embeddings))
        .route("/embedding", post(embeddings::embedding))
        .route("/embeddings", post(embeddings::embedding))
        .route("/tokenize", post(native::tokenize))
        .route("/detokenize", post(native::detokenize))
        .route("/apply-template", post(native::apply_template))
        .route("/metrics", get(native::metrics))
        .route("/props", get(native::props))
        .route("/slots", get(native::slots))
        .route("/lora-adapters", get(native::lora_adapters).post(native::set_lora_adapters));
    crate::http::middleware::wrap(routes, state)
}
