//! What every request passes through before its handler: the request log, CORS, the API key
//! check, and the body read within `--timeout` and [`MAX_BODY`] bytes; and the 404 of an
//! unknown path.

use super::{AppState, St};
use crate::error::ApiError;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use std::sync::Arc;

/// Largest request body (bytes); larger ones get 413.
pub const MAX_BODY: usize = 1 << 20;

/// Largest request body of a server that takes images (`--mmproj`): room for a few base64
/// photos.
pub const MAX_BODY_IMAGES: usize = 32 << 20;

/// `routes` behind the middleware (outermost first: log, CORS, API key, body), with the 404
/// for unknown paths.
pub(crate) fn wrap(routes: Router<Arc<AppState>>, state: Arc<AppState>) -> Router {
    routes
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(state.clone(), read_body))
        .layer(middleware::from_fn_with_state(state.clone(), auth))
        .layer(middleware::from_fn_with_state(state.clone(), cors))
        .layer(middleware::from_fn(log_request))
        .with_state(state)
}

/// One log line per request (target `tessera_server::http`, level info; warn for 5xx):
/// method, path, status, milliseconds, client address when known.
async fn log_request(req: Request, next: Next) -> Response {
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    let t0 = std::time::Instant::now();
    let res = next.run(req).await;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    let status = res.status().as_u16();
    if status >= 500 {
        tracing::warn!(target: "tessera_server::http", "{method} {path} {status} {ms:.1} ms");
    } else if path != "/health" && path != "/metrics" {
        tracing::info!(target: "tessera_server::http", "{method} {path} {status} {ms:.1} ms");
    }
    res
}

/// Cross-origin requests: by default as llama-server allows them (any origin, with
/// credentials); with `--cors-origin`, only the origins listed get the headers, so browsers on
/// others are refused. Preflight `OPTIONS` is answered 204 before the API key check (browsers
/// send no credentials with it).
async fn cors(State(st): St, req: Request, next: Next) -> Response {
    let origin = req.headers().get(header::ORIGIN).cloned();
    let asked = req.headers().get(header::ACCESS_CONTROL_REQUEST_HEADERS).cloned();
    let mut res = if req.method() == Method::OPTIONS {
        StatusCode::NO_CONTENT.into_response()
    } else {
        next.run(req).await
    };
    let allowed = st.cors_origins.is_empty()
        || origin
            .as_ref()
            .and_then(|o| o.to_str().ok())
            .is_some_and(|o| st.cors_origins.iter().any(|a| a == o));
    if !allowed {
        return res;
    }
    let h = res.headers_mut();
    let allow_origin = origin.unwrap_or(HeaderValue::from_static("*"));
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, allow_origin);
    h.insert(header::VARY, HeaderValue::from_static("Origin"));
    h.insert(header::ACCESS_CONTROL_ALLOW_CREDENTIALS, HeaderValue::from_static("true"));
    h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static("GET, POST, OPTIONS"));
    h.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        asked.unwrap_or(HeaderValue::from_static("Authorization, Content-Type, X-Api-Key")),
    );
    h.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("86400"));
    res
}

/// Reads the request body within `--timeout` (a client that stops half-way gets a 408 and
/// its connection back, instead of holding a handler forever) and at most [`MAX_BODY`] bytes
/// ([`MAX_BODY_IMAGES`] with images; 413), before the handler runs.
async fn read_body(State(st): St, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    match tokio::time::timeout(st.body_timeout, axum::body::to_bytes(body, st.max_body)).await {
        Err(_) => ApiError::new(
            408,
            "invalid_request_error",
            format!(
                "the request body did not arrive within {:.0} s (--timeout)",
                st.body_timeout.as_secs_f64()
            ),
        )
        .into_response(),
        Ok(Err(e)) => {
            let too_large = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            let (status, what) = if too_large {
                (413, format!("request body: larger than {} bytes", st.max_body))
            } else {
                (400, format!("request body: {e}"))
            };
            ApiError::new(status, "invalid_request_error", what).into_response()
        }
        Ok(Ok(bytes)) => next.run(Request::from_parts(parts, axum::body::Body::from(bytes))).await,
    }
}

/// Whether `given` equals one of `keys`, in time that does not depend on where they differ.
fn key_matches(keys: &[String], given: &str) -> bool {
    let mut any = false;
    for k in keys {
        let (a, b) = (k.as_bytes(), given.as_bytes());
        let mut diff = u8::from(a.len() != b.len());
        for (i, x) in a.iter().enumerate() {
            diff |= x ^ b.get(i).copied().unwrap_or(0);
        }
        any |= diff == 0;
    }
    any
}

async fn not_found(req: Request) -> ApiError {
    ApiError::new(
        404,
        "invalid_request_error",
        format!("no endpoint {} {}", req.method(), req.uri().path()),
    )
}

/// With `--api-key`, every endpoint but `/health` (and the page, which asks for the key)
/// needs `Authorization: Bearer KEY` or `X-Api-Key: KEY` (Anthropic's clients send that).
async fn auth(State(st): St, req: Request, next: Next) -> Response {
    if !st.api_keys.is_empty() {
        let path = req.uri().path();
        if path != "/health" && path != "/" {
            let bearer = req
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "));
            let x_key = req.headers().get("x-api-key").and_then(|v| v.to_str().ok());
            let ok = bearer.or(x_key).is_some_and(|k| key_matches(&st.api_keys, k));
            if !ok {
                return ApiError::new(
                    401,
                    "authentication_error",
                    "invalid or missing API key (Authorization: Bearer KEY, or X-Api-Key: KEY)",
                )
                .with_code("invalid_api_key")
                .into_response();
            }
        }
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::key_matches;

    #[test]
    fn keys_match_whole() {
        let keys = vec!["alpha".to_string(), "beta".to_string()];
        assert!(key_matches(&keys, "alpha") && key_matches(&keys, "beta"));
        for bad in ["alph", "alphaa", "", "Alpha", "alpha,beta"] {
            assert!(!key_matches(&keys, bad), "{bad}");
        }
    }
}
