//! ACP v1 dialect: NDJSON JSON-RPC 2.0 on stdin/stdout. initialize, session/new,
//! session/load (replays history), session/resume, session/prompt (streams session/update
//! notifications), session/cancel; agent→client session/request_permission and
//! elicitation/create.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use anyhow::Result;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::engine::{Engine, ResumeError, ToolCall, ToolEnd, TurnEnd, TurnIo};
use crate::mcp_client::{McpServerSpec, parse_servers};
use crate::out::Out;
use crate::rpc::{self, Incoming, Lines, Peer};
use crate::script::Permission;

struct Acp {
    peer: Arc<Peer>,
    engine: Arc<Engine>,
    hang_init: bool,
    /// `--session-id`: every `session/new` answers this id (a misbehaving agent).
    fixed_id: Option<String>,
    /// Session id as the client knows it → the id really used (differs only with
    /// `--resume-other-id`).
    sessions: Mutex<HashMap<String, String>>,
    /// Running prompt per real session id.
    turns: Mutex<HashMap<String, CancellationToken>>,
    /// MCP servers the client gave each real session id.
    mcp: Mutex<HashMap<String, Vec<McpServerSpec>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub async fn run(engine: Arc<Engine>, hang_init: bool, fixed_id: Option<String>) -> Result<()> {
    let acp = Arc::new(Acp {
        peer: Arc::new(Peer::new(Out::new(), true)),
        engine,
        hang_init,
        fixed_id,
        sessions: Mutex::new(HashMap::new()),
        turns: Mutex::new(HashMap::new()),
        mcp: Mutex::new(HashMap::new()),
    });
    let mut lines = Lines::stdin();
    while let Some(line) = lines.next().await? {
        match rpc::classify(&line) {
            None => {}
            Some(Incoming::Invalid(line)) => {
                eprintln!("fake-agent: ignoring non-JSON-RPC line: {line}")
            }
            Some(Incoming::Response { id, reply }) => acp.peer.deliver(&id, reply),
            Some(Incoming::Notification { method, params }) if method == "session/cancel" => {
                acp.cancel(&params);
            }
            Some(Incoming::Notification { .. }) => {}
            Some(Incoming::Request { id, method, params }) => {
                Arc::clone(&acp).request(id, &method, params).await?;
            }
        }
    }
    Ok(())
}

impl Acp {
    async fn request(self: Arc<Self>, id: Value, method: &str, params: Value) -> Result<()> {
        let peer = &self.peer;
        match method {
            "initialize" => {
                if self.hang_init {
                    eprintln!("fake-agent: not answering initialize as asked");
                    return Ok(());
                }
                let result = json!({
                    "protocolVersion": 1,
                    "agentCapabilities": {
                        "loadSession": true,
                        "sessionCapabilities": {"resume": {}},
                        "promptCapabilities": {},
                    },
                    "authMethods": [],
                    "agentInfo": {"name": "fake-agent", "version": env!("CARGO_PKG_VERSION")},
                });
                peer.respond(&id, result).await
            }
            "session/new" => {
                let fresh = self
                    .fixed_id
                    .clone()
                    .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
                let sid = self.engine.new_session(fresh)?;
                if let Ok(cwd) = rpc::str_param(&params, "cwd") {
                    self.engine.set_cwd(&sid, cwd);
                }
                lock(&self.sessions).insert(sid.clone(), sid.clone());
                lock(&self.mcp).insert(sid.clone(), parse_servers(&params));
                peer.respond(&id, json!({"sessionId": sid})).await
            }
            "session/load" | "session/resume" => {
                let requested = match rpc::str_param(&params, "sessionId") {
                    Ok(s) => s.to_owned(),
                    Err(m) => return peer.respond_error(&id, rpc::INVALID_PARAMS, &m).await,
                };
                let resumed = match self.engine.resume(&requested) {
                    Ok(r) => r,
                    // A lost session is answered the way gemini does: "Internal error",
                    // the reason only in `data`.
                    Err(e @ ResumeError::NotFound(_)) => {
                        return peer
                            .respond_error_data(
                                &id,
                                rpc::INTERNAL_ERROR,
                                "Internal error",
                                json!(e.to_string()),
                            )
                            .await;
                    }
                    Err(e) => {
                        return peer
                            .respond_error(&id, rpc::INTERNAL_ERROR, &e.to_string())
                            .await;
                    }
                };
                if let Ok(cwd) = rpc::str_param(&params, "cwd") {
                    self.engine.set_cwd(&resumed.id, cwd);
                }
                lock(&self.sessions).insert(requested, resumed.id.clone());
                lock(&self.mcp).insert(resumed.id.clone(), parse_servers(&params));
                if method == "session/load" {
                    for message in &resumed.history {
                        self.update(&resumed.id, chunk("user_message_chunk", message))
                            .await?;
                        self.update(&resumed.id, chunk("agent_message_chunk", "(replayed)"))
                            .await?;
                    }
                }
                peer.respond(&id, json!({})).await
            }
            "session/prompt" => self.prompt(id, params).await,
            "session/cancel" => {
                self.cancel(&params);
                peer.respond(&id, Value::Null).await
            }
            other => {
                let message = format!("Method not found: {other}");
                peer.respond_error(&id, rpc::METHOD_NOT_FOUND, &message)
                    .await
            }
        }
    }

