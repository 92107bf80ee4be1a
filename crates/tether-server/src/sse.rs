//! `GET /api/v1/conversations/{id}/events`: the conversation's events across its
//! sessions as Server-Sent Events.
//!
//! Subscribe to the live bus first, then replay the store after the client's resume
//! point; afterwards each live notification for the conversation triggers a read of the
//! store after the last id sent (the store's commit order is id order), so there are no
//! duplicates and no gaps even when events of two sessions are published out of order.

use std::convert::Infallible;
use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::{Stream, StreamExt};
use serde::Deserialize;
use tether_proto::{ErrorBody, EventEnvelope};
use tokio::sync::{broadcast, mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use utoipa::IntoParams;

use crate::AppState;
use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery};

/// Events read from the store per page while replaying.
const REPLAY_PAGE: u32 = 200;
/// Heartbeat comment interval.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// Events buffered per stream between the pump and the HTTP body.
const BUFFER: usize = 64;

/// Set by `serve` when the server shuts down: open streams end.
#[derive(Clone)]
pub(crate) struct Closing(pub watch::Receiver<bool>);

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct StreamQuery {
    /// Resume after this event id when there is no `Last-Event-ID` header (default 0:
    /// from the beginning).
    after_id: Option<i64>,
    /// The API token, for clients that cannot set headers (`EventSource`).
    #[allow(dead_code)]
    token: Option<String>,
}

#[utoipa::path(
    get,
    path = "/api/v1/conversations/{id}/events",
    tag = "conversations",
    params(
        ("id" = String, Path, description = "Conversation id"),
        ("Last-Event-ID" = Option<i64>, Header, description = "Resume after this event id (sent by EventSource on reconnect; wins over `after_id`)"),
        StreamQuery,
    ),
    responses(
        (status = 200, description = "`text/event-stream`: each event has `id:` = envelope id, `event:` = payload type, `data:` = the envelope as JSON; heartbeat comments every 15 s", content_type = "text/event-stream", body = EventEnvelope),
        (status = 400, description = "Bad resume point", body = ErrorBody),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 404, description = "No such conversation", body = ErrorBody),
    ),
    security(("bearer" = []), ("query_token" = []))
)]
pub(crate) async fn conversation_events(
    State(s): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<StreamQuery>,
    headers: HeaderMap,
    closing: Option<Extension<Closing>>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let after = resume_point(&headers, q.after_id)?;
    // Subscribe before anything is read from the store, so nothing falls in between.
    let rx = s.runtime.subscribe();
    s.runtime.get_conversation(&id).await?;

    let runtime = s.runtime.clone();
    let conversation_id = id.clone();
    let fetch = move |after_id: i64, limit: u32| {
        let runtime = runtime.clone();
        let id = conversation_id.clone();
        async move { runtime.conversation_events(&id, after_id, limit).await }
    };
    let (tx, out) = mpsc::channel(BUFFER);
    let closing = closing.map(|Extension(c)| c.0);
    tokio::spawn(pump(
        Pump {
            rx,
            conversation_id: id,
            last: after,
            page: REPLAY_PAGE,
        },
        fetch,
        tx,
        closing,
    ));

    let stream = ReceiverStream::new(out).filter_map(|env| async move { to_sse(&env).map(Ok) });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)))
}

/// The id to resume after: `Last-Event-ID` wins over `?after_id=`; default 0.
fn resume_point(headers: &HeaderMap, after_id: Option<i64>) -> Result<i64, ApiError> {
    let Some(value) = headers.get("last-event-id") else {
        return Ok(after_id.unwrap_or(0).max(0));
    };
    let text = value
        .to_str()
        .map_err(|_| ApiError::bad_request("Last-Event-ID is not text"))?;
    let text = text.trim();
    if text.is_empty() {
        return Ok(after_id.unwrap_or(0).max(0));
    }
    text.parse::<i64>().map(|v| v.max(0)).map_err(|_| {
        ApiError::bad_request(format!(
            "Last-Event-ID must be an event id (integer), got {text:?}"
        ))
    })
}

fn to_sse(env: &EventEnvelope) -> Option<Event> {
    match serde_json::to_string(env) {
        Ok(json) => Some(
            Event::default()
                .id(env.id.to_string())
                .event(env.payload.kind())
                .data(json),
        ),
        Err(err) => {
            tracing::error!(event_id = env.id, error = %err, "could not serialise an event");
            None
        }
    }
}

/// State of one stream's pump.
pub(crate) struct Pump {
    pub rx: broadcast::Receiver<EventEnvelope>,
    pub conversation_id: String,
    /// Id of the last event sent (or the client's resume point).
    pub last: i64,
    /// Store page size.
    pub page: u32,
}

/// Replays `fetch(after_id, limit)` after `state.last`, then forwards live events of the
/// conversation, until the client goes away, the bus closes, `closing` turns true or the
/// store fails (the client then reconnects with `Last-Event-ID`).
pub(crate) async fn pump<F, Fut, E>(
    mut state: Pump,
    fetch: F,
    tx: mpsc::Sender<EventEnvelope>,
    closing: Option<watch::Receiver<bool>>,
) where
    F: Fn(i64, u32) -> Fut,
    Fut: Future<Output = Result<Vec<EventEnvelope>, E>>,
    E: Display,
{
    let work = async {
        if !catch_up(&mut state, &fetch, &tx).await {
            return;
        }
        loop {
            tokio::select! {
                () = tx.closed() => return,
                msg = state.rx.recv() => match msg {
                    Ok(env) => {
                        if env.conversation_id != state.conversation_id || env.id <= state.last {
                            continue;
                        }
                        // Publication order across sessions may differ from id order, but
                        // commit order is id order: read the store after the last id sent,
                        // so an earlier event published late is never skipped.
                        if !catch_up(&mut state, &fetch, &tx).await {
                            return;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        tracing::debug!(skipped = n, "event stream lagged; re-reading the store");
                        if !catch_up(&mut state, &fetch, &tx).await {
                            return;
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
            }
        }
    };
    tokio::select! {
        () = work => {}
        () = wait_closing(closing) => {}
    }
}

async fn wait_closing(closing: Option<watch::Receiver<bool>>) {
    match closing {
        // An error means the server is gone: close too.
        Some(mut rx) => {
            let _ = rx.wait_for(|closing| *closing).await;
        }
        None => std::future::pending().await,
    }
}

/// Sends every stored event after `state.last`; `false` when the stream must end.
async fn catch_up<F, Fut, E>(state: &mut Pump, fetch: &F, tx: &mpsc::Sender<EventEnvelope>) -> bool
where
    F: Fn(i64, u32) -> Fut,
    Fut: Future<Output = Result<Vec<EventEnvelope>, E>>,
    E: Display,
{
    loop {
        let page = match fetch(state.last, state.page).await {
            Ok(page) => page,
            Err(err) => {
                tracing::warn!(error = %err, "could not read events; closing the stream");
                return false;
            }
        };
        let full = page.len() >= state.page as usize;
        let before = state.last;
        for env in page {
            if env.id <= state.last {
                continue;
            }
            state.last = env.id;
            if tx.send(env).await.is_err() {
                return false;
            }
        }
        if !full || state.last == before {
            return true;
        }
    }
}

#[cfg(test)]
#[path = "sse_tests.rs"]
mod tests;
