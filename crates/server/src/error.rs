//! The crate's two error types: [`ServerError`], what keeps the server from starting or
//! running, and [`ApiError`], what a failed request is answered with (an HTTP status and
//! OpenAI's error object, `{"error": {"message", "type", "code", "param"}}`).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

/// What can keep the server from starting or running.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// `host:port`.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// A setting is out of range (`-np 0`) or unusable (a chat template that does not
    /// render).
    #[error("{0}")]
    Config(String),
    /// The model's context (KV cache, backends) could not be made.
    #[error("model context: {0}")]
    Context(String),
    /// The vocabulary cannot drive structured output (no end-of-text token, trie failure).
    #[error("structured output: {0}")]
    Constraint(String),
    /// A thread or the async runtime could not start.
    #[error("runtime: {0}")]
    Runtime(#[from] std::io::Error),
    /// A GBNF grammar could not be read.
    #[error("GBNF: {0}")]
    Grammar(String),
    /// Constrained decoding failed mid-way.
    #[error("constrained decoding: {0}")]
    Decoding(String),
}

/// Shorthand for `Result<T, ServerError>`.
pub type Result<T, E = ServerError> = std::result::Result<T, E>;

/// An error answered to the client: HTTP status and OpenAI's error object.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status.
    pub status: u16,
    /// What went wrong, naming the field.
    pub message: String,
    /// OpenAI's `type` (`invalid_request_error`, `authentication_error`, `server_error`, ...).
    pub kind: &'static str,
    /// OpenAI's `code`, where one fits (`context_length_exceeded`, `invalid_api_key`, ...).
    pub code: Option<&'static str>,
    /// The offending field, if one.
    pub param: Option<String>,
}

impl ApiError {
    /// A 400 about field `param`.
    pub fn field(param: &str, message: impl Into<String>) -> Self {
        ApiError {
            status: 400,
            message: format!("{param}: {}", message.into()),
            kind: "invalid_request_error",
            code: None,
            param: Some(param.to_string()),
        }
    }

    /// An error with a status and type, no field.
    pub fn new(status: u16, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError { status, message: message.into(), kind, code: None, param: None }
    }

    /// Sets the code.
    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    /// The 503 of a server shutting down.
    pub fn shutting_down() -> Self {
        ApiError::new(503, "server_error", "the server is shutting down").with_code("shutting_down")
    }

    /// The 501 of an embeddings endpoint on a generating server.
    pub fn not_embedding() -> Self {
        ApiError::new(
            501,
            "not_supported_error",
            "this server does not compute embeddings: start it with --embedding",
        )
        .with_code("not_supported")
    }

    /// The 501 of a generating endpoint on an embeddings server.
    pub fn not_generating() -> Self {
        ApiError::new(
            501,
            "not_supported_error",
            "this server computes embeddings only (--embedding): start it without --embedding to \
             generate",
        )
        .with_code("not_supported")
    }

    /// The JSON body.
    pub fn body(&self) -> Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "code": self.code.map_or(Value::from(self.status), Value::from),
            "param": self.param,
        }})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, Json(self.body())).into_response()
    }
}