    async fn update(&self, session_id: &str, update: Value) -> Result<()> {
        send_update(&self.peer, session_id, update).await
    }

    fn real_id(&self, client_id: &str) -> Option<String> {
        lock(&self.sessions).get(client_id).cloned()
    }

    fn cancel(&self, params: &Value) {
        let Some(sid) = params.get("sessionId").and_then(Value::as_str) else {
            return;
        };
        let Some(real) = self.real_id(sid) else {
            return;
        };
        if let Some(token) = lock(&self.turns).get(&real) {
            token.cancel();
        }
    }

    async fn prompt(self: Arc<Self>, id: Value, params: Value) -> Result<()> {
        let peer = &self.peer;
        let sid = match rpc::str_param(&params, "sessionId") {
            Ok(s) => s.to_owned(),
            Err(m) => return peer.respond_error(&id, rpc::INVALID_PARAMS, &m).await,
        };
        let Some(real) = self.real_id(&sid) else {
            let message = format!("session not found: {sid}");
            return peer
                .respond_error(&id, rpc::RESOURCE_NOT_FOUND, &message)
                .await;
        };
        let token = CancellationToken::new();
        let busy = {
            let mut turns = lock(&self.turns);
            let busy = turns.contains_key(&real);
            if !busy {
                turns.insert(real.clone(), token.clone());
            }
            busy
        };
        if busy {
            let message = format!("a prompt is already running in session {sid}");
            return peer
                .respond_error(&id, rpc::INVALID_REQUEST, &message)
                .await;
        }
        let text = rpc::text_of(params.get("prompt"));
        tokio::spawn(async move {
            if let Err(e) = self.run_prompt(&id, &real, &text, &token).await {
                eprintln!("fake-agent: {e:#}");
                std::process::exit(1);
            }
        });
        Ok(())
    }

