//! Pure translations of Claude Code's stream-json messages: tool titles and kinds,
//! `tool_use` blocks → [`AgentEvent::ToolCall`], `tool_result` blocks →
//! [`AgentEvent::ToolCallUpdate`], partial-message stream events → deltas, and the final
//! `result` → [`TurnOutcome`] or [`AgentError`]. No I/O, no state.

use serde_json::{Map, Value, json};

use crate::driver::{AgentError, AgentEvent, StopReason, TurnOutcome};

fn str_at<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// `mcp__server__tool` → `(server, tool)`.
fn mcp_parts(name: &str) -> Option<(&str, &str)> {
    name.strip_prefix("mcp__")?.split_once("__")
}

/// What a person should read for a tool use: `Bash: <command>`, `Write: <path>`,
/// `MCP server: tool`, ...
pub(crate) fn tool_title(name: &str, input: &Value) -> String {
    if let Some((server, tool)) = mcp_parts(name) {
        return format!("MCP {server}: {tool}");
    }
    let key = match name {
        "Bash" => "command",
        "Write" | "Edit" | "MultiEdit" | "Read" => "file_path",
        "NotebookEdit" => "notebook_path",
        "Glob" | "Grep" => "pattern",
        "WebFetch" => "url",
        "WebSearch" => "query",
        "Task" | "Agent" => "description",
        _ => return name.to_owned(),
    };
    match str_at(input, key) {
        Some(arg) if !arg.trim().is_empty() => format!("{name}: {arg}"),
        _ => name.to_owned(),
    }
}

/// The ACP-style kind of a tool (`execute`, `edit`, `read`, `search`, `fetch`, `other`).
pub(crate) fn tool_kind(name: &str) -> &'static str {
    match name {
        "Bash" | "BashOutput" | "KillShell" => "execute",
        "Write" | "Edit" | "MultiEdit" | "NotebookEdit" => "edit",
        "Read" => "read",
        "Glob" | "Grep" => "search",
        "WebFetch" | "WebSearch" => "fetch",
        _ => "other",
    }
}

/// An `assistant` content block of type `tool_use` → a tool call event.
pub(crate) fn tool_call(block: &Value) -> Option<AgentEvent> {
    let name = str_at(block, "name")?;
    let input = block.get("input").cloned().unwrap_or(Value::Null);
    let mut detail = json!({"tool": name, "input": input});
    if let Some((server, tool)) = mcp_parts(name) {
        detail["mcp_server"] = json!(server);
        detail["mcp_tool"] = json!(tool);
    }
    Some(AgentEvent::ToolCall {
        id: str_at(block, "id").unwrap_or_default().to_owned(),
        title: tool_title(name, &input),
        kind: Some(tool_kind(name).to_owned()),
        status: Some("pending".to_owned()),
        detail: Some(detail),
    })
}

/// The text of a tool result's `content` (a string or a list of blocks).
pub(crate) fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| match b {
                Value::String(s) => Some(s.as_str()),
                _ => str_at(b, "text"),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// A `user` content block of type `tool_result` → a tool call update.
pub(crate) fn tool_result(block: &Value) -> Option<AgentEvent> {
    let id = str_at(block, "tool_use_id")?;
    let is_error = block
        .get("is_error")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let output = content_text(block.get("content").unwrap_or(&Value::Null));
    Some(AgentEvent::ToolCallUpdate {
        id: id.to_owned(),
        title: None,
        status: Some(if is_error { "failed" } else { "completed" }.to_owned()),
        detail: Some(json!({"output": output, "is_error": is_error})),
    })
}

/// One piece of a partial message (`stream_event.event`).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Partial {
    /// `message_start`: the id of the message being streamed.
    Start(String),
    Text(String),
    Thinking(String),
    Other,
}

