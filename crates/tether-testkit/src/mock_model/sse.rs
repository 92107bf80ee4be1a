//! Server-sent event bodies with per-event delays, and JSON responses.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::Value;

/// One SSE event: an optional `event:` name, its JSON data and a delay before it is sent.
#[derive(Debug, Clone)]
pub(crate) struct Frame {
    pub event: Option<String>,
    pub data: Value,
    pub delay: Duration,
}

impl Frame {
    /// A named event (`event: NAME`), sent at once.
    pub fn named(event: &str, data: Value) -> Frame {
        Frame {
            event: Some(event.to_string()),
            data,
            delay: Duration::ZERO,
        }
    }

    /// A data-only event, sent at once.
    pub fn data(data: Value) -> Frame {
        Frame {
            event: None,
            data,
            delay: Duration::ZERO,
        }
    }

    /// The same frame, sent `ms` milliseconds after the previous one.
    pub fn after_ms(mut self, ms: u64) -> Frame {
        self.delay = Duration::from_millis(ms);
        self
    }

    fn encode(&self) -> String {
        let data = self.data.to_string();
        match &self.event {
            Some(e) => format!("event: {e}\ndata: {data}\n\n"),
            None => format!("data: {data}\n\n"),
        }
    }
}

/// What the mock bills a response (see [`Billing`]): the usage it reported in the last
/// frame it sent that carried one (a vendor's usage fields are running totals per
/// response), or in its JSON body.
#[derive(Debug, Clone)]
pub(crate) struct Billing {
    pub state: super::Shared,
    /// The response's request number.
    pub n: u64,
}

tokio::task_local! {
    /// The billing of the response being rendered (set around `render`).
    pub(crate) static BILLING: Billing;
}

/// The (input, output) tokens a frame's or body's usage fields report, in any API's
/// shape: Anthropic (`usage`, `message.usage`), OpenAI Responses (`response.usage`, or
/// `usage` with `input_tokens`), Gemini (`usageMetadata`).
fn usage_in(data: &Value) -> Option<(u64, u64)> {
    let n = |v: &Value, k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
    if let Some(m) = data.get("usageMetadata") {
        return Some((n(m, "promptTokenCount"), n(m, "candidatesTokenCount")));
    }
    let u = data
        .get("usage")
        .or_else(|| data.pointer("/message/usage"))
        .or_else(|| data.pointer("/response/usage"))
        .filter(|u| u.is_object())?;
    let input = n(u, "input_tokens")
        + n(u, "cache_read_input_tokens")
        + n(u, "cache_creation_input_tokens");
    Some((input, n(u, "output_tokens")))
}

fn bill(billing: Option<&Billing>, data: &Value) {
    if let (Some(b), Some(u)) = (billing, usage_in(data)) {
        super::lock(&b.state).billed.insert(b.n, u);
    }
}

/// A `text/event-stream` response sending `frames` in order, each after its delay. A
/// client that disconnects simply ends the stream; what it was sent is what is billed.
pub(crate) fn sse_response(frames: Vec<Frame>) -> Response {
    let billing = BILLING.try_with(Billing::clone).ok();
    let stream = futures::stream::iter(frames).then(move |f| {
        let billing = billing.clone();
        async move {
            if !f.delay.is_zero() {
                tokio::time::sleep(f.delay).await;
            }
            bill(billing.as_ref(), &f.data);
            Ok::<_, Infallible>(bytes::Bytes::from(f.encode()))
        }
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// A JSON response with this status.
pub(crate) fn json_response(status: u16, body: Value) -> Response {
    if status == 200 {
        bill(BILLING.try_with(Billing::clone).ok().as_ref(), &body);
    }
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, axum::Json(body)).into_response()
}

/// Rough token count of a JSON value (4 bytes a token), for usage fields.
pub(crate) fn tokens_of(v: &Value) -> u64 {
    (v.to_string().len() as u64 / 4).max(1)
}

/// Rough token count of a text.
pub(crate) fn tokens_of_text(t: &str) -> u64 {
    (t.len() as u64 / 4).max(1)
}