    async fn run_prompt(
        &self,
        id: &Value,
        session_id: &str,
        text: &str,
        token: &CancellationToken,
    ) -> Result<()> {
        let mut io = AcpIo {
            peer: Arc::clone(&self.peer),
            session_id: session_id.to_owned(),
            mcp: lock(&self.mcp).get(session_id).cloned().unwrap_or_default(),
            spent: None,
        };
        let end = self.engine.run_turn(session_id, text, &mut io, token).await;
        lock(&self.turns).remove(session_id);
        let reply = |stop: &str| match io.spent {
            Some((i, o)) => json!({"stopReason": stop,
                                   "usage": {"inputTokens": i, "outputTokens": o,
                                             "totalTokens": i + o}}),
            None => json!({"stopReason": stop}),
        };
        match end {
            Ok(TurnEnd::Completed) => self.peer.respond(id, reply("end_turn")).await,
            Ok(TurnEnd::Cancelled) => self.peer.respond(id, reply("cancelled")).await,
            Ok(TurnEnd::Limited { secs }) => {
                // As gemini 0.61 answers a quota it does not retry itself.
                let message = format!(
                    "Resource has been exhausted (e.g. check quota).\nSuggested retry after {secs}s."
                );
                self.peer.respond_error(id, 429, &message).await
            }
            Ok(TurnEnd::Failed(message)) => {
                self.peer
                    .respond_error(id, rpc::INTERNAL_ERROR, &message)
                    .await
            }
            Err(e) => {
                self.peer
                    .respond_error(id, rpc::INTERNAL_ERROR, &format!("{e:#}"))
                    .await
            }
        }
    }
}

fn chunk(kind: &str, text: &str) -> Value {
    json!({"sessionUpdate": kind, "content": {"type": "text", "text": text}})
}

async fn send_update(peer: &Peer, session_id: &str, update: Value) -> Result<()> {
    peer.notify(
        "session/update",
        json!({"sessionId": session_id, "update": update}),
    )
    .await
}

struct AcpIo {
    peer: Arc<Peer>,
    session_id: String,
    mcp: Vec<McpServerSpec>,
    /// Tokens reported in the turn (the prompt reply's `usage`): input, output.
    spent: Option<(u64, u64)>,
}

impl AcpIo {
    async fn update(&self, update: Value) -> Result<()> {
        send_update(&self.peer, &self.session_id, update).await
    }
}

fn tool_call_json(call: &ToolCall) -> Value {
    json!({
        "toolCallId": call.id,
        "title": call.title,
        "kind": "execute",
        "status": "pending",
        "rawInput": {"command": call.command},
    })
}

impl TurnIo for AcpIo {
    fn mcp_servers(&self) -> Vec<McpServerSpec> {
        self.mcp.clone()
    }

    async fn chunk(&mut self, text: &str) -> Result<()> {
        self.update(chunk("agent_message_chunk", text)).await
    }

    async fn raw_line(&mut self, line: &str) -> Result<()> {
        self.peer.out().line(line).await
    }

    async fn tool_started(&mut self, call: &ToolCall) -> Result<()> {
        let mut update = tool_call_json(call);
        update["sessionUpdate"] = json!("tool_call");
        self.update(update).await
    }

    async fn permission(&mut self, call: &ToolCall) -> Result<Permission> {
        let params = json!({
            "sessionId": self.session_id,
            "toolCall": tool_call_json(call),
            "options": [
                {"optionId": "allow", "name": "Allow once", "kind": "allow_once"},
                {"optionId": "allow_always", "name": "Always allow", "kind": "allow_always"},
                {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
            ],
        });
        let reply = self
            .peer
            .request("session/request_permission", params)
            .await?;
        let Ok(result) = reply else {
            return Ok(Permission::Cancelled);
        };
        let outcome = &result["outcome"];
        Ok(match outcome["outcome"].as_str() {
            Some("selected") => match outcome["optionId"].as_str() {
                Some("allow") => Permission::Allowed,
                Some("allow_always") => Permission::AllowedAlways,
                _ => Permission::Denied,
            },
            _ => Permission::Cancelled,
        })
    }

    async fn tool_finished(&mut self, call: &ToolCall, end: &ToolEnd) -> Result<()> {
        let (status, text) = match end {
            ToolEnd::Completed { output } => ("completed", output.as_str()),
            ToolEnd::Declined => ("failed", "rejected by the user"),
            ToolEnd::Cancelled => ("failed", "cancelled"),
        };
        self.update(json!({
            "sessionUpdate": "tool_call_update",
            "toolCallId": call.id,
            "status": status,
            "content": [{"type": "content", "content": {"type": "text", "text": text}}],
        }))
        .await
    }

    async fn usage(&mut self, input: u64, output: u64) -> Result<()> {
        let (i, o) = self.spent.get_or_insert((0, 0));
        *i += input;
        *o += output;
        Ok(())
    }

    async fn ask(&mut self, question: &str) -> Result<Option<String>> {
        let params = json!({
            "sessionId": self.session_id,
            "mode": "form",
            "message": question,
            "requestedSchema": {
                "type": "object",
                "properties": {"answer": {"type": "string", "description": question}},
                "required": ["answer"],
            },
        });
        let reply = self.peer.request("elicitation/create", params).await?;
        Ok(reply.ok().and_then(|r| {
            if r["action"] != "accept" {
                return None;
            }
            match &r["content"]["answer"] {
                Value::String(s) => Some(s.clone()),
                Value::Null => None,
                other => Some(other.to_string()),
            }
        }))
    }
}
