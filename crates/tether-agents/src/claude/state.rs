//! What the reader task knows about a Claude session and how it routes what claude prints:
//! the session-id check (strict: any message naming another session ends the turn before
//! anything of it is shown), partial `stream_event`s → deltas, `assistant` messages →
//! text (unless it was streamed already) and tool calls, `user` tool results → tool call
//! updates, `result` → the end of the turn. Control requests go to [`super::control`].

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot};

use super::map::{self, Partial};
use super::meter::Meter;
use super::wire::{Handler, Incoming, Link};
use crate::driver::AgentEvent;
use crate::jsonrpc::CloseInfo;

/// How a turn ended, as seen by the reader.
#[derive(Debug)]
pub(crate) enum TurnEnd {
    /// The `result` message.
    Result(Map<String, Value>),
    /// claude reported another session id.
    Mismatch(String),
    /// claude's output ended.
    Closed(CloseInfo),
}

#[derive(Debug)]
pub(crate) struct Turn {
    pub events: mpsc::UnboundedSender<AgentEvent>,
    /// The message text shown so far.
    pub text: String,
    /// tether asked claude to interrupt this turn.
    pub interrupted: bool,
    /// Ids of messages whose text arrived as partial deltas (not to be shown twice).
    streamed: HashSet<String>,
    /// The turn's usage, reported as it grows.
    meter: Meter,
    /// A `rate_limit_event` said the limit was hit, resetting then (Unix ms).
    limit_resets_at_ms: Option<i64>,
    done: Option<oneshot::Sender<TurnEnd>>,
}

impl Turn {
    pub fn new(events: mpsc::UnboundedSender<AgentEvent>, done: oneshot::Sender<TurnEnd>) -> Self {
        Turn {
            events,
            text: String::new(),
            interrupted: false,
            streamed: HashSet::new(),
            meter: Meter::default(),
            limit_resets_at_ms: None,
            done: Some(done),
        }
    }

    fn end(&mut self, end: TurnEnd) {
        if let Some(done) = self.done.take() {
            let _ = done.send(end);
        }
    }

    fn emit(&mut self, event: AgentEvent) {
        if let AgentEvent::MessageDelta(text) = &event {
            self.text.push_str(text);
        }
        let _ = self.events.send(event);
    }
}

#[derive(Debug)]
pub(crate) struct State {
    /// The session id asked for (`--session-id` or `--resume`).
    pub session_id: String,
    /// Another session id claude reported; the session is unusable from then on.
    pub mismatch: Option<String>,
    pub closed: Option<CloseInfo>,
    pub turn: Option<Turn>,
    /// Control requests waiting for a person, by request id: firing withdraws them.
    pub withdraw: HashMap<String, oneshot::Sender<()>>,
}

/// Shared between the session handle and the reader task's handler.
pub(crate) type Shared = crate::turn::Shared<State>;

impl Shared {
    pub fn new(session_id: String) -> Arc<Self> {
        Shared::with_state(State {
            session_id,
            mismatch: None,
            closed: None,
            turn: None,
            withdraw: HashMap::new(),
        })
    }

    /// The handler for [`Link::spawn`].
    pub fn handler(self: &Arc<Self>) -> Handler {
        let shared = Arc::clone(self);
        Box::new(move |link: &Link, incoming: Incoming| match incoming {
            Incoming::Message(message) => shared.on_message(link, message),
            Incoming::Closed(info) => {
                let mut state = shared.lock();
                state.closed = Some(info.clone());
                if let Some(turn) = state.turn.as_mut() {
                    turn.end(TurnEnd::Closed(info));
                }
            }
        })
    }

    /// The running turn's event sender, if any.
    pub fn turn_events(&self) -> Option<mpsc::UnboundedSender<AgentEvent>> {
        let state = self.lock();
        if state.mismatch.is_some() {
            return None;
        }
        state.turn.as_ref().map(|t| t.events.clone())
    }

