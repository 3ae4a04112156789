//! The crate's error type for starting and running the server (request errors are
//! [`ApiError`](crate::api::ApiError)s, answered to the client).

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
