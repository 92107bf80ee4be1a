//! Helpers for the delegation tests: a parent conversation on the fake agent calls
//! tether's MCP tools through the `mcp <tool> <json>` directive.
#![allow(dead_code)]

use std::time::Duration;

use serde_json::{Value, json};
use tether_testkit::{Daemon, within};

/// The JSON result of a tool call from the parent's reply (`<json>\nremembers ...`).
pub fn tool_result(turn: &Value) -> Value {
    let text = turn["result_text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text: {turn}"));
    let body = text
        .rsplit_once("\nremembers ")
        .map(|(b, _)| b)
        .unwrap_or(text);
    let last = body.lines().last().unwrap_or(body);
    serde_json::from_str(last).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// Calls `tool` from the parent conversation and waits for the result.
pub async fn mcp(d: &Daemon, parent: &str, tool: &str, args: Value) -> Value {
    let (_, turn) = d.say_and_wait(parent, &format!("mcp {tool} {args}")).await;
    assert_eq!(turn["status"], "completed", "parent turn: {turn}");
    tool_result(&turn)
}

/// Delegates `task` to `agent` and returns the task id.
pub async fn delegate(d: &Daemon, parent: &str, agent: &str, task: &str) -> String {
    let r = mcp(
        d,
        parent,
        "delegate_to_agent",
        json!({"agent_type": agent, "task": task}),
    )
    .await;
    assert_eq!(r["status"], "running", "{r}");
    r["task_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no task id: {r}"))
        .to_string()
}

/// Waits (from the parent) until the task's latest turn is no longer running.
pub async fn wait_task(d: &Daemon, parent: &str, task: &str) -> Value {
    within("task ends", async {
        loop {
            let r = mcp(
                d,
                parent,
                "get_delegation_status",
                json!({"task_ids": [task], "wait_ms": 15000}),
            )
            .await;
            let t = r["tasks"][0].clone();
            if t["status"] != "running" {
                return t;
            }
        }
    })
    .await
}