    fn on_message(self: &Arc<Self>, link: &Link, message: Map<String, Value>) {
        let kind = message.get("type").and_then(Value::as_str).unwrap_or("");
        match kind {
            "control_request" => super::control::on_request(self, link, message),
            "control_cancel_request" => {
                let id = message.get("request_id").and_then(Value::as_str);
                if let Some(withdraw) = id.and_then(|id| self.lock().withdraw.remove(id)) {
                    let _ = withdraw.send(());
                }
            }
            _ => self.on_output(kind, &message),
        }
    }

    fn on_output(&self, kind: &str, message: &Map<String, Value>) {
        let mut state = self.lock();
        let sid = message.get("session_id").and_then(Value::as_str);
        if let Some(sid) = sid.filter(|sid| *sid != state.session_id) {
            if state.mismatch.is_none() {
                tracing::warn!(ours = %state.session_id, other = sid, "claude reports another session id");
                state.mismatch = Some(sid.to_owned());
            }
            if let Some(turn) = state.turn.as_mut() {
                turn.end(TurnEnd::Mismatch(sid.to_owned()));
            }
            return;
        }
        if state.mismatch.is_some() {
            return;
        }
        let Some(turn) = state.turn.as_mut() else {
            tracing::debug!(kind, "claude output outside a turn");
            return;
        };
        // Sub-agent messages: their tool calls are shown, their text is not ours.
        let main_thread = message.get("parent_tool_use_id").is_none_or(Value::is_null);
        let payload = message.get("message").unwrap_or(&Value::Null);
        match kind {
            "stream_event" if main_thread => {
                let event = message.get("event").unwrap_or(&Value::Null);
                if let Some(report) = turn.meter.partial(event) {
                    turn.emit(AgentEvent::Usage(report));
                }
                match map::partial(event) {
                    Partial::Start(id) => {
                        turn.streamed.insert(id);
                    }
                    Partial::Text(text) => turn.emit(AgentEvent::MessageDelta(text)),
                    Partial::Thinking(text) => turn.emit(AgentEvent::ThoughtDelta(text)),
                    Partial::Other => {}
                }
            }
            "assistant" => {
                let id = payload.get("id").and_then(Value::as_str).unwrap_or("");
                let streamed = turn.streamed.contains(id);
                if let Some(report) = turn.meter.assistant(payload) {
                    turn.emit(AgentEvent::Usage(report));
                }
                for block in blocks(payload) {
                    let text = |key: &str| {
                        block
                            .get(key)
                            .and_then(Value::as_str)
                            .filter(|t| !t.is_empty() && main_thread && !streamed)
                            .map(str::to_owned)
                    };
                    let event = match block.get("type").and_then(Value::as_str) {
                        Some("text") => text("text").map(AgentEvent::MessageDelta),
                        Some("thinking") => text("thinking").map(AgentEvent::ThoughtDelta),
                        Some("tool_use") => map::tool_call(block),
                        _ => None,
                    };
                    if let Some(event) = event {
                        turn.emit(event);
                    }
                }
            }
            "user" => {
                for block in blocks(payload) {
                    if block.get("type").and_then(Value::as_str) == Some("tool_result")
                        && let Some(event) = map::tool_result(block)
                    {
                        turn.emit(event);
                    }
                }
            }
            "rate_limit_event" => {
                if let Some(at) = map::limit_resets_at(message) {
                    turn.limit_resets_at_ms = Some(at);
                }
                if let Some(window) = crate::windows::claude(message) {
                    turn.emit(AgentEvent::Window(window));
                }
            }
            "result" => {
                if let Some(report) = turn.meter.result(message) {
                    turn.emit(AgentEvent::Usage(report));
                }
                let mut result = message.clone();
                if let Some(at) = turn.limit_resets_at_ms {
                    result.insert(map::LIMIT_RESETS_AT.to_owned(), at.into());
                }
                turn.end(TurnEnd::Result(result));
            }
            _ => {}
        }
    }
}

/// The content blocks of a message (a plain string content has none).
fn blocks(message: &Value) -> impl Iterator<Item = &Value> {
    message
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}
