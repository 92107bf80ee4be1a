//! Claude Code's stream-json link: one JSON object per line in both directions. Not
//! JSON-RPC: messages carry a `type`; our own `control_request`s are matched to the
//! agent's `control_response`s by `request_id`, and everything else the agent prints is
//! handed, in wire order, to a synchronous handler on the reader task. Lines are read by
//! [`crate::ndjson`]: non-JSON lines (and lines over [`MAX_LINE`](crate::ndjson::MAX_LINE))
//! are logged and skipped. When stdout ends, pending control requests fail with
//! [`ControlError::Closed`] and the handler is told once, with the exit status and the
//! stderr tail.
//!
//! Knows nothing about turns, tools or permissions.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::jsonrpc::{CloseInfo, OnClose};
use crate::ndjson::{ClosedError, LineReader, LineWriter, Requests};

/// A control request of ours that got no success answer.
#[derive(Debug, Clone)]
pub(crate) enum ControlError {
    /// The agent answered `subtype: "error"`.
    Remote(String),
    /// The agent's output ended first.
    Closed(CloseInfo),
    /// Writing to the agent failed.
    Write(String),
}

impl ClosedError for ControlError {
    fn closed(info: CloseInfo) -> Self {
        ControlError::Closed(info)
    }
}

/// What the reader hands to the handler.
#[derive(Debug)]
pub(crate) enum Incoming {
    /// Any message but a `control_response` (those resolve our requests).
    Message(serde_json::Map<String, Value>),
    /// The agent's output ended (sent once, last).
    Closed(CloseInfo),
}

/// Called on the reader task for every incoming message, in order. Must not block.
pub(crate) type Handler = Box<dyn FnMut(&Link, Incoming) + Send>;

struct Inner {
    writer: LineWriter,
    requests: Requests<String, ControlError>,
    next_id: AtomicU64,
}

/// The writing half plus the control-request bookkeeping. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Link {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("closed", &self.closed())
            .finish()
    }
}

impl Link {
    /// Starts the reader task on `reader`; writes go to `writer`.
    pub fn spawn(
        reader: impl AsyncRead + Send + Unpin + 'static,
        writer: impl AsyncWrite + Send + Unpin + 'static,
        handler: Handler,
        on_close: OnClose,
    ) -> Link {
        let link = Link {
            inner: Arc::new(Inner {
                writer: LineWriter::new(writer),
                requests: Requests::default(),
                next_id: AtomicU64::new(1),
            }),
        };
        tokio::spawn(read_loop(link.clone(), reader, handler, on_close));
        link
    }

    /// `Some` once the agent's output has ended.
    pub fn closed(&self) -> Option<CloseInfo> {
        self.inner.requests.closed()
    }

    /// Sends `control_request{request}` and waits for the matching `control_response`;
    /// its `response` object on success.
    pub async fn request(&self, request: Value) -> Result<Value, ControlError> {
        let id = format!(
            "tether-{}",
            self.inner.next_id.fetch_add(1, Ordering::Relaxed)
        );
        let message = json!({"type": "control_request", "request_id": id, "request": request});
        self.inner.requests.call(id, self.send(&message)).await
    }

    /// Answers the agent's control request `request_id`: success with `response`, or an
    /// error with a message.
    pub async fn respond(
        &self,
        request_id: &Value,
        reply: Result<Value, String>,
    ) -> Result<(), ControlError> {
        let response = match reply {
            Ok(response) => {
                json!({"subtype": "success", "request_id": request_id, "response": response})
            }
            Err(error) => json!({"subtype": "error", "request_id": request_id, "error": error}),
        };
        self.send(&json!({"type": "control_response", "response": response}))
            .await
    }

    /// Writes one message as one line.
    pub async fn send(&self, message: &Value) -> Result<(), ControlError> {
        self.inner
            .writer
            .send(message)
            .await
            .map_err(ControlError::Write)
    }

    /// Closes the agent's stdin (claude exits on end of input). Later sends fail.
    pub async fn close(&self) {
        self.inner.writer.close().await;
    }

    fn resolve(&self, response: &Value) {
        let Some(id) = response.get("request_id").and_then(Value::as_str) else {
            tracing::debug!("control_response without request_id");
            return;
        };
        let reply = match response.get("subtype").and_then(Value::as_str) {
            Some("error") => Err(ControlError::Remote(
                response
                    .get("error")
                    .and_then(Value::as_str)
                    .unwrap_or("error")
                    .to_owned(),
            )),
            _ => Ok(response.get("response").cloned().unwrap_or(Value::Null)),
        };
        if !self.inner.requests.resolve(&id.to_owned(), reply) {
            tracing::debug!(id, "control_response to an unknown or abandoned request");
        }
    }
}

async fn read_loop(
    link: Link,
    reader: impl AsyncRead + Send + Unpin,
    mut handler: Handler,
    on_close: OnClose,
) {
    let mut reader = LineReader::new(reader, "claude");
    while let Some(mut message) = reader.next_object().await {
        if message.get("type").and_then(Value::as_str) == Some("control_response") {
            link.resolve(&message.remove("response").unwrap_or(Value::Null));
        } else {
            handler(&link, Incoming::Message(message));
        }
    }
    let info = on_close().await;
    link.inner.requests.close(info.clone());
    handler(&link, Incoming::Closed(info));
}