/// GET that retries while the daemon answers `rebuilding`.
pub async fn get_ready(d: &Daemon, path: &str) -> Value {
    within("not rebuilding", async {
        loop {
            let (status, body) = d.get(path).await;
            if status == 503 && body["error"]["code"] == "rebuilding" {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            assert_eq!(status, 200, "GET {path}: {body}");
            return body;
        }
    })
    .await
}

/// Polls the task's availability until `pred` holds.
pub async fn wait_availability(d: &Daemon, task: &str, want: &str) -> Value {
    let last = std::sync::Mutex::new(Value::Null);
    let waited = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let c = get_ready(d, &format!("/api/v1/conversations/{task}/continuation")).await;
            if c["availability"] == want {
                return c;
            }
            *last.lock().unwrap() = c;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    waited.unwrap_or_else(|_| {
        let task_view = last.lock().unwrap().clone();
        panic!("timed out after 20s: availability {want}; last seen {task_view}")
    })
}

/// Waits until a task's agent has reported its session (availability `running` comes
/// as soon as the turn is open, before that): only then can the task be resumed after
/// the daemon restarts.
pub async fn wait_child_session(d: &Daemon, task: &str) {
    let c = d.get_ok(&format!("/api/v1/conversations/{task}")).await;
    let sid = c["binding"]["session_id"]
        .as_str()
        .unwrap_or_else(|| panic!("not bound: {c}"))
        .to_string();
    within("the child's agent session is on record", async {
        loop {
            let s = d.get_ok(&format!("/api/v1/sessions/{sid}")).await;
            if s["external_id"].is_string() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// The parent's events of one type.
pub async fn parent_events(d: &Daemon, parent: &str, kind: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let conv = d.get_ok(&format!("/api/v1/conversations/{parent}")).await;
    let sid = conv["binding"]["session_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let events = d
        .get_ok(&format!("/api/v1/sessions/{sid}/events?limit=1000"))
        .await;
    for e in events["events"].as_array().cloned().unwrap_or_default() {
        if e["payload"]["type"] == kind {
            out.push(e);
        }
    }
    out
}

/// One JSON-RPC request to `/mcp` with `token`; (HTTP status, body).
pub async fn mcp_http(
    d: &Daemon,
    token: &str,
    id: i64,
    method: &str,
    params: Value,
) -> (u16, Value) {
    let resp = within(
        "MCP over HTTP",
        d.client
            .post(d.url("/mcp"))
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .json(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .send(),
    )
    .await
    .unwrap_or_else(|e| panic!("MCP over HTTP: {e}"));
    let status = resp.status().as_u16();
    let text = within("MCP body", resp.text()).await.unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// Calls `tool` over `/mcp` with `token`; the structured result (or error) of the call.
pub async fn http_tool(d: &Daemon, token: &str, tool: &str, args: Value) -> Value {
    let (status, r) = mcp_http(
        d,
        token,
        7,
        "tools/call",
        json!({"name": tool, "arguments": args}),
    )
    .await;
    assert_eq!(status, 200, "{tool}: {r}");
    r["result"]["structuredContent"].clone()
}

/// The events of a session.
pub async fn session_events(d: &Daemon, session_id: &str) -> Vec<Value> {
    let events = d
        .get_ok(&format!("/api/v1/sessions/{session_id}/events?limit=1000"))
        .await;
    events["events"].as_array().cloned().unwrap_or_default()
}

/// The session a conversation is bound to.
pub async fn bound_session(d: &Daemon, conv: &str) -> String {
    let c = d.get_ok(&format!("/api/v1/conversations/{conv}")).await;
    c["binding"]["session_id"]
        .as_str()
        .unwrap_or_else(|| panic!("not bound: {c}"))
        .to_string()
}

/// Polls until a session has an event that `pred` accepts; returns it.
pub async fn wait_event(
    d: &Daemon,
    session_id: &str,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    within(what, async {
        loop {
            if let Some(e) = session_events(d, session_id)
                .await
                .into_iter()
                .find(|e| pred(e))
            {
                return e;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

/// The MCP socket and token of the parent's current agent session (`mcp env`).
pub async fn session_mcp_env(d: &Daemon, conv: &str) -> (String, String) {
    let (_, turn) = d.say_and_wait(conv, "mcp env").await;
    let env = tool_result(&turn);
    (
        env["TETHER_MCP_SOCKET"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        env["TETHER_MCP_TOKEN"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

/// A `tether mcp` companion process, driven by the test as its agent would.
pub struct Companion {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    next_id: i64,
}

impl Companion {
    /// Starts the companion with a socket and token and runs `initialize`.
    pub async fn start(socket: &str, token: &str) -> Companion {
        use tokio::io::AsyncBufReadExt;
        let mut child = tokio::process::Command::new(tether_testkit::bin_path("tether"))
            .arg("mcp")
            .env("TETHER_MCP_SOCKET", socket)
            .env("TETHER_MCP_TOKEN", token)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("tether mcp: {e}"));
        let stdin = child.stdin.take().unwrap_or_else(|| panic!("no stdin"));
        let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
        let mut c = Companion {
            child,
            stdin,
            lines: tokio::io::BufReader::new(stdout).lines(),
            next_id: 1,
        };
        let init = c
            .request(
                "initialize",
                json!({"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "test", "version": "1"}}),
            )
            .await;
        c.response(init).await;
        c.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        c
    }

    async fn send(&mut self, msg: Value) {
        use tokio::io::AsyncWriteExt;
        let mut line = msg.to_string();
        line.push('\n');
        within("write to tether mcp", self.stdin.write_all(line.as_bytes()))
            .await
            .unwrap_or_else(|e| panic!("write: {e}"));
    }

    /// Sends a request; its id.
    pub async fn request(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        id
    }

    /// Starts a `tools/call`; its id.
    pub async fn call(&mut self, tool: &str, args: Value) -> i64 {
        self.request("tools/call", json!({"name": tool, "arguments": args}))
            .await
    }

    /// The response to request `id`.
    pub async fn response(&mut self, id: i64) -> Value {
        within("tether mcp answers", async {
            loop {
                let line = self
                    .lines
                    .next_line()
                    .await
                    .unwrap_or_else(|e| panic!("read: {e}"))
                    .unwrap_or_else(|| panic!("tether mcp closed its output"));
                let Ok(msg) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                if msg["id"] == id && msg.get("method").is_none() {
                    return msg;
                }
            }
        })
        .await
    }

    /// The structured result of tool call `id`.
    pub async fn tool_result(&mut self, id: i64) -> Value {
        self.response(id).await["result"]["structuredContent"].clone()
    }

    /// A response the companion wrote within 20 ms, if any (a wait that should still be
    /// in flight has none; notifications are skipped).
    pub async fn early_line(&mut self) -> Option<String> {
        loop {
            let next = self.lines.next_line();
            let line = match tokio::time::timeout(Duration::from_millis(20), next).await {
                Ok(Ok(Some(line))) => line,
                Ok(Ok(None)) => return Some("(output closed)".to_owned()),
                Ok(Err(e)) => return Some(format!("(read: {e})")),
                Err(_) => return None,
            };
            let notification =
                serde_json::from_str::<Value>(&line).is_ok_and(|m| m.get("method").is_some());
            if !notification {
                return Some(line);
            }
        }
    }

    /// Kills the companion (its agent went away).
    pub async fn kill(mut self) {
        let _ = self.child.kill().await;
    }
}
