//! Claude's usage as reports of new tokens (issue 29). Claude Code prints a message's
//! usage more than once: in the partial `message_start` (input counted, output 1), in
//! `message_delta` (output so far), and in every `assistant` line of the message (one per
//! content block, each with the usage of `message_start`). The meter keeps, per message
//! id, the largest count seen of each kind and reports only what grew; at `result` it
//! reports what `result.usage` (the turn's sum over its API calls) counts beyond the
//! messages seen, so a turn's reports add up to Claude's own figure and no token is
//! counted twice.

use std::collections::HashMap;

use serde_json::Value;
use tether_core::usage::Tokens;

use crate::driver::UsageReport;
use crate::usage;

#[derive(Debug, Default)]
pub(crate) struct Meter {
    /// Per message id: the largest counts seen, and what was reported of them.
    messages: HashMap<String, (Tokens, Tokens)>,
    /// The message being streamed (its `message_delta` carries no id).
    streaming: Option<String>,
    /// The model of the latest main-thread message.
    model: Option<String>,
}

impl Meter {
    /// A sighting of message `id`'s `usage`; the report of what it adds, if anything.
    fn sighting(&mut self, id: &str, tokens: Tokens) -> Option<UsageReport> {
        let (seen, reported) = self.messages.entry(id.to_owned()).or_default();
        *seen = seen.max(tokens);
        let new = seen.saturating_sub(*reported);
        *reported = *seen;
        (!new.is_zero()).then(|| UsageReport {
            key: None,
            tokens: new,
            model: self.model.clone(),
        })
    }

    /// A partial `stream_event.event` of the main thread.
    pub fn partial(&mut self, event: &Value) -> Option<UsageReport> {
        match event.get("type").and_then(Value::as_str) {
            Some("message_start") => {
                let message = event.get("message")?;
                let id = message.get("id").and_then(Value::as_str)?.to_owned();
                if let Some(model) = message.get("model").and_then(Value::as_str) {
                    self.model = Some(model.to_owned());
                }
                self.streaming = Some(id.clone());
                let tokens = usage::claude(message.get("usage")?)?;
                self.sighting(&id, tokens)
            }
            Some("message_delta") => {
                let id = self.streaming.clone()?;
                let u = event.get("usage")?;
                // A delta may carry only the output count.
                let tokens = usage::claude(u).unwrap_or(Tokens {
                    output: u.get("output_tokens").and_then(Value::as_u64)?,
                    ..Tokens::default()
                });
                self.sighting(&id, tokens)
            }
            _ => None,
        }
    }

    /// An `assistant` line's `message` (of the main thread or a sub-agent).
    pub fn assistant(&mut self, message: &Value) -> Option<UsageReport> {
        let id = message.get("id").and_then(Value::as_str)?.to_owned();
        let tokens = usage::claude(message.get("usage")?)?;
        let mut report = self.sighting(&id, tokens)?;
        if let Some(model) = message.get("model").and_then(Value::as_str) {
            report.model = Some(model.to_owned());
        }
        Some(report)
    }

    /// The `result` line: what its `usage` counts beyond the messages seen.
    pub fn result(&mut self, result: &serde_json::Map<String, Value>) -> Option<UsageReport> {
        let total = usage::claude(result.get("usage")?)?;
        let seen = self
            .messages
            .values()
            .fold(Tokens::default(), |sum, (seen, _)| sum + *seen);
        let rest = total.saturating_sub(seen);
        (!rest.is_zero()).then(|| UsageReport {
            key: None,
            tokens: rest,
            model: self.model.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn u(input: u64, output: u64) -> Value {
        json!({"input_tokens": input, "output_tokens": output,
               "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0})
    }

    #[test]
    fn each_message_is_counted_once_however_often_claude_prints_it() {
        let mut m = Meter::default();
        let start = json!({"type": "message_start",
                           "message": {"id": "m1", "model": "claude-x", "usage": u(100, 1)}});
        let first = m.partial(&start).unwrap();
        assert_eq!((first.tokens.input, first.tokens.output), (100, 1));
        assert_eq!(first.model.as_deref(), Some("claude-x"));
        // Two content blocks: two assistant lines with message_start's usage.
        let line = json!({"id": "m1", "model": "claude-x", "usage": u(100, 1)});
        assert_eq!(m.assistant(&line), None);
        assert_eq!(m.assistant(&line), None);
        let delta = json!({"type": "message_delta", "usage": {"output_tokens": 8}});
        assert_eq!(m.partial(&delta).unwrap().tokens.output, 7);
        // A second API call of the turn.
        let line2 = json!({"id": "m2", "model": "claude-x", "usage": u(120, 5)});
        assert_eq!(m.assistant(&line2).unwrap().tokens.total(), 125);
        // result.usage sums both calls: nothing more.
        let result = json!({"usage": u(220, 13)});
        assert_eq!(m.result(result.as_object().unwrap()), None);
    }

    #[test]
    fn what_only_the_result_counts_is_reported_at_the_end() {
        let mut m = Meter::default();
        let line = json!({"id": "m1", "usage": u(100, 1)});
        m.assistant(&line).unwrap();
        // Without partial messages the final output count comes only with the result.
        let result = json!({"usage": u(100, 9)});
        let rest = m.result(result.as_object().unwrap()).unwrap();
        assert_eq!((rest.tokens.input, rest.tokens.output), (0, 8));
    }
}
