//! `GET /api/v1/conversations/{id}/events`: the conversation's events across its
//! sessions as Server-Sent Events.
//!
//! The stream is the conversation's follower ([`Runtime::follow`], architecture.md §5):
//! the store after the client's resume point, then each commit in commit order, without
//! gaps or duplicates. No task per stream: the response body polls the follower itself.
//! A commit reaches every stream of the conversation as one shared batch, encoded as SSE
//! text once for all of them ([`tether_runtime::Batch::encoded`]), so 1 000 streams of
//! one conversation cost one encoding and 1 000 reference counts per commit.
//!
//! A stream writes at its own pace ([`Pace`]): a burst of [`BURST`] writes goes out at
//! once, after that at most its share of [`BUDGET`] writes a second (the budget of its
//! conversation's streams on this node, divided among them; at least [`RATE_FLOOR`]),
//! each write carrying every batch waiting by then; a full write ([`COALESCE_BYTES`]) or a page of a catch-up from the store
//! never waits. A turn's few
//! events never wait; a long fast stream to many subscribers makes fewer, larger writes
//! and wakes its stream less often (the writes to the sockets were half of tether's time
//! in the fan-out figure). Measured there (1 000 subscribers, 500 deltas/s, 3 interleaved
//! runs): lag p99 54–79 ms without the pace, 44–46 ms with it, p50 unchanged (13–14 ms).
//!
//! [`Runtime::follow`]: tether_runtime::Runtime::follow

use crate::auth::Api;
use std::convert::Infallible;
use std::io::Write as _;
use std::pin::Pin;
use std::time::Duration;

use axum::Extension;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tether_proto::{ConversationId, ErrorBody, EventEnvelope};
use tether_runtime::{Follower, Scope};
use tokio::sync::watch;
use tokio::time::Instant;
use utoipa::IntoParams;

use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery};

/// Heartbeat comment interval.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

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
    Api(s): Api,
    ApiPath(id): ApiPath<ConversationId>,
    ApiQuery(q): ApiQuery<StreamQuery>,
    headers: HeaderMap,
    uri: axum::http::Uri,
    closing: Option<Extension<Closing>>,
) -> Result<Response, ApiError> {
    let after = resume_point(&headers, q.after_id)?;
    let follower = s.runtime.follow(Scope::Conversation(id), after).await?;
    let closing = closing.map(|Extension(c)| c.0);
    let token = crate::auth::personal_token(&headers, &uri);
    let revoked = Box::pin(crate::auth::until_revoked(s.runtime.clone(), token));
    let body = Body::from_stream(frames(follower, closing, revoked));
    let mut res = body.into_response();
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(res)
}

/// The SSE text of a stream: the follower's batches, a heartbeat comment after
/// [`KEEP_ALIVE`] without one, until the server closes, the store fails (the client
/// then reconnects with `Last-Event-ID`) or `revoked` ends (its token stopped working).
/// A client that goes away drops the body, and with it the follower.
fn frames(
    follower: Follower,
    closing: Option<watch::Receiver<bool>>,
    revoked: Revoked,
) -> impl futures::Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
    let beat = Heartbeat {
        timer: Box::pin(tokio::time::sleep(KEEP_ALIVE)),
        last_sent: Instant::now(),
        pace: Pace::new(Instant::now()),
    };
    futures::stream::unfold(
        (follower, closing, beat, revoked),
        |(mut f, mut closing, mut beat, mut revoked)| async move {
            let frame = loop {
                tokio::select! {
                    () = wait_closing(&mut closing) => return None,
                    () = revoked.as_mut() => return None,
                    () = beat.timer.as_mut() => {
                        // Re-armed lazily: a busy stream never touches its timer.
                        let due = beat.last_sent + KEEP_ALIVE;
                        if Instant::now() >= due {
                            beat.timer.as_mut().reset(Instant::now() + KEEP_ALIVE);
                            break Bytes::from_static(b":\n\n");
                        }
                        beat.timer.as_mut().reset(due);
                    }
                    next = f.next() => match next {
                        Ok(batch) => {
                            let mut frame = coalesce(&mut f, batch.encoded(encode));
                            // A full write, or a page of a catch-up from the store,
                            // goes at once; a small one waits for its turn and takes
                            // whatever came meanwhile.
                            let now = Instant::now();
                            if beat.pace.share_is_old(now) {
                                beat.pace.share(f.followers(), now);
                            }
                            let due = beat.pace.due(now);
                            let bulk = frame.len() >= COALESCE_BYTES || f.is_filling();
                            if !bulk && due > now {
                                tokio::select! {
                                    () = wait_closing(&mut closing) => return None,
                                    () = revoked.as_mut() => return None,
                                    () = tokio::time::sleep_until(due) => {}
                                }
                                frame = coalesce(&mut f, frame);
                            }
                            beat.pace.spend(Instant::now());
                            break frame;
                        }
                        Err(err) => {
                            tracing::warn!(error = %err, "could not read events; closing the stream");
                            return None;
                        }
                    },
                }
            };
            beat.last_sent = Instant::now();
            Some((Ok(frame), (f, closing, beat, revoked)))
        },
    )
}

