//! Claude Code's stream-json link: one JSON object per line in both directions. Not
//! JSON-RPC: messages carry a `type`; our own `control_request`s are matched to the
//! agent's `control_response`s by `request_id`, and everything else the agent prints is
//! handed, in wire order, to a synchronous handler on the reader task. Non-JSON lines (and
//! lines over [`MAX_LINE`]) are logged and skipped. When stdout ends, pending control requests fail with
//! [`ControlError::Closed`] and the handler is told once, with the exit status and the
//! stderr tail.
//!
//! Knows nothing about turns, tools or permissions.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::oneshot;

use crate::jsonrpc::{CloseInfo, LineRead, MAX_LINE, OnClose, read_line_capped};

/// How long a control request whose write failed waits for the reader's close report.
const WRITE_FAILURE_WAIT: Duration = Duration::from_secs(2);

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

type Writer = Box<dyn AsyncWrite + Send + Unpin>;
type Reply = Result<Value, ControlError>;

#[derive(Default)]
struct Pending {
    waiting: HashMap<String, oneshot::Sender<Reply>>,
    closed: Option<CloseInfo>,
}

struct Inner {
    writer: tokio::sync::Mutex<Option<Writer>>,
    pending: Mutex<Pending>,
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
                writer: tokio::sync::Mutex::new(Some(Box::new(writer))),
                pending: Mutex::new(Pending::default()),
                next_id: AtomicU64::new(1),
            }),
        };
        tokio::spawn(read_loop(link.clone(), reader, handler, on_close));
        link
    }

    fn pending(&self) -> MutexGuard<'_, Pending> {
        self.inner.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `Some` once the agent's output has ended.
    pub fn closed(&self) -> Option<CloseInfo> {
        self.pending().closed.clone()
    }

    /// Sends `control_request{request}` and waits for the matching `control_response`;
    /// its `response` object on success.
    pub async fn request(&self, request: Value) -> Result<Value, ControlError> {
        let id = format!(
            "tether-{}",
            self.inner.next_id.fetch_add(1, Ordering::Relaxed)
        );
        let (tx, rx) = oneshot::channel();
        {
            let mut pending = self.pending();
            if let Some(info) = &pending.closed {
                return Err(ControlError::Closed(info.clone()));
            }
            pending.waiting.insert(id.clone(), tx);
        }
        let _cleanup = RemoveOnDrop {
            link: self,
            id: id.clone(),
        };
        let message = json!({"type": "control_request", "request_id": id, "request": request});
        if let Err(e) = self.send(&message).await {
            // Most likely the process died: prefer the reader's report with the stderr tail.
            return match tokio::time::timeout(WRITE_FAILURE_WAIT, rx).await {
                Ok(Ok(reply)) => reply,
                _ => Err(e),
            };
        }
        match rx.await {
            Ok(reply) => reply,
            Err(_) => Err(ControlError::Closed(self.closed().unwrap_or(CloseInfo {
                status: "connection dropped".to_owned(),
                stderr_tail: String::new(),
            }))),
        }
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
        let mut line =
            serde_json::to_vec(message).map_err(|e| ControlError::Write(e.to_string()))?;
        line.push(b'\n');
        let mut writer = self.inner.writer.lock().await;
        let Some(w) = writer.as_mut() else {
            return Err(ControlError::Write("connection closed".to_owned()));
        };
        let result = async {
            w.write_all(&line).await?;
            w.flush().await
        }
        .await;
        result.map_err(|e| ControlError::Write(format!("writing to agent: {e}")))
    }

    /// Closes the agent's stdin (claude exits on end of input). Later sends fail.
    pub async fn close(&self) {
        if let Some(mut writer) = self.inner.writer.lock().await.take() {
            let _ = writer.shutdown().await;
        }
    }

    fn resolve(&self, response: &Value) {
        let Some(id) = response.get("request_id").and_then(Value::as_str) else {
            tracing::debug!("control_response without request_id");
            return;
        };
        let Some(tx) = self.pending().waiting.remove(id) else {
            tracing::debug!(id, "control_response to an unknown or abandoned request");
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
        let _ = tx.send(reply);
    }

    fn mark_closed(&self, info: CloseInfo) {
        let waiting = {
            let mut pending = self.pending();
            pending.closed = Some(info.clone());
            std::mem::take(&mut pending.waiting)
        };
        for (_, tx) in waiting {
            let _ = tx.send(Err(ControlError::Closed(info.clone())));
        }
    }
}

/// Forgets a pending request whose caller stopped waiting.
struct RemoveOnDrop<'a> {
    link: &'a Link,
    id: String,
}

impl Drop for RemoveOnDrop<'_> {
    fn drop(&mut self) {
        self.link.pending().waiting.remove(&self.id);
    }
}

async fn read_loop(
    link: Link,
    reader: impl AsyncRead + Send + Unpin,
    mut handler: Handler,
    on_close: OnClose,
) {
    let mut reader = BufReader::new(reader);
    let mut buf = Vec::new();
    loop {
        match read_line_capped(&mut reader, &mut buf, MAX_LINE).await {
            Ok(LineRead::Eof) => break,
            Ok(LineRead::Line) => {}
            Ok(LineRead::TooLong(len)) => {
                tracing::warn!(len, "skipping an over-long line from claude");
                continue;
            }
            Err(e) => {
                tracing::warn!("reading agent output: {e}");
                break;
            }
        }
        let line = String::from_utf8_lossy(&buf);
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(line) {
            Ok(Value::Object(mut message)) => {
                if message.get("type").and_then(Value::as_str) == Some("control_response") {
                    link.resolve(&message.remove("response").unwrap_or(Value::Null));
                } else {
                    handler(&link, Incoming::Message(message));
                }
            }
            _ => {
                let cut: String = line.chars().take(200).collect();
                tracing::warn!(line = %cut, "skipping non-JSON line from claude");
            }
        }
    }
    let info = on_close().await;
    link.mark_closed(info.clone());
    handler(&link, Incoming::Closed(info));
}
