//! `GET /api/v1/conversations/events`: the conversation list as Server-Sent Events, so a
//! client keeps its list fresh without polling.
//!
//! A conversation is dirty when the store says its list view may have changed
//! ([`Runtime::conversation_changes`]: its row changed, or a commit stored more than
//! streamed agent output for it), so the list follows every conversation without
//! following their events.
//! Dirty conversations are re-read together at most every [`COALESCE`] (a streaming
//! reply is hundreds of events) and sent only when what a client shows differs from what
//! this stream sent last. There is no resume point: a client reloads its list when the
//! stream (re)opens and when it gets `resync` (the stream fell behind).

use crate::auth::Api;
use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::time::Duration;

use axum::Extension;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
use serde::Deserialize;
use tether_proto::{ConversationChange, ConversationChangeKind, ConversationId, ErrorBody};
use tether_runtime::{Runtime, RuntimeError};
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use utoipa::IntoParams;

use crate::extract::ApiQuery;
use crate::sse::Closing;

/// Longest delay between a change and its message.
const COALESCE: Duration = Duration::from_millis(200);
/// Heartbeat comment interval.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// Messages buffered per stream between the pump and the HTTP body.
const BUFFER: usize = 64;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListStreamQuery {
    /// The API token, for clients that cannot set headers (`EventSource`).
    #[allow(dead_code)]
    token: Option<String>,
}

#[utoipa::path(
    get,
    path = "/api/v1/conversations/events",
    tag = "conversations",
    params(ListStreamQuery),
    responses(
        (status = 200, description = "`text/event-stream` of the conversation list: `event: conversation` \
            with a ConversationChange as `data:` whenever a conversation is created, changes (state, title, \
            binding, queue, pending requests) or is archived; `event: resync` (empty object) when the \
            stream fell behind and the list must be read again; heartbeat comments every 15 s. Read the \
            list after the stream opens: there is no replay.", content_type = "text/event-stream", body = ConversationChange),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
    ),
    security(("bearer" = []), ("query_token" = []))
)]
pub(crate) async fn list_events(
    Api(s): Api,
    ApiQuery(_q): ApiQuery<ListStreamQuery>,
    headers: axum::http::HeaderMap,
    uri: axum::http::Uri,
    closing: Option<Extension<Closing>>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let token = crate::auth::personal_token(&headers, &uri);
    let revoked = Box::pin(crate::auth::until_revoked(s.runtime.clone(), token));
    // Subscribe before the client can read the list, so no change falls in between.
    let changes = s.runtime.conversation_changes();
    let (tx, out) = mpsc::channel(BUFFER);
    let pump = ListPump {
        runtime: s.runtime.clone(),
        opened_at_ms: now_ms(),
        sent: HashMap::new(),
        tx,
    };
    tokio::spawn(pump.run(changes, closing.map(|Extension(c)| c.0), revoked));
    Sse::new(ReceiverStream::new(out)).keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// What this stream sent last about each conversation: the JSON, and whether archived.
struct ListPump {
    runtime: Runtime,
    opened_at_ms: i64,
    sent: HashMap<ConversationId, (String, bool)>,
    tx: mpsc::Sender<Result<Event, Infallible>>,
}

impl ListPump {
    async fn run(
        mut self,
        mut changes: broadcast::Receiver<ConversationId>,
        closing: Option<watch::Receiver<bool>>,
        mut revoked: crate::sse::Revoked,
    ) {
        let mut closing = closing;
        let mut dirty: HashSet<ConversationId> = HashSet::new();
        let mut flush_at: Option<Instant> = None;
        loop {
            let flush = async {
                match flush_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let shut = async {
                match closing.as_mut() {
                    Some(rx) => {
                        let _ = rx.wait_for(|c| *c).await;
                    }
                    None => std::future::pending().await,
                }
            };
            let id = tokio::select! {
                () = self.tx.closed() => return,
                () = shut => return,
                () = revoked.as_mut() => return,
                () = flush => {
                    flush_at = None;
                    if !self.flush(std::mem::take(&mut dirty)).await {
                        return;
                    }
                    continue;
                }
                id = changes.recv() => match id {
                    Ok(id) => id,
                    Err(RecvError::Lagged(_)) => {
                        if !self.resync(&mut dirty).await {
                            return;
                        }
                        continue;
                    }
                    Err(RecvError::Closed) => return,
                },
            };
            dirty.insert(id);
            flush_at.get_or_insert_with(|| Instant::now() + COALESCE);
        }
    }

    /// Tells the client to read its list again; forgets what was sent.
    async fn resync(&mut self, dirty: &mut HashSet<ConversationId>) -> bool {
        dirty.clear();
        self.sent.clear();
        let ev = Event::default().event("resync").data("{}");
        self.tx.send(Ok(ev)).await.is_ok()
    }

    /// Re-reads the dirty conversations and sends those that look different now.
    async fn flush(&mut self, dirty: HashSet<ConversationId>) -> bool {
        for id in dirty {
            let conv = match self.runtime.get_conversation(&id).await {
                Ok(c) => c,
                Err(RuntimeError::NotFound { .. }) => continue,
                Err(err) => {
                    tracing::warn!(conversation = %id, error = %err, "list stream: cannot read a conversation");
                    continue;
                }
            };
            let Ok(json) = serde_json::to_string(&conv) else {
                continue;
            };
            let before = self.sent.get(&id);
            if before.is_some_and(|(j, _)| *j == json) {
                continue;
            }
            let change = match before {
                _ if conv.archived && !before.is_some_and(|(_, archived)| *archived) => {
                    ConversationChangeKind::Archived
                }
                None if conv.created_at_ms >= self.opened_at_ms => ConversationChangeKind::Created,
                _ => ConversationChangeKind::Updated,
            };
            let archived = conv.archived;
            let msg = ConversationChange {
                change,
                conversation: conv,
            };
            let Ok(data) = serde_json::to_string(&msg) else {
                continue;
            };
            self.sent.insert(id, (json, archived));
            if self
                .tx
                .send(Ok(Event::default().event("conversation").data(data)))
                .await
                .is_err()
            {
                return false;
            }
        }
        true
    }
}
