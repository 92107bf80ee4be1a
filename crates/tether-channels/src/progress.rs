//! The throttled progress summary of running turns: deltas and tool calls mark a turn
//! changed; at most once per interval a changed turn yields a new text for its status
//! message. In memory only: after a restart the next change starts a fresh summary.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use tether_proto::{EventEnvelope, EventPayload};

#[derive(Debug)]
struct TurnProgress {
    chat_key: String,
    started_ms: i64,
    tool_calls: u32,
    last_tool: Option<String>,
    chars: usize,
    changed: bool,
    last_flush: Option<Instant>,
}

/// Running turns by turn id.
#[derive(Debug, Default)]
pub struct Progress {
    turns: HashMap<String, TurnProgress>,
    /// Turns that ended: late events never bring their summary back.
    finished: HashSet<String>,
}

/// A summary to write: `(chat key, turn id, text)`.
pub type Summary = (String, String, String);

impl Progress {
    /// Takes note of one event of the chat `chat_key`.
    pub fn observe(&mut self, chat_key: &str, ev: &EventEnvelope) {
        let Some(turn) = ev.turn_id.as_deref() else {
            return;
        };
        if ev.payload.is_turn_terminal() {
            self.turns.remove(turn);
            if self.finished.len() >= 10_000 {
                self.finished.clear();
            }
            self.finished.insert(turn.to_string());
            return;
        }
        if self.finished.contains(turn) {
            return;
        }
        let entry = || TurnProgress {
            chat_key: chat_key.to_string(),
            started_ms: ev.at_ms,
            tool_calls: 0,
            last_tool: None,
            chars: 0,
            changed: false,
            last_flush: None,
        };
        match &ev.payload {
            EventPayload::TurnStarted { .. } => {
                self.turns.entry(turn.to_string()).or_insert_with(entry);
            }
            EventPayload::MessageDelta { text } => {
                let t = self.turns.entry(turn.to_string()).or_insert_with(entry);
                t.chars += text.chars().count();
                t.changed = true;
            }
            EventPayload::ThoughtDelta { .. } => {
                let t = self.turns.entry(turn.to_string()).or_insert_with(entry);
                t.changed = true;
            }
            EventPayload::ToolCall { title, .. } => {
                let t = self.turns.entry(turn.to_string()).or_insert_with(entry);
                t.tool_calls += 1;
                t.last_tool = Some(title.clone());
                t.changed = true;
            }
            EventPayload::ToolCallUpdate { title, .. } => {
                let t = self.turns.entry(turn.to_string()).or_insert_with(entry);
                if let Some(title) = title {
                    t.last_tool = Some(title.clone());
                }
                t.changed = true;
            }
            _ => {}
        }
    }

    /// The summaries that are due: changed, and not flushed within `interval`.
    pub fn due(&mut self, now: Instant, now_ms: i64, interval: Duration) -> Vec<Summary> {
        let mut out = Vec::new();
        for (turn, t) in &mut self.turns {
            let quiet = t
                .last_flush
                .is_none_or(|at| now.saturating_duration_since(at) >= interval);
            if t.changed && quiet {
                t.changed = false;
                t.last_flush = Some(now);
                out.push((t.chat_key.clone(), turn.clone(), summary(t, now_ms)));
            }
        }
        out
    }
}

fn summary(t: &TurnProgress, now_ms: i64) -> String {
    let secs = (now_ms - t.started_ms).max(0) / 1000;
    let mut parts = vec![format!("⏳ Working… {secs}s")];
    match t.tool_calls {
        0 => {}
        1 => parts.push("1 tool call".to_string()),
        n => parts.push(format!("{n} tool calls")),
    }
    if let Some(tool) = &t.last_tool {
        let short: String = tool.chars().take(80).collect();
        parts.push(format!("last: {short}"));
    }
    if t.chars > 0 {
        parts.push(format!("{} characters written", t.chars));
    }
    parts.join(" · ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(turn: &str, at_ms: i64, payload: EventPayload) -> EventEnvelope {
        EventEnvelope {
            id: 1,
            session_id: "s".into(),
            conversation_id: "c".into(),
            seq: 1,
            turn_id: Some(turn.into()),
            at_ms,
            payload,
        }
    }

    #[test]
    fn changes_are_summarised_at_most_once_per_interval() {
        let mut p = Progress::default();
        let t0 = Instant::now();
        let second = Duration::from_secs(1);
        p.observe(
            "chat",
            &ev(
                "t",
                0,
                EventPayload::TurnStarted {
                    input: "x".into(),
                    traceparent: None,
                },
            ),
        );
        assert!(p.due(t0, 0, second).is_empty(), "nothing changed yet");
        p.observe(
            "chat",
            &ev(
                "t",
                1,
                EventPayload::MessageDelta {
                    text: "hello".into(),
                },
            ),
        );
        let tool = EventPayload::ToolCall {
            tool_call_id: "1".into(),
            title: "Read src/main.rs".into(),
            kind: None,
            status: None,
            detail: None,
        };
        p.observe("chat", &ev("t", 2, tool));
        let due = p.due(t0, 5_000, second);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].0, "chat");
        assert_eq!(
            due[0].2,
            "⏳ Working… 5s · 1 tool call · last: Read src/main.rs · 5 characters written"
        );
        p.observe(
            "chat",
            &ev("t", 3, EventPayload::MessageDelta { text: "!".into() }),
        );
        assert!(
            p.due(t0 + second / 2, 5_500, second).is_empty(),
            "throttled"
        );
        assert_eq!(p.due(t0 + second, 6_000, second).len(), 1);
        p.observe("chat", &ev("t", 4, EventPayload::TurnCancelled {}));
        p.observe(
            "chat",
            &ev(
                "t",
                5,
                EventPayload::MessageDelta {
                    text: "late".into(),
                },
            ),
        );
        assert!(
            p.turns.is_empty(),
            "a late delta does not revive an ended turn"
        );
        assert!(p.due(t0 + second * 9, 9_000, second).is_empty());
    }
}
