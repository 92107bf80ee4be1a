//! A thin JSON-RPC connection over newline-delimited JSON, shared by the ACP driver
//! (`"jsonrpc":"2.0"`) and the Codex app-server driver (same shape, no `"jsonrpc"` field).
//!
//! Outgoing requests get integer ids and are awaited through a map of id → oneshot.
//! Incoming notifications and requests are handed, in wire order, to a synchronous handler
//! running on the reader task (so a response is never seen before the notifications that
//! preceded it); the handler answers requests through the [`Connection`] it is given.
//! Non-JSON lines, and lines longer than [`MAX_LINE`], are logged and skipped. When stdout
//! closes, every pending request fails with [`RpcError::Closed`].
//!
//! Knows nothing about ACP or Codex methods.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::oneshot;

use crate::driver::AgentError;

/// JSON-RPC "method not found".
pub const METHOD_NOT_FOUND: i64 = -32601;

/// The longest line read from an agent (32 MiB); longer ones are skipped, so an agent that
/// prints endless output without a newline cannot make tether buffer all of it.
pub const MAX_LINE: usize = 32 * 1024 * 1024;

/// Line buffer capacity kept between lines.
const KEEP_CAPACITY: usize = 256 * 1024;

/// How long a request whose write failed waits for the reader to report the closed pipe.
const WRITE_FAILURE_WAIT: Duration = Duration::from_secs(2);

/// Why a connection ended: the process status and its stderr tail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloseInfo {
    pub status: String,
    pub stderr_tail: String,
}

impl CloseInfo {
    pub fn to_error(&self) -> AgentError {
        AgentError::Crashed {
            status: self.status.clone(),
            stderr_tail: self.stderr_tail.clone(),
        }
    }
}

/// A request that did not get a result.
#[derive(Debug, Clone)]
pub enum RpcError {
    /// The peer answered with a JSON-RPC error.
    Remote {
        code: i64,
        message: String,
        data: Option<Value>,
    },
    /// The peer's output ended before the answer.
    Closed(CloseInfo),
    /// Writing to the peer failed.
    Write(String),
}

impl RpcError {
    /// Remote errors become [`AgentError::Agent`], a closed connection
    /// [`AgentError::Crashed`], a failed write [`AgentError::Protocol`].
    pub fn into_agent_error(self) -> AgentError {
        match self {
            RpcError::Remote { message, .. } => AgentError::Agent { message },
            RpcError::Closed(info) => info.to_error(),
            RpcError::Write(message) => AgentError::Protocol { message },
        }
    }
}

/// Something the peer sent that is not a response.
#[derive(Debug, Clone)]
pub enum Incoming {
    Notification {
        method: String,
        params: Value,
    },
    /// Must be answered with [`Connection::respond`] using the same `id` (int or string).
    Request {
        id: Value,
        method: String,
        params: Value,
    },
}

/// Called on the reader task for every incoming notification and request, in order.
/// It must not block; spawn a task for anything that waits.
pub type Handler = Box<dyn FnMut(&Connection, Incoming) + Send>;

/// Called once when the peer's output ends; yields the status and stderr tail.
pub type OnClose = Box<dyn FnOnce() -> BoxFuture<'static, CloseInfo> + Send>;

/// Options of a connection.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Add `"jsonrpc":"2.0"` to every outgoing message (ACP: yes; Codex app-server: no).
    pub jsonrpc_field: bool,
}

type Writer = Box<dyn AsyncWrite + Send + Unpin>;
type Reply = Result<Value, RpcError>;

#[derive(Default)]
struct Pending {
    waiting: HashMap<i64, oneshot::Sender<Reply>>,
    closed: Option<CloseInfo>,
}

struct Inner {
    writer: tokio::sync::Mutex<Option<Writer>>,
    pending: Mutex<Pending>,
    next_id: AtomicI64,
    options: Options,
}

/// One JSON-RPC peer. Cheap to clone.
#[derive(Clone)]
pub struct Connection {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("options", &self.inner.options)
            .field("closed", &self.closed())
            .finish()
    }
}