pub(crate) fn partial(event: &Value) -> Partial {
    match str_at(event, "type") {
        Some("message_start") => Partial::Start(
            event
                .pointer("/message/id")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        ),
        Some("content_block_delta") => {
            let delta = event.get("delta").unwrap_or(&Value::Null);
            match (
                str_at(delta, "type"),
                str_at(delta, "text"),
                str_at(delta, "thinking"),
            ) {
                (Some("text_delta"), Some(t), _) => Partial::Text(t.to_owned()),
                (Some("thinking_delta"), _, Some(t)) => Partial::Thinking(t.to_owned()),
                _ => Partial::Other,
            }
        }
        _ => Partial::Other,
    }
}

/// The Anthropic `stop_reason` of a successful turn.
fn stop_reason(reason: &str) -> StopReason {
    match reason {
        "end_turn" | "stop_sequence" => StopReason::EndTurn,
        "max_tokens" => StopReason::MaxTokens,
        "refusal" => StopReason::Refusal,
        other => StopReason::Other(other.to_owned()),
    }
}

/// The key under which the reader adds a `rate_limit_event`'s reset time (ms) to the
/// turn's `result` (see `state.rs`).
pub(crate) const LIMIT_RESETS_AT: &str = "tether_limit_resets_at_ms";

/// The reset time (Unix ms) of a `rate_limit_event` that says the limit was hit.
pub(crate) fn limit_resets_at(message: &Map<String, Value>) -> Option<i64> {
    let info = message.get("rate_limit_info")?;
    let rejected = info.get("status").and_then(Value::as_str) == Some("rejected");
    let at = info.get("resetsAt").and_then(Value::as_i64)?;
    rejected.then_some(at * 1000)
}

