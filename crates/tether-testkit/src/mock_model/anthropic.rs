//! Anthropic Messages API (`POST /v1/messages`, used by `claude`): reading the history
//! out of a request and streaming a reply as the real service does (`message_start`,
//! `content_block_start`, `content_block_delta` with `text_delta` / `input_json_delta`,
//! `content_block_stop`, `message_delta` with stop reason and usage, `message_stop`).

use std::collections::HashMap;

use axum::response::Response;
use serde_json::{Value, json};

use super::script::{Last, Reply, Transcript, schema_instance, user_text_of};
use super::sse::{Frame, json_response, sse_response, tokens_of, tokens_of_text};

/// The text of a `tool_result` block's `content` (a string or a list of blocks).
fn result_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Reads the history of a Messages request.
pub(crate) fn transcript(body: &Value) -> Transcript {
    let tools = body
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| t.get("name").and_then(Value::as_str).map(str::to_string))
        .collect();
    let mut t = Transcript {
        user_texts: Vec::new(),
        assistant_texts: Vec::new(),
        last: Last::Other,
        tools,
    };
    let mut calls: HashMap<String, String> = HashMap::new();
    for msg in body
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let blocks: Vec<Value> = match msg.get("content") {
            Some(Value::String(s)) => vec![json!({"type": "text", "text": s})],
            Some(Value::Array(b)) => b.clone(),
            _ => Vec::new(),
        };
        let texts = blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str));
        match msg.get("role").and_then(Value::as_str) {
            Some("user") => {
                let user = user_text_of(texts);
                let result = blocks
                    .iter()
                    .rfind(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"));
                if let Some(text) = &user {
                    t.user_texts.push(text.clone());
                }
                if let Some(r) = result {
                    let id = r.get("tool_use_id").and_then(Value::as_str).unwrap_or("");
                    t.last = Last::ToolResult {
                        name: calls.get(id).cloned().unwrap_or_default(),
                        output: result_text(r.get("content").unwrap_or(&Value::Null)),
                    };
                } else if let Some(text) = user {
                    t.last = Last::User(text);
                }
            }
            Some("assistant") => {
                let text: String = texts.collect();
                if !text.is_empty() {
                    t.assistant_texts.push(text);
                }
                for b in &blocks {
                    if b.get("type").and_then(Value::as_str) == Some("tool_use") {
                        let id = b.get("id").and_then(Value::as_str).unwrap_or("");
                        let name = b.get("name").and_then(Value::as_str).unwrap_or("");
                        calls.insert(id.to_string(), name.to_string());
                    }
                }
                t.last = Last::Other;
            }
            _ => {}
        }
    }
    t
}

/// The answer to an auxiliary request, or `None` for a request of the scripted flow.
/// Claude's side requests (session titles, summaries) offer no tools and ask for a title
/// or summary in the system prompt; one with a JSON output schema gets a conforming JSON
/// document.
pub(crate) fn auxiliary_text(body: &Value, t: &Transcript) -> Option<String> {
    if !t.tools.is_empty() {
        return None;
    }
    let system = body.get("system").map(Value::to_string).unwrap_or_default();
    let system = system.to_ascii_lowercase();
    if !(system.contains("title") || system.contains("summar")) {
        return None;
    }
    let schema = body
        .pointer("/output_config/format/schema")
        .or_else(|| body.pointer("/output_format/schema"));
    Some(match schema {
        Some(s) => schema_instance(s, "").to_string(),
        None => "Mock title".to_string(),
    })
}

/// The working directory claude states in its prompt, for absolute `Write` paths.
fn working_dir(body: &Value) -> Option<String> {
    let text = body.to_string();
    let marker = "Primary working directory: ";
    let start = text.find(marker)? + marker.len();
    let rest = &text[start..];
    let end = rest.find(['\\', '"', ' '])?;
    Some(rest[..end].to_string())
}

/// The `(name, input)` of a tool-calling reply.
fn tool_use(reply: &Reply, body: &Value) -> Option<(String, Value)> {
    Some(match reply {
        Reply::Shell(cmd) => (
            "Bash".into(),
            json!({ "command": cmd, "description": "Run a shell command" }),
        ),
        Reply::Patch { path, content } => {
            let abs = if path.starts_with('/') {
                path.clone()
            } else {
                match working_dir(body) {
                    Some(dir) => format!("{dir}/{path}"),
                    None => path.clone(),
                }
            };
            (
                "Write".into(),
                json!({ "file_path": abs, "content": format!("{content}\n") }),
            )
        }
        Reply::Mcp { server, tool, args } => (format!("mcp__{server}__{tool}"), args.clone()),
        _ => return None,
    })
}

/// Renders `reply` as a Messages stream (or, without `stream: true`, one message object).
pub(crate) fn render(reply: &Reply, _t: &Transcript, body: &Value, n: u64) -> Response {
    let model = body.get("model").and_then(Value::as_str).unwrap_or("mock");
    let msg_id = format!("msg_mock_{n}");
    let in_tokens = tokens_of(body);
    let usage = |out: u64| {
        json!({"input_tokens": in_tokens, "output_tokens": out,
               "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0})
    };
    let message = |content: Value, stop: Value, out: u64| {
        json!({"id": msg_id, "type": "message", "role": "assistant", "model": model,
               "content": content, "stop_reason": stop, "stop_sequence": null,
               "usage": usage(out)})
    };
    let mut frames = vec![Frame::named(
        "message_start",
        json!({"type": "message_start", "message": message(json!([]), Value::Null, 1)}),
    )];
    let (block, stop, out_tokens) = if let Some((name, input)) = tool_use(reply, body) {
        let id = format!("toolu_mock_{n}");
        frames.push(Frame::named(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
                   "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
        ));
        frames.push(Frame::named(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
                   "delta": {"type": "input_json_delta", "partial_json": input.to_string()}}),
        ));
        let tokens = tokens_of(&input);
        let block = json!({"type": "tool_use", "id": id, "name": name, "input": input});
        (block, "tool_use", tokens)
    } else {
        let parts = reply.stream_parts();
        let text: String = parts.concat();
        let delay = match reply {
            Reply::Slow { ms, .. } => *ms,
            _ => 0,
        };
        frames.push(Frame::named(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
                   "content_block": {"type": "text", "text": ""}}),
        ));
        for (i, part) in parts.iter().enumerate() {
            let f = Frame::named(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0,
                       "delta": {"type": "text_delta", "text": part}}),
            );
            frames.push(if i > 0 { f.after_ms(delay) } else { f });
        }
        let tokens = tokens_of_text(&text);
        (json!({"type": "text", "text": text}), "end_turn", tokens)
    };
    if body.get("stream").and_then(Value::as_bool) != Some(true) {
        return json_response(200, message(json!([block]), json!(stop), out_tokens));
    }
    frames.push(Frame::named(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    ));
    frames.push(Frame::named(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
               "usage": usage(out_tokens)}),
    ));
    frames.push(Frame::named(
        "message_stop",
        json!({"type": "message_stop"}),
    ));
    sse_response(frames)
}

/// The JSON error body of the Messages API.
pub(crate) fn error_body(status: u16) -> Value {
    let kind = match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    };
    json!({"type": "error",
           "error": {"type": kind, "message": format!("mock model error {status}")}})
}