impl Connection {
    /// Starts the reader task on `reader` and returns the connection writing to `writer`.
    pub fn spawn(
        reader: impl AsyncRead + Send + Unpin + 'static,
        writer: impl AsyncWrite + Send + Unpin + 'static,
        options: Options,
        handler: Handler,
        on_close: OnClose,
    ) -> Connection {
        let conn = Connection {
            inner: Arc::new(Inner {
                writer: tokio::sync::Mutex::new(Some(Box::new(writer))),
                pending: Mutex::new(Pending::default()),
                next_id: AtomicI64::new(0),
                options,
            }),
        };
        tokio::spawn(read_loop(conn.clone(), reader, handler, on_close));
        conn
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.inner.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `Some` once the peer's output has ended.
    pub fn closed(&self) -> Option<CloseInfo> {
        self.pending().closed.clone()
    }

    /// Sends a request and waits for its response.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut pending = self.pending();
            if let Some(info) = &pending.closed {
                return Err(RpcError::Closed(info.clone()));
            }
            pending.waiting.insert(id, tx);
        }
        let _cleanup = RemoveOnDrop { conn: self, id };
        let message = json!({"id": id, "method": method, "params": params});
        if let Err(e) = self.send(message).await {
            // Most likely the process died: prefer the reader's report with the stderr tail.
            return match tokio::time::timeout(WRITE_FAILURE_WAIT, rx).await {
                Ok(Ok(reply)) => reply,
                _ => Err(e),
            };
        }
        match rx.await {
            Ok(reply) => reply,
            Err(_) => Err(RpcError::Closed(self.closed().unwrap_or(CloseInfo {
                status: "connection dropped".to_owned(),
                stderr_tail: String::new(),
            }))),
        }
    }

    /// Sends a notification.
    pub async fn notify(&self, method: &str, params: Value) -> Result<(), RpcError> {
        self.send(json!({"method": method, "params": params})).await
    }

    /// Answers an incoming request with a result or a JSON-RPC error `(code, message)`.
    pub async fn respond(
        &self,
        id: Value,
        reply: Result<Value, (i64, String)>,
    ) -> Result<(), RpcError> {
        let message = match reply {
            Ok(result) => json!({"id": id, "result": result}),
            Err((code, message)) => {
                json!({"id": id, "error": {"code": code, "message": message}})
            }
        };
        self.send(message).await
    }

    /// Closes the writing side (the peer sees end of input). Later sends fail.
    pub async fn close(&self) {
        if let Some(mut writer) = self.inner.writer.lock().await.take() {
            let _ = writer.shutdown().await;
        }
    }

    async fn send(&self, mut message: Value) -> Result<(), RpcError> {
        if self.inner.options.jsonrpc_field
            && let Value::Object(map) = &mut message
        {
            map.insert("jsonrpc".to_owned(), json!("2.0"));
        }
        let mut line = serde_json::to_vec(&message).map_err(|e| RpcError::Write(e.to_string()))?;
        line.push(b'\n');
        let mut writer = self.inner.writer.lock().await;
        let Some(w) = writer.as_mut() else {
            return Err(RpcError::Write("connection closed".to_owned()));
        };
        let result = async {
            w.write_all(&line).await?;
            w.flush().await
        }
        .await;
        result.map_err(|e| RpcError::Write(format!("writing to agent: {e}")))
    }

    fn resolve(&self, id: &Value, reply: Reply) {
        let waiter = id
            .as_i64()
            .and_then(|id| self.pending().waiting.remove(&id));
        match waiter {
            Some(tx) => {
                let _ = tx.send(reply);
            }
            None => tracing::debug!(%id, "response to an unknown or abandoned request"),
        }
    }

    fn mark_closed(&self, info: CloseInfo) {
        let waiting = {
            let mut pending = self.pending();
            pending.closed = Some(info.clone());
            std::mem::take(&mut pending.waiting)
        };
        for (_, tx) in waiting {
            let _ = tx.send(Err(RpcError::Closed(info.clone())));
        }
    }
}

/// Forgets a pending request whose caller stopped waiting.
struct RemoveOnDrop<'a> {
    conn: &'a Connection,
    id: i64,
}

impl Drop for RemoveOnDrop<'_> {
    fn drop(&mut self) {
        self.conn.pending().waiting.remove(&self.id);
    }
}

