//! A thin JSON-RPC connection over newline-delimited JSON, shared by the ACP driver
//! (`"jsonrpc":"2.0"`) and the Codex app-server driver (same shape, no `"jsonrpc"` field).
//!
//! Outgoing requests get integer ids and are awaited through a map of id → oneshot.
//! Incoming notifications and requests are handed, in wire order, to a synchronous handler
//! running on the reader task (so a response is never seen before the notifications that
//! preceded it); the handler answers requests through the [`Connection`] it is given.
//! Lines are read by [`crate::ndjson`]: non-JSON lines, and lines longer than [`MAX_LINE`],
//! are logged and skipped. When stdout closes, every pending request fails with
//! [`RpcError::Closed`].
//!
//! Knows nothing about ACP or Codex methods.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use futures::future::BoxFuture;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::driver::AgentError;
pub use crate::ndjson::MAX_LINE;
use crate::ndjson::{ClosedError, LineReader, LineWriter, Requests};

/// JSON-RPC "method not found".
pub const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC "invalid params".
pub const INVALID_PARAMS: i64 = -32602;

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

impl ClosedError for RpcError {
    fn closed(info: CloseInfo) -> Self {
        RpcError::Closed(info)
    }
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

struct Inner {
    writer: LineWriter,
    requests: Requests<i64, RpcError>,
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
                writer: LineWriter::new(writer),
                requests: Requests::default(),
                next_id: AtomicI64::new(0),
                options,
            }),
        };
        tokio::spawn(read_loop(conn.clone(), reader, handler, on_close));
        conn
    }

    /// `Some` once the peer's output has ended.
    pub fn closed(&self) -> Option<CloseInfo> {
        self.inner.requests.closed()
    }

    /// Sends a request and waits for its response.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let message = json!({"id": id, "method": method, "params": params});
        self.inner.requests.call(id, self.send(message)).await
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

    /// Refuses an incoming request with "method not found" (without waiting for the write).
    pub fn refuse(&self, id: Value, message: String) {
        let conn = self.clone();
        tokio::spawn(async move {
            let _ = conn.respond(id, Err((METHOD_NOT_FOUND, message))).await;
        });
    }

    /// The error for a failed request or notification: the crash report once the peer's
    /// output has ended (most likely why it failed), else `e` as an [`AgentError`].
    pub fn failure(&self, e: RpcError) -> AgentError {
        match self.closed() {
            Some(info) => info.to_error(),
            None => e.into_agent_error(),
        }
    }

    /// Closes the writing side (the peer sees end of input). Later sends fail.
    pub async fn close(&self) {
        self.inner.writer.close().await;
    }

    async fn send(&self, mut message: Value) -> Result<(), RpcError> {
        if self.inner.options.jsonrpc_field
            && let Value::Object(map) = &mut message
        {
            map.insert("jsonrpc".to_owned(), json!("2.0"));
        }
        self.inner
            .writer
            .send(&message)
            .await
            .map_err(RpcError::Write)
    }

    fn resolve(&self, id: &Value, reply: Result<Value, RpcError>) {
        let resolved = match id.as_i64() {
            Some(id) => self.inner.requests.resolve(&id, reply),
            None => false,
        };
        if !resolved {
            tracing::debug!(%id, "response to an unknown or abandoned request");
        }
    }
}

async fn read_loop(
    conn: Connection,
    reader: impl AsyncRead + Send + Unpin,
    mut handler: Handler,
    on_close: OnClose,
) {
    let mut reader = LineReader::new(reader, "agent");
    while let Some(message) = reader.next_object().await {
        dispatch(&conn, message, &mut handler);
    }
    drop(handler);
    let info = on_close().await;
    conn.inner.requests.close(info);
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
