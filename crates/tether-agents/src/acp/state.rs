//! What the ACP reader task knows about a session, and how it turns incoming messages into
//! [`AgentEvent`]s: `session/update` → deltas and tool calls, `session/request_permission`
//! → [`PermissionRequest`], `elicitation/create` → [`QuestionRequest`]; everything else
//! the agent asks for (fs, terminal, unknown) is refused with "method not found".

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tether_proto::Decision;
use tokio::sync::{mpsc, oneshot};

use crate::driver::{AgentEvent, PermissionReply, PermissionRequest, QuestionRequest};
use crate::jsonrpc::{Connection, Incoming};

/// What the session is doing: `Quiet` before a session exists, or while `session/load`
/// replays history (updates are dropped).
pub(crate) type Phase = crate::turn::Phase<Turn>;

#[derive(Debug)]
pub(crate) struct Turn {
    pub events: mpsc::UnboundedSender<AgentEvent>,
    pub text: String,
    /// Fired when the turn must end early (the agent reported another session id).
    pub abort: Option<oneshot::Sender<String>>,
}

#[derive(Debug)]
pub(crate) struct State {
    pub session_id: Option<String>,
    /// Resumed sessions: an update for any other session id means the resume was not real.
    pub strict: bool,
    /// The other session id seen on a strict session.
    pub mismatch: Option<String>,
    pub phase: Phase,
    /// When the last update of our session was dropped as replay (phase `Quiet`).
    pub last_replayed: Option<Instant>,
}

/// Shared between the session handle and the reader task's handler.
pub(crate) type Shared = crate::turn::Shared<State>;

impl Shared {
    pub fn new() -> Arc<Self> {
        Shared::with_state(State {
            session_id: None,
            strict: false,
            mismatch: None,
            phase: Phase::Quiet,
            last_replayed: None,
        })
    }

    /// After `session/load` answered: if the agent replayed history, waits until it has
    /// sent nothing for `silence` (at most `max`), so a replay still trickling in after the
    /// answer (gemini 0.61 streams it without awaiting) is dropped instead of showing up
    /// in the next turn. Returns at once when nothing was replayed.
    pub async fn settle_replay(&self, silence: Duration, max: Duration) {
        let answered = Instant::now();
        if self.lock().last_replayed.is_none() {
            return;
        }
        let deadline = answered + max;
        loop {
            let last = self.lock().last_replayed.unwrap_or(answered).max(answered);
            let quiet_at = (last + silence).min(deadline);
            if Instant::now() >= quiet_at {
                return;
            }
            tokio::time::sleep_until(quiet_at.into()).await;
        }
    }

    /// The handler for [`Connection::spawn`].
    pub fn handler(self: &Arc<Self>) -> crate::jsonrpc::Handler {
        let shared = Arc::clone(self);
        Box::new(
            move |conn: &Connection, incoming: Incoming| match incoming {
                Incoming::Notification { method, params } => {
                    if method == "session/update" {
                        shared.on_update(&params);
                    } else {
                        tracing::debug!(%method, "ignoring ACP notification");
                    }
                }
                Incoming::Request { id, method, params } => {
                    shared.on_request(conn, id, &method, params);
                }
            },
        )
    }

    /// Checks the session id of an incoming message. `false`: not ours, drop it.
    fn is_ours(state: &mut State, sid: Option<&str>) -> bool {
        let Some(ours) = state.session_id.as_deref() else {
            return false;
        };
        match sid {
            Some(sid) if sid != ours => {
                if state.strict {
                    tracing::warn!(ours, other = sid, "resumed ACP session reports another id");
                    state.mismatch.get_or_insert_with(|| sid.to_owned());
                    if let Phase::Turn(turn) = &mut state.phase
                        && let Some(abort) = turn.abort.take()
                    {
                        let _ = abort.send(sid.to_owned());
                    }
                }
                false
            }
            _ => state.mismatch.is_none(),
        }
    }

    fn on_update(&self, params: &Value) {
        let mut state = self.lock();
        let sid = params.get("sessionId").and_then(Value::as_str);
        if !Self::is_ours(&mut state, sid) {
            return;
        }
        if matches!(state.phase, Phase::Quiet) {
            state.last_replayed = Some(Instant::now());
            return;
        }
        let Phase::Turn(turn) = &mut state.phase else {
            return;
        };
        let Some(event) = map_update(params.get("update").unwrap_or(&Value::Null)) else {
            return;
        };
        if let AgentEvent::MessageDelta(text) = &event {
            turn.text.push_str(text);
        }
        let _ = turn.events.send(event);
    }

    fn on_request(&self, conn: &Connection, id: Value, method: &str, params: Value) {
        let conn = conn.clone();
        match method {
            "session/request_permission" => self.on_permission(conn, id, params),
            "elicitation/create" => self.on_elicitation(conn, id, params),
            _ => {
                tracing::debug!(%method, "refusing ACP request");
                conn.refuse(id, format!("method not supported by tether: {method}"));
            }
        }
    }

    /// The turn's event sender, if a turn of our session is running.
    fn turn_events(&self, params: &Value) -> Option<mpsc::UnboundedSender<AgentEvent>> {
        let mut state = self.lock();
        let sid = params.get("sessionId").and_then(Value::as_str);
        if !Self::is_ours(&mut state, sid) {
            return None;
        }
        match &state.phase {
            Phase::Turn(turn) => Some(turn.events.clone()),
            _ => None,
        }
    }