/// The message of an error `result`: its `errors`, else its `result` text, else its subtype.
fn error_message(result: &Map<String, Value>, subtype: &str) -> String {
    let errors: Vec<String> = result
        .get("errors")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|e| match e {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .filter(|e| !e.trim().is_empty())
        .collect();
    if !errors.is_empty() {
        return errors.join("; ");
    }
    match result.get("result").and_then(Value::as_str) {
        Some(text) if !text.trim().is_empty() => text.to_owned(),
        _ => format!("turn failed ({subtype})"),
    }
}

/// The end of a turn from its `result` message. `text` is the streamed message text;
/// `interrupted` says whether tether asked claude to stop this turn.
pub(crate) fn outcome(
    result: &Map<String, Value>,
    text: String,
    interrupted: bool,
) -> Result<TurnOutcome, AgentError> {
    let subtype = result
        .get("subtype")
        .and_then(Value::as_str)
        .unwrap_or("success");
    let is_error = result
        .get("is_error")
        .and_then(Value::as_bool)
        .unwrap_or(subtype != "success");
    let usage = result.get("usage").filter(|u| !u.is_null()).cloned();
    if interrupted && subtype == "error_during_execution" {
        return Ok(TurnOutcome {
            stop_reason: StopReason::Cancelled,
            text,
            usage,
        });
    }
    if is_error || subtype != "success" {
        let message = error_message(result, subtype);
        // A 429 is the vendor's limit (Claude Code 2.1: `api_error_status`,
        // `api_error_type`); a subscription's `rate_limit_event` said when it resets.
        let limited = result.get("api_error_status").and_then(Value::as_u64) == Some(429)
            || result.get("api_error_type").and_then(Value::as_str) == Some("rate_limit_error");
        if limited {
            return Err(AgentError::UsageLimit {
                message,
                resets_at_ms: result.get(LIMIT_RESETS_AT).and_then(Value::as_i64),
            });
        }
        return Err(AgentError::Agent { message });
    }
    let text = match result.get("result").and_then(Value::as_str) {
        Some(final_text) if text.is_empty() => final_text.to_owned(),
        _ => text,
    };
    let reason = result
        .get("stop_reason")
        .and_then(Value::as_str)
        .unwrap_or("end_turn");
    Ok(TurnOutcome {
        stop_reason: stop_reason(reason),
        text,
        usage,
    })
}

/// The `Session ID` row of a `get_status` control response.
pub(crate) fn status_session_id(status: &Value) -> Option<String> {
    status
        .get("sections")?
        .as_array()?
        .iter()
        .filter_map(|s| s.get("rows").and_then(Value::as_array))
        .flatten()
        .find(|row| str_at(row, "label") == Some("Session ID"))
        .and_then(|row| str_at(row, "value"))
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn titles_and_kinds() {
        let cmd = json!({"command": "touch x", "description": "make x"});
        assert_eq!(tool_title("Bash", &cmd), "Bash: touch x");
        assert_eq!(
            tool_title("Edit", &json!({"file_path": "/a/b.rs"})),
            "Edit: /a/b.rs"
        );
        assert_eq!(tool_title("Write", &json!({})), "Write");
        assert_eq!(
            tool_title("mcp__tether__delegate", &json!({})),
            "MCP tether: delegate"
        );
        assert_eq!(tool_title("TodoWrite", &json!({"todos": []})), "TodoWrite");
        assert_eq!(tool_kind("Bash"), "execute");
        assert_eq!(tool_kind("MultiEdit"), "edit");
        assert_eq!(tool_kind("mcp__x__y"), "other");
    }

    #[test]
    fn tool_results() {
        let block = json!({"type": "tool_result", "tool_use_id": "t1", "is_error": true,
                           "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]});
        let Some(AgentEvent::ToolCallUpdate {
            id, status, detail, ..
        }) = tool_result(&block)
        else {
            panic!("not an update");
        };
        assert_eq!(id, "t1");
        assert_eq!(status.as_deref(), Some("failed"));
        assert_eq!(detail.unwrap()["output"], "a\nb");
    }

    #[test]
    fn partials() {
        let start = json!({"type": "message_start", "message": {"id": "m1"}});
        assert_eq!(partial(&start), Partial::Start("m1".to_owned()));
        let text =
            json!({"type": "content_block_delta", "delta": {"type": "text_delta", "text": "hi"}});
        assert_eq!(partial(&text), Partial::Text("hi".to_owned()));
        let think = json!({"type": "content_block_delta",
                           "delta": {"type": "thinking_delta", "thinking": "hm"}});
        assert_eq!(partial(&think), Partial::Thinking("hm".to_owned()));
    }

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn outcomes() {
        let ok = obj(
            json!({"subtype": "success", "is_error": false, "result": "final",
                            "usage": {"input_tokens": 3}}),
        );
        let out = outcome(&ok, String::new(), false).unwrap();
        assert_eq!(out.stop_reason, StopReason::EndTurn);
        assert_eq!(out.text, "final");
        assert_eq!(out.usage.unwrap()["input_tokens"], 3);
        assert_eq!(
            outcome(&ok, "streamed".into(), false).unwrap().text,
            "streamed"
        );

        let stopped = obj(
            json!({"subtype": "error_during_execution", "is_error": true,
                                 "errors": ["interrupted"]}),
        );
        let out = outcome(&stopped, "part".into(), true).unwrap();
        assert_eq!(out.stop_reason, StopReason::Cancelled);
        match outcome(&stopped, String::new(), false) {
            Err(AgentError::Agent { message }) => assert_eq!(message, "interrupted"),
            other => panic!("{other:?}"),
        }
        let api = obj(json!({"subtype": "success", "is_error": true, "result": "API Error: 500"}));
        match outcome(&api, String::new(), false) {
            Err(AgentError::Agent { message }) => assert_eq!(message, "API Error: 500"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn status_id() {
        let status = json!({"sections": [{"title": "Session", "rows": [
            {"label": "Version", "value": "2"}, {"label": "Session ID", "value": "abc"}]}]});
        assert_eq!(status_session_id(&status).as_deref(), Some("abc"));
        assert_eq!(status_session_id(&json!({})), None);
    }
}