/// What [`read_line_capped`] read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LineRead {
    /// End of input, nothing read.
    Eof,
    /// A line (without a newline at the very end of the input) is in the buffer.
    Line,
    /// A line of this many bytes (newline included) was longer than the cap and dropped.
    TooLong(usize),
}

/// Reads one `\n`-terminated line into `buf` (cleared first), keeping at most `max` bytes
/// in memory: a longer line is consumed and dropped.
pub(crate) async fn read_line_capped(
    reader: &mut (impl AsyncBufRead + Unpin),
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<LineRead> {
    buf.clear();
    // Do not keep the memory of one huge line for the rest of the session.
    if buf.capacity() > KEEP_CAPACITY {
        buf.shrink_to(KEEP_CAPACITY);
    }
    let mut total = 0usize;
    let mut too_long = false;
    loop {
        let chunk = reader.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(match (total, too_long) {
                (0, _) => LineRead::Eof,
                (_, true) => LineRead::TooLong(total),
                (_, false) => LineRead::Line,
            });
        }
        let (n, done) = match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        total = total.saturating_add(n);
        if total > max {
            too_long = true;
            buf.clear();
        } else {
            buf.extend_from_slice(&chunk[..n]);
        }
        reader.consume(n);
        if done {
            return Ok(if too_long {
                LineRead::TooLong(total)
            } else {
                LineRead::Line
            });
        }
    }
}

async fn read_loop(
    conn: Connection,
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
                tracing::warn!(len, "skipping an over-long line from agent");
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
            Ok(Value::Object(message)) => dispatch(&conn, message, &mut handler),
            _ => {
                tracing::warn!(line = %truncate(line, 200), "skipping non-JSON-RPC line from agent")
            }
        }
    }
    drop(handler);
    let info = on_close().await;
    conn.mark_closed(info);
}

fn dispatch(conn: &Connection, mut message: Map<String, Value>, handler: &mut Handler) {
    let params = message.remove("params").unwrap_or(Value::Null);
    let id = message.remove("id").filter(|id| !id.is_null());
    match (message.remove("method"), id) {
        (Some(Value::String(method)), Some(id)) => {
            handler(conn, Incoming::Request { id, method, params })
        }
        (Some(Value::String(method)), None) => {
            handler(conn, Incoming::Notification { method, params })
        }
        (None, Some(id)) => {
            let reply = match message.remove("error") {
                Some(error) => Err(RpcError::Remote {
                    code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
                    message: match error.get("message").and_then(Value::as_str) {
                        Some(m) => m.to_owned(),
                        None => error.to_string(),
                    },
                    data: error.get("data").cloned(),
                }),
                None => Ok(message.remove("result").unwrap_or(Value::Null)),
            };
            conn.resolve(&id, reply);
        }
        _ => tracing::warn!(
            "skipping JSON message that is neither request, notification nor response"
        ),
    }
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(input: &[u8], max: usize) -> Vec<(LineRead, String)> {
        // A tiny buffer, so lines span many `fill_buf` chunks.
        let mut reader = BufReader::with_capacity(3, input);
        let mut buf = Vec::new();
        let mut out = Vec::new();
        loop {
            let r = read_line_capped(&mut reader, &mut buf, max)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            if r == LineRead::Eof {
                return out;
            }
            out.push((r, String::from_utf8_lossy(&buf).into_owned()));
        }
    }

    #[tokio::test]
    async fn long_lines_are_dropped_and_reading_goes_on() {
        let got = lines(b"short\n0123456789abc\nok\n\nlast", 8).await;
        assert_eq!(
            got,
            vec![
                (LineRead::Line, "short\n".to_owned()),
                (LineRead::TooLong(14), String::new()),
                (LineRead::Line, "ok\n".to_owned()),
                (LineRead::Line, "\n".to_owned()),
                (LineRead::Line, "last".to_owned()),
            ]
        );
        assert_eq!(
            lines(b"0123456789", 8).await,
            vec![(LineRead::TooLong(10), String::new())]
        );
        assert_eq!(lines(b"", 8).await, vec![]);
        // Exactly at the cap is kept.
        assert_eq!(
            lines(b"1234567\n", 8).await,
            vec![(LineRead::Line, "1234567\n".to_owned())]
        );
    }
}
