//! What the Codex reader task knows about a thread, and how it turns notifications into
//! [`AgentEvent`]s: `item/agentMessage/delta` → message deltas, reasoning deltas → thought
//! deltas, `item/started` / `item/completed` of tool items → tool calls,
//! `thread/tokenUsage/updated` → the turn's usage, `error` → the failure message, and
//! `turn/completed` → the end of the turn. Server→client requests are in [`super::requests`].

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use super::items::{self, str_field};
use crate::driver::{AgentEvent, UsageReport};
use crate::jsonrpc::{CloseInfo, Connection, Incoming};
use crate::usage;
use tether_core::usage::Tokens;

/// What the thread is doing: `Quiet` before the thread exists (notifications are dropped).
pub(crate) type Phase = crate::turn::Phase<Box<Turn>>;

/// How a turn ended: the `turn` object of `turn/completed`, or the closed connection.
pub(crate) type TurnEnd = Result<Value, CloseInfo>;

#[derive(Debug)]
pub(crate) struct Turn {
    pub events: mpsc::UnboundedSender<AgentEvent>,
    /// The agent's message text so far.
    pub text: String,
    /// Known from the `turn/start` response or the `turn/started` notification.
    pub turn_id: Option<String>,
    /// `cancel` was called before the turn id was known: interrupt as soon as it is.
    pub cancel_requested: bool,
    /// The agentMessage item that streamed last, and every one that streamed deltas.
    pub message_item: Option<String>,
    pub streamed: HashSet<String>,
    /// Tool items seen in this turn (by item id), to describe approval requests.
    pub items: HashMap<String, Value>,
    pub usage: Option<Value>,
    /// The last `error` notification's message.
    pub error: Option<String>,
    /// The reset (Unix ms) of a window a rate-limit snapshot reported full.
    pub full_until: Option<i64>,
    pub end: Option<oneshot::Sender<TurnEnd>>,
}

impl Turn {
    pub fn new(events: mpsc::UnboundedSender<AgentEvent>, end: oneshot::Sender<TurnEnd>) -> Self {
        Turn {
            events,
            text: String::new(),
            turn_id: None,
            cancel_requested: false,
            message_item: None,
            streamed: HashSet::new(),
            items: HashMap::new(),
            usage: None,
            error: None,
            full_until: None,
            end: Some(end),
        }
    }

    /// Appends message text of `item_id`, separating distinct messages by a blank line.
    fn message(&mut self, item_id: Option<String>, delta: &str) {
        if delta.is_empty() {
            return;
        }
        if item_id != self.message_item {
            if !self.text.is_empty() && !self.text.ends_with("\n\n") {
                let sep = if self.text.ends_with('\n') {
                    "\n"
                } else {
                    "\n\n"
                };
                self.text.push_str(sep);
                let _ = self.events.send(AgentEvent::MessageDelta(sep.to_owned()));
            }
            self.message_item.clone_from(&item_id);
        }
        if let Some(id) = item_id {
            self.streamed.insert(id);
        }
        self.text.push_str(delta);
        let _ = self.events.send(AgentEvent::MessageDelta(delta.to_owned()));
    }
}

#[derive(Debug)]
pub(crate) struct State {
    pub thread_id: Option<String>,
    pub phase: Phase,
    pub meter: Meter,
}

/// The thread's usage as reports of new tokens (issue 29): `thread/tokenUsage/updated`
/// carries the latest step (`last`) and the thread's running sum (`total`). Codex sends
/// it again unchanged (on a rate-limit update, say), so a step is reported only when the
/// running sum moved.
#[derive(Debug, Default)]
pub(crate) struct Meter {
    pub model: Option<String>,
    last_total: Option<Tokens>,
}

impl Meter {
    pub fn update(&mut self, token_usage: &Value) -> Option<UsageReport> {
        let total = usage::codex_total(token_usage);
        let total = total?;
        if Some(total) == self.last_total {
            return None;
        }
        self.last_total = Some(total);
        let step = usage::codex_step(token_usage).filter(|t| !t.is_zero())?;
        // The running total names the step: Codex replays the thread's last update on a
        // resumed thread (after a restart this meter starts empty), and the ledger keeps
        // one report per key.
        let key = format!(
            "codex-total:{}/{}/{}/{}/{}",
            total.input, total.cached_input, total.cache_write, total.output, total.reasoning
        );
        Some(UsageReport {
            tokens: step,
            model: self.model.clone(),
            key: Some(key),
        })
    }
}

/// Shared between the session handle and the reader task's handler.
pub(crate) type Shared = crate::turn::Shared<State>;

impl Shared {
    pub fn new() -> Arc<Self> {
        Shared::with_state(State {
            thread_id: None,
            phase: Phase::Quiet,
            meter: Meter::default(),
        })
    }

    /// The handler for [`Connection::spawn`].
    pub fn handler(self: &Arc<Self>) -> crate::jsonrpc::Handler {
        let shared = Arc::clone(self);
        Box::new(
            move |conn: &Connection, incoming: Incoming| match incoming {
                Incoming::Notification { method, params } => {
                    shared.on_notification(conn, &method, &params)
                }
                Incoming::Request { id, method, params } => {
                    shared.on_request(conn, id, &method, params)
                }
            },
        )
    }

    /// The connection ended: a running turn ends with the crash report.
    pub fn on_closed(&self, info: &CloseInfo) {
        let mut state = self.lock();
        if let Phase::Turn(turn) = &mut state.phase
            && let Some(end) = turn.end.take()
        {
            let _ = end.send(Err(info.clone()));
        }
    }