    fn on_permission(&self, conn: Connection, id: Value, params: Value) {
        let options = PermissionOptions::from_acp(params.get("options"));
        let (tx, rx) = oneshot::channel();
        if let Some(events) = self.turn_events(&params) {
            let tool = params.get("toolCall").cloned().unwrap_or(Value::Null);
            let _ = events.send(AgentEvent::Permission(PermissionRequest {
                title: str_field(&tool, "title").unwrap_or_else(|| "permission".to_owned()),
                kind: str_field(&tool, "kind"),
                detail: Some(tool),
                options: options.decisions(),
                reply: tx,
            }));
        }
        let mut cancelled = self.cancels.watch();
        tokio::spawn(async move {
            let reply = cancelled
                .answer(rx)
                .await
                .unwrap_or(PermissionReply::Cancelled);
            let outcome = match options.option_id(reply) {
                Some(option_id) => json!({"outcome": "selected", "optionId": option_id}),
                None => json!({"outcome": "cancelled"}),
            };
            let _ = conn.respond(id, Ok(json!({ "outcome": outcome }))).await;
        });
    }

    fn on_elicitation(&self, conn: Connection, id: Value, params: Value) {
        let form = params.get("mode").and_then(Value::as_str).unwrap_or("form") == "form";
        let field = params
            .get("requestedSchema")
            .and_then(|s| s.get("properties"))
            .and_then(Value::as_object)
            .and_then(|p| p.keys().next().cloned());
        let (tx, rx) = oneshot::channel();
        let events = if form {
            self.turn_events(&params)
        } else {
            None
        };
        if let Some(events) = events {
            let prompt = str_field(&params, "message").unwrap_or_default();
            let _ = events.send(AgentEvent::Question(QuestionRequest { prompt, reply: tx }));
        }
        let mut cancelled = self.cancels.watch();
        tokio::spawn(async move {
            let answer = cancelled.answer(rx).await.flatten();
            let result = match (answer, field, form) {
                (Some(answer), Some(field), _) => {
                    json!({"action": "accept", "content": { field: answer }})
                }
                (_, _, false) => json!({"action": "decline"}),
                _ => json!({"action": "cancel"}),
            };
            let _ = conn.respond(id, Ok(result)).await;
        });
    }
}

fn str_field(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// The text of a content block, if it is text.
fn text_of(content: Option<&Value>) -> Option<String> {
    let content = content?;
    (content.get("type").and_then(Value::as_str) == Some("text"))
        .then(|| str_field(content, "text"))
        .flatten()
}

/// Everything of a tool call update except the fields mapped separately.
fn tool_detail(update: &Value) -> Option<Value> {
    let mut detail = update.as_object()?.clone();
    for key in ["sessionUpdate", "toolCallId", "title", "kind", "status"] {
        detail.remove(key);
    }
    (!detail.is_empty()).then_some(Value::Object(detail))
}

/// Maps one `session/update` payload; `None` for kinds tether does not show.
pub(crate) fn map_update(update: &Value) -> Option<AgentEvent> {
    let kind = update.get("sessionUpdate").and_then(Value::as_str)?;
    match kind {
        "agent_message_chunk" => text_of(update.get("content")).map(AgentEvent::MessageDelta),
        "agent_thought_chunk" => text_of(update.get("content")).map(AgentEvent::ThoughtDelta),
        "tool_call" => Some(AgentEvent::ToolCall {
            id: str_field(update, "toolCallId").unwrap_or_default(),
            title: str_field(update, "title").unwrap_or_default(),
            kind: str_field(update, "kind"),
            status: str_field(update, "status"),
            detail: tool_detail(update),
        }),
        "tool_call_update" => Some(AgentEvent::ToolCallUpdate {
            id: str_field(update, "toolCallId").unwrap_or_default(),
            title: str_field(update, "title"),
            status: str_field(update, "status"),
            detail: tool_detail(update),
        }),
        _ => None,
    }
}

/// The ACP permission options, by the decision they stand for.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct PermissionOptions {
    allow: Option<String>,
    allow_always: Option<String>,
    deny: Option<String>,
}

impl PermissionOptions {
    pub fn from_acp(options: Option<&Value>) -> Self {
        let mut out = PermissionOptions::default();
        let mut reject_always = None;
        for option in options.and_then(Value::as_array).into_iter().flatten() {
            let (Some(id), Some(kind)) = (str_field(option, "optionId"), str_field(option, "kind"))
            else {
                continue;
            };
            let slot = match kind.as_str() {
                "allow_once" => &mut out.allow,
                "allow_always" => &mut out.allow_always,
                "reject_once" => &mut out.deny,
                "reject_always" => &mut reject_always,
                _ => continue,
            };
            slot.get_or_insert(id);
        }
        // A one-off rejection is preferred over a permanent one.
        out.deny = out.deny.or(reject_always);
        out
    }

    pub fn decisions(&self) -> Vec<Decision> {
        [
            (Decision::Allow, &self.allow),
            (Decision::AllowAlways, &self.allow_always),
            (Decision::Deny, &self.deny),
        ]
        .into_iter()
        .filter_map(|(d, id)| id.as_ref().map(|_| d))
        .collect()
    }

    /// The optionId to select; `None` = answer "cancelled".
    pub fn option_id(&self, reply: PermissionReply) -> Option<&str> {
        match reply {
            PermissionReply::Decision(Decision::Allow) => self.allow.as_deref(),
            PermissionReply::Decision(Decision::AllowAlways) => {
                self.allow_always.as_deref().or(self.allow.as_deref())
            }
            PermissionReply::Decision(Decision::Deny) => self.deny.as_deref(),
            PermissionReply::Cancelled => None,
        }
    }
}
