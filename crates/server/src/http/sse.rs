//! Streamed replies as server-sent events over a bounded channel: a client that stops reading
//! fills it, and its reply ends (freeing its slot) instead of piling events up in memory.

use axum::http::{header, HeaderMap};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use std::convert::Infallible;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;

/// Server-sent events not yet written to a client before it counts as not reading: its reply
/// ends and its slot is freed (a token is one event).
pub const MAX_UNREAD_EVENTS: usize = 2048;

/// The sending end of a streamed reply (see [`MAX_UNREAD_EVENTS`]).
#[derive(Debug, Clone)]
pub(crate) struct SseTx(mpsc::Sender<SseEvent>);

impl SseTx {
    /// Queues `e` for the client; an error when the client is gone or too far behind (then
    /// the caller stops, which ends the reply and frees its slot).
    pub(crate) fn send(&self, e: SseEvent) -> Result<(), ()> {
        match self.0.try_send(e) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::warn!(
                    unread = MAX_UNREAD_EVENTS,
                    "a streaming client stopped reading: ending its reply"
                );
                Err(())
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Err(()),
        }
    }

    /// Resolves when the client is gone.
    pub(crate) async fn closed(&self) {
        self.0.closed().await
    }
}

/// A streamed reply's channel: [`SseTx`] and what [`sse_response`] writes out.
pub(crate) fn sse_channel() -> (SseTx, mpsc::Receiver<SseEvent>) {
    let (tx, rx) = mpsc::channel(MAX_UNREAD_EVENTS);
    (SseTx(tx), rx)
}

/// The HTTP response that writes `rx`'s events out as they come.
pub(crate) fn sse_response(rx: mpsc::Receiver<SseEvent>) -> Response {
    let stream = ReceiverStream::new(rx).map(Ok::<_, Infallible>);
    let mut headers = HeaderMap::new();
    headers.insert(header::CACHE_CONTROL, "no-cache".parse().expect("header"));
    (headers, Sse::new(stream).keep_alive(KeepAlive::default())).into_response()
}