    /// The running turn of our thread, if `params` belong to it.
    pub(crate) fn turn_of<'a>(state: &'a mut State, params: &Value) -> Option<&'a mut Turn> {
        let ours = state.thread_id.as_deref()?;
        if let Some(tid) = params.get("threadId").and_then(Value::as_str)
            && tid != ours
        {
            tracing::debug!(
                ours,
                other = tid,
                "ignoring Codex message for another thread"
            );
            return None;
        }
        let Phase::Turn(turn) = &mut state.phase else {
            return None;
        };
        let reported = params.get("turnId").and_then(Value::as_str).or_else(|| {
            params
                .get("turn")
                .and_then(|t| t.get("id"))
                .and_then(Value::as_str)
        });
        match (&turn.turn_id, reported) {
            (Some(ours), Some(other)) if ours != other => None,
            _ => Some(turn),
        }
    }

    fn on_notification(&self, conn: &Connection, method: &str, params: &Value) {
        let mut state = self.lock();
        let thread_id = state.thread_id.clone().unwrap_or_default();
        if Self::turn_of(&mut state, params).is_none() {
            return;
        }
        let report = match params.get("tokenUsage") {
            Some(u) if method == "thread/tokenUsage/updated" => state.meter.update(u),
            _ => None,
        };
        let Some(turn) = Self::turn_of(&mut state, params) else {
            return;
        };
        if let Some(report) = report {
            let _ = turn.events.send(AgentEvent::Usage(report));
        }
        match method {
            "item/agentMessage/delta" => {
                let delta = params.get("delta").and_then(Value::as_str).unwrap_or("");
                turn.message(str_field(params, "itemId"), delta);
            }
            "item/reasoning/summaryTextDelta" | "item/reasoning/textDelta" => {
                if let Some(delta) = params.get("delta").and_then(Value::as_str) {
                    let _ = turn.events.send(AgentEvent::ThoughtDelta(delta.to_owned()));
                }
            }
            "item/started" | "item/completed" => {
                let item = params.get("item").unwrap_or(&Value::Null);
                on_item(turn, method == "item/started", item);
            }
            "thread/tokenUsage/updated" => {
                turn.usage = params.get("tokenUsage").filter(|u| !u.is_null()).cloned();
            }
            "account/rateLimits/updated" => {
                let limits = params.get("rateLimits").unwrap_or(params);
                for window in crate::windows::codex(limits) {
                    if window.used_percent >= 100 {
                        turn.full_until = window.resets_at_ms.max(turn.full_until);
                    }
                    let _ = turn.events.send(AgentEvent::Window(window));
                }
            }
            "error" => {
                let will_retry = params.get("willRetry").and_then(Value::as_bool);
                if will_retry != Some(true) {
                    turn.error = params
                        .get("error")
                        .and_then(|e| str_field(e, "message"))
                        .or(turn.error.take());
                }
            }
            "turn/started" => {
                let id = params.get("turn").and_then(|t| str_field(t, "id"));
                if turn.turn_id.is_none()
                    && let Some(id) = id
                {
                    turn.turn_id = Some(id.clone());
                    if turn.cancel_requested {
                        spawn_interrupt(conn, thread_id, id);
                    }
                }
            }
            "turn/completed" => {
                let done = params.get("turn").cloned().unwrap_or(Value::Null);
                if let Some(end) = turn.end.take() {
                    let _ = end.send(Ok(done));
                }
            }
            _ => tracing::trace!(%method, "ignoring Codex notification"),
        }
    }
}

fn on_item(turn: &mut Turn, started: bool, item: &Value) {
    let id = str_field(item, "id");
    match item.get("type").and_then(Value::as_str) {
        // Deltas normally carry the text; show a message that was never streamed whole.
        Some("agentMessage") if !started => {
            let text = item.get("text").and_then(Value::as_str).unwrap_or("");
            if id.as_ref().is_none_or(|id| !turn.streamed.contains(id)) {
                turn.message(id, text);
            }
        }
        _ if items::is_tool(item) => {
            if let Some(id) = id {
                turn.items.insert(id, item.clone());
            }
            let event = if started {
                items::tool_call(item)
            } else {
                items::tool_update(item)
            };
            if let Some(event) = event {
                let _ = turn.events.send(event);
            }
        }
        _ => {}
    }
}

/// Sends `turn/interrupt` without waiting for its answer.
pub(crate) fn spawn_interrupt(conn: &Connection, thread_id: String, turn_id: String) {
    let conn = conn.clone();
    tokio::spawn(async move {
        let params = json!({"threadId": thread_id, "turnId": turn_id});
        if let Err(e) = conn.request("turn/interrupt", params).await {
            tracing::debug!("turn/interrupt: {}", e.into_agent_error());
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separate_messages_are_joined_by_a_blank_line() {
        let (events, mut rx) = mpsc::unbounded_channel();
        let mut turn = Turn::new(events, oneshot::channel().0);
        turn.message(Some("m1".into()), "first");
        turn.message(Some("m1".into()), " part");
        on_item(
            &mut turn,
            false,
            &json!({"type": "agentMessage", "id": "m1", "text": "first part"}),
        );
        // A message that only arrives whole, with item/completed.
        on_item(
            &mut turn,
            false,
            &json!({"type": "agentMessage", "id": "m2", "text": "second"}),
        );
        assert_eq!(turn.text, "first part\n\nsecond");
        let mut streamed = String::new();
        while let Ok(AgentEvent::MessageDelta(d)) = rx.try_recv() {
            streamed.push_str(&d);
        }
        assert_eq!(streamed, turn.text);
    }
}