/// Writes at most this much at once when batches queue up for a stream.
const COALESCE_BYTES: usize = 64 * 1024;

/// `first`, and after it whatever batches already wait for this stream (a reader that
/// fell behind, as every one of a thousand subscribers does for a moment when one event
/// wakes them all): one write for them instead of one each. Adds no wait.
fn coalesce(f: &mut Follower, first: Bytes) -> Bytes {
    let Some(batch) = f.try_next() else {
        return first;
    };
    let mut out = Vec::with_capacity(first.len() * 2);
    out.extend_from_slice(&first);
    out.extend_from_slice(&batch.encoded(encode));
    while out.len() < COALESCE_BYTES
        && let Some(batch) = f.try_next()
    {
        out.extend_from_slice(&batch.encoded(encode));
    }
    Bytes::from(out)
}

/// Ends when the stream's token stops working (`auth::until_revoked`).
pub(crate) type Revoked = Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// When the stream last sent something, the timer of its next heartbeat, and its pace.
struct Heartbeat {
    timer: Pin<Box<tokio::time::Sleep>>,
    last_sent: Instant,
    pace: Pace,
}

/// Writes a stream makes at once before its pace applies (a turn's events fit in it).
pub(crate) const BURST: f64 = 16.0;
/// Writes a second the streams of one conversation share once their bursts are spent:
/// one stream is never held back by it, 1 000 streams write 50 times a second each.
pub(crate) const BUDGET: f64 = 50_000.0;
/// The least a stream's share is, however many follow its conversation.
pub(crate) const RATE_FLOOR: f64 = 50.0;

/// A token bucket of writes: [`BURST`] at most, refilled at the stream's share of
/// [`BUDGET`] a second.
#[derive(Debug)]
pub(crate) struct Pace {
    tokens: f64,
    at: Instant,
    /// Writes a second.
    rate: f64,
    /// When the share was last taken (`None`: never).
    shared_at: Option<Instant>,
}

/// How often a stream takes its share again (the count of followers is one look-up under
/// the feed's lock).
const SHARE_EVERY: Duration = Duration::from_millis(100);

impl Pace {
    pub(crate) fn new(now: Instant) -> Pace {
        Pace {
            tokens: BURST,
            at: now,
            rate: BUDGET,
            shared_at: None,
        }
    }

    /// Whether the share is older than [`SHARE_EVERY`] (or was never taken).
    pub(crate) fn share_is_old(&self, now: Instant) -> bool {
        self.shared_at
            .is_none_or(|at| now.saturating_duration_since(at) >= SHARE_EVERY)
    }

    /// Takes the share of one of `followers` streams of a conversation, from `now` on.
    pub(crate) fn share(&mut self, followers: usize, now: Instant) {
        self.refill(now);
        self.rate = (BUDGET / followers.max(1) as f64).max(RATE_FLOOR);
        self.shared_at = Some(now);
    }

    fn refill(&mut self, now: Instant) {
        let since = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + since * self.rate).min(BURST);
        self.at = now;
    }

    /// When the next write may go: `now` while a token is left.
    pub(crate) fn due(&mut self, now: Instant) -> Instant {
        self.refill(now);
        if self.tokens >= 1.0 {
            return now;
        }
        now + Duration::from_secs_f64((1.0 - self.tokens) / self.rate)
    }

    /// Counts a write made at `now`.
    pub(crate) fn spend(&mut self, now: Instant) {
        self.refill(now);
        self.tokens = (self.tokens - 1.0).max(0.0);
    }
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

/// Events as SSE text: `id:` = envelope id, `event:` = payload type, `data:` = the
/// envelope as JSON (one line: serde_json writes no newlines).
pub(crate) fn encode(events: &[EventEnvelope]) -> Bytes {
    // Serialised straight into the buffer (no string per event); a failed event is cut off.
    let mut out: Vec<u8> = Vec::with_capacity(events.len() * 256);
    for env in events {
        let start = out.len();
        let _ = write!(out, "id: {}\nevent: {}\ndata: ", env.id, env.payload.kind());
        match serde_json::to_writer(&mut out, env) {
            Ok(()) => out.extend_from_slice(b"\n\n"),
            Err(err) => {
                out.truncate(start);
                tracing::error!(event_id = env.id, error = %err, "could not serialise an event");
            }
        }
    }
    Bytes::from(out)
}

async fn wait_closing(closing: &mut Option<watch::Receiver<bool>>) {
    match closing {
        // An error means the server is gone: close too.
        Some(rx) => {
            let _ = rx.wait_for(|closing| *closing).await;
        }
        None => std::future::pending().await,
    }
}

#[cfg(test)]
#[path = "sse_tests.rs"]
mod tests;
