//! Newline-delimited JSON-RPC shared by the ACP and codex dialects: reading stdin lines,
//! classifying messages, answering requests and making agent→client requests (integer
//! ids from 0) whose responses are routed back by id. Codex omits the `"jsonrpc"` field.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};

use anyhow::{Result, anyhow};
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, BufReader, Stdin};
use tokio::sync::oneshot;

use crate::out::Out;

pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
pub const INVALID_REQUEST: i64 = -32600;
pub const RESOURCE_NOT_FOUND: i64 = -32002;

/// Reads stdin one line at a time (lossy UTF-8, line endings stripped).
pub struct Lines {
    reader: BufReader<Stdin>,
    buf: Vec<u8>,
}

impl Lines {
    pub fn stdin() -> Self {
        Self {
            reader: BufReader::new(tokio::io::stdin()),
            buf: Vec::new(),
        }
    }

    /// The next line, or `None` at end of input.
    pub async fn next(&mut self) -> Result<Option<String>> {
        self.buf.clear();
        if self.reader.read_until(b'\n', &mut self.buf).await? == 0 {
            return Ok(None);
        }
        let line = String::from_utf8_lossy(&self.buf);
        Ok(Some(line.trim_end_matches(['\n', '\r']).to_owned()))
    }
}

/// One incoming JSON-RPC message.
#[derive(Debug)]
pub enum Incoming {
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
        params: Value,
    },
    Response {
        id: Value,
        reply: Result<Value, Value>,
    },
    Invalid(String),
}

/// Parse a line into a message. Blank lines give `None`.
pub fn classify(line: &str) -> Option<Incoming> {
    if line.trim().is_empty() {
        return None;
    }
    let Ok(Value::Object(mut msg)) = serde_json::from_str::<Value>(line) else {
        return Some(Incoming::Invalid(line.to_owned()));
    };
    let params = msg.remove("params").unwrap_or(Value::Null);
    let id = msg.remove("id");
    Some(match (msg.remove("method"), id) {
        (Some(Value::String(method)), Some(id)) => Incoming::Request { id, method, params },
        (Some(Value::String(method)), None) => Incoming::Notification { method, params },
        (None, Some(id)) => {
            let reply = match msg.remove("error") {
                Some(err) => Err(err),
                None => Ok(msg.remove("result").unwrap_or(Value::Null)),
            };
            Incoming::Response { id, reply }
        }
        _ => Incoming::Invalid(line.to_owned()),
    })
}

type Pending = Mutex<HashMap<String, oneshot::Sender<Result<Value, Value>>>>;

pub struct Peer {
    out: Out,
    jsonrpc: bool,
    next_id: AtomicI64,
    pending: Pending,
}

/// Removes a pending request when its waiter goes away (e.g. the turn was cancelled).
struct PendingGuard<'a> {
    pending: &'a Pending,
    key: String,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        lock(self.pending).remove(&self.key);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn key(id: &Value) -> String {
    id.to_string()
}

impl Peer {
    pub fn new(out: Out, jsonrpc: bool) -> Self {
        Self {
            out,
            jsonrpc,
            next_id: AtomicI64::new(0),
            pending: Mutex::new(HashMap::new()),
        }
    }

    pub fn out(&self) -> &Out {
        &self.out
    }

    async fn send(&self, mut msg: Map<String, Value>) -> Result<()> {
        if self.jsonrpc {
            msg.insert("jsonrpc".into(), json!("2.0"));
        }
        self.out.send(&Value::Object(msg)).await
    }

    pub async fn notify(&self, method: &str, params: Value) -> Result<()> {
        let mut msg = Map::new();
        msg.insert("method".into(), json!(method));
        msg.insert("params".into(), params);
        self.send(msg).await
    }

    pub async fn respond(&self, id: &Value, result: Value) -> Result<()> {
        let mut msg = Map::new();
        msg.insert("id".into(), id.clone());
        msg.insert("result".into(), result);
        self.send(msg).await
    }

    /// An error whose details are in `data`, as gemini answers a `session/load` it cannot
    /// do ("Internal error" with the reason in `data`).
    pub async fn respond_error_data(
        &self,
        id: &Value,
        code: i64,
        message: &str,
        data: Value,
    ) -> Result<()> {
        let mut msg = Map::new();
        msg.insert("id".into(), id.clone());
        msg.insert(
            "error".into(),
            json!({"code": code, "message": message, "data": data}),
        );
        self.send(msg).await
    }

    pub async fn respond_error(&self, id: &Value, code: i64, message: &str) -> Result<()> {
        let mut msg = Map::new();
        msg.insert("id".into(), id.clone());
        msg.insert("error".into(), json!({"code": code, "message": message}));
        self.send(msg).await
    }

    /// Send a request to the client and wait for its response (`Err(error object)` for
    /// an error response).
    pub async fn request(&self, method: &str, params: Value) -> Result<Result<Value, Value>> {
        let id = json!(self.next_id.fetch_add(1, Ordering::SeqCst));
        let (tx, rx) = oneshot::channel();
        let key = key(&id);
        lock(&self.pending).insert(key.clone(), tx);
        let _guard = PendingGuard {
            pending: &self.pending,
            key,
        };
        let mut msg = Map::new();
        msg.insert("id".into(), id);
        msg.insert("method".into(), json!(method));
        msg.insert("params".into(), params);
        self.send(msg).await?;
        rx.await
            .map_err(|_| anyhow!("no response to {method}: connection closed"))
    }

    /// Route a client response to the request waiting for it (unknown ids are ignored).
    pub fn deliver(&self, id: &Value, reply: Result<Value, Value>) {
        if let Some(tx) = lock(&self.pending).remove(&key(id)) {
            let _ = tx.send(reply);
        } else {
            eprintln!("fake-agent: ignoring response to unknown request id {id}");
        }
    }
}

/// A string field of `params`, or an error message for `-32602`.
pub fn str_param<'a>(params: &'a Value, name: &str) -> Result<&'a str, String> {
    params
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("invalid params: missing string field {name:?}"))
}

/// Concatenated text of a list of content blocks `[{type:"text", text}, ..]`.
pub fn text_of(blocks: Option<&Value>) -> String {
    match blocks {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_messages() {
        assert!(matches!(
            classify(r#"{"jsonrpc":"2.0","id":"a","method":"x","params":{}}"#),
            Some(Incoming::Request {
                id: Value::String(_),
                ..
            })
        ));
        assert!(matches!(
            classify(r#"{"method":"initialized"}"#),
            Some(Incoming::Notification { .. })
        ));
        assert!(matches!(
            classify(r#"{"id":0,"result":{"decision":"accept"}}"#),
            Some(Incoming::Response { reply: Ok(_), .. })
        ));
        assert!(matches!(
            classify(r#"{"id":0,"error":{"code":1,"message":"m"}}"#),
            Some(Incoming::Response { reply: Err(_), .. })
        ));
        assert!(matches!(classify("nope {"), Some(Incoming::Invalid(_))));
        assert!(classify("  ").is_none());
        assert_eq!(
            text_of(Some(
                &json!([{"type":"text","text":"a"},{"type":"image"},{"type":"text","text":"b"}])
            )),
            "ab"
        );
    }
}
