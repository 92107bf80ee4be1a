//! What the ACP reader task knows about a session, and how it turns incoming messages into
//! [`AgentEvent`]s: `session/update` → deltas and tool calls, `session/request_permission`
//! → [`PermissionRequest`], `elicitation/create` → [`QuestionRequest`]; everything else
//! the agent asks for (fs, terminal, unknown) is refused with "method not found".
//! Updates and permission requests are read as the schema's types ([`super::wire`]); an
//! update the schema cannot read (a kind it does not know) is not shown, but still counts
//! for the session-id checks. Elicitation stays JSON: tether reads only the first field
//! name of its requested schema.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tether_proto::Decision;
use tokio::sync::{mpsc, oneshot};

use super::wire::{
    self, ContentBlock, PermissionOption, PermissionOptionKind, RequestPermissionRequest,
    SessionNotification, SessionUpdate,
};
use crate::driver::{AgentEvent, PermissionReply, PermissionRequest, QuestionRequest};
use crate::jsonrpc::{Connection, INVALID_PARAMS, Incoming};

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
        let notification = wire::read::<SessionNotification>("session/update", params);
        let mut state = self.lock();
        let sid = match &notification {
            Ok(n) => Some(&*n.session_id.0),
            Err(_) => params.get("sessionId").and_then(Value::as_str),
        };
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
        let notification = match notification {
            Ok(n) => n,
            Err(e) => {
                tracing::debug!("not shown: {e}");
                return;
            }
        };
        let raw = params.get("update").unwrap_or(&Value::Null);
        let Some(event) = map_update(notification.update, raw) else {
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

    /// The turn's event sender, if a turn of session `sid` (ours, when `None`) is running.
    fn turn_events(&self, sid: Option<&str>) -> Option<mpsc::UnboundedSender<AgentEvent>> {
        let mut state = self.lock();
        if !Self::is_ours(&mut state, sid) {
            return None;
        }
        match &state.phase {
            Phase::Turn(turn) => Some(turn.events.clone()),
            _ => None,
        }
    }

    fn on_permission(&self, conn: Connection, id: Value, params: Value) {
        let request = match wire::read::<RequestPermissionRequest>("permission request", &params) {
            Ok(request) => request,
            Err(e) => {
                tracing::warn!("refusing an ACP permission request: {e}");
                tokio::spawn(async move {
                    let _ = conn.respond(id, Err((INVALID_PARAMS, e))).await;
                });
                return;
            }
        };
        let options = PermissionOptions::from_acp(&request.options);
        let (tx, rx) = oneshot::channel();
        if let Some(events) = self.turn_events(Some(&request.session_id.0)) {
            // The detail is the tool call as the agent sent it, unknown fields included.
            let tool = params.get("toolCall").cloned().unwrap_or(Value::Null);
            let fields = request.tool_call.fields;
            let _ = events.send(AgentEvent::Permission(PermissionRequest {
                title: fields.title.unwrap_or_else(|| "permission".to_owned()),
                kind: fields.kind.as_ref().and_then(wire::spelling),
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
            let Ok(result) = wire::permission_reply(options.option_id(reply)) else {
                return;
            };
            let _ = conn.respond(id, Ok(result)).await;
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
            self.turn_events(params.get("sessionId").and_then(Value::as_str))
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
fn text_of(content: ContentBlock) -> Option<String> {
    match content {
        ContentBlock::Text(text) => Some(text.text),
        _ => None,
    }
}

/// Everything of a tool call update, as the agent sent it (unknown fields included),
/// except the fields mapped separately.
fn tool_detail(update: &Value) -> Option<Value> {
    let mut detail = update.as_object()?.clone();
    for key in ["sessionUpdate", "toolCallId", "title", "kind", "status"] {
        detail.remove(key);
    }
    (!detail.is_empty()).then_some(Value::Object(detail))
}

/// Maps one `session/update` payload (`raw`: the same as sent); `None` for kinds tether
/// does not show.
pub(crate) fn map_update(update: SessionUpdate, raw: &Value) -> Option<AgentEvent> {
    match update {
        SessionUpdate::AgentMessageChunk(chunk) => {
            text_of(chunk.content).map(AgentEvent::MessageDelta)
        }
        SessionUpdate::AgentThoughtChunk(chunk) => {
            text_of(chunk.content).map(AgentEvent::ThoughtDelta)
        }
        SessionUpdate::ToolCall(call) => Some(AgentEvent::ToolCall {
            id: call.tool_call_id.0.to_string(),
            title: call.title,
            kind: wire::spelling(&call.kind),
            status: wire::spelling(&call.status),
            detail: tool_detail(raw),
        }),
        SessionUpdate::ToolCallUpdate(update) => Some(AgentEvent::ToolCallUpdate {
            id: update.tool_call_id.0.to_string(),
            title: update.fields.title,
            status: update.fields.status.as_ref().and_then(wire::spelling),
            detail: tool_detail(raw),
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
    pub fn from_acp(options: &[PermissionOption]) -> Self {
        let mut out = PermissionOptions::default();
        let mut reject_always = None;
        for option in options {
            let slot = match option.kind {
                PermissionOptionKind::AllowOnce => &mut out.allow,
                PermissionOptionKind::AllowAlways => &mut out.allow_always,
                PermissionOptionKind::RejectOnce => &mut out.deny,
                PermissionOptionKind::RejectAlways => &mut reject_always,
                // The schema's enum is non-exhaustive: a kind added later is not offered.
                _ => continue,
            };
            slot.get_or_insert_with(|| option.option_id.0.to_string());
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
