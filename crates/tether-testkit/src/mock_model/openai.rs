//! OpenAI Responses API (`POST /v1/responses`, used by `codex` and `codex-acp`): reading
//! the history out of a request and streaming a reply as the real service does
//! (`response.created`, `response.output_item.added`, `response.output_text.delta`,
//! `response.output_item.done`, `response.completed` with usage).

use std::collections::HashMap;

use axum::response::Response;
use serde_json::{Value, json};

use super::script::{Last, Reply, Transcript, user_text_of};
use super::sse::{Frame, json_response, sse_response, tokens_of, tokens_of_text};

/// Texts of the `input_text`/`output_text` parts of a message's content.
fn content_texts(content: &Value) -> Vec<&str> {
    match content {
        Value::String(s) => vec![s.as_str()],
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => Vec::new(),
    }
}

/// The text of a tool output (`output` is a string or a list of content parts).
fn output_text(output: &Value) -> String {
    match output {
        Value::String(s) => s.clone(),
        Value::Array(_) => content_texts(output).join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Reads the history of a Responses request.
pub(crate) fn transcript(body: &Value) -> Transcript {
    let mut t = Transcript {
        user_texts: Vec::new(),
        assistant_texts: Vec::new(),
        last: Last::Other,
        tools: tool_names(body),
    };
    let mut calls: HashMap<String, String> = HashMap::new();
    let items = body.get("input").and_then(Value::as_array);
    for item in items.into_iter().flatten() {
        let kind = item
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("message");
        let call_id = item.get("call_id").and_then(Value::as_str).unwrap_or("");
        match kind {
            "message" => {
                let texts = content_texts(item.get("content").unwrap_or(&Value::Null));
                match item.get("role").and_then(Value::as_str) {
                    Some("user") => {
                        if let Some(text) = user_text_of(texts) {
                            t.user_texts.push(text.clone());
                            t.last = Last::User(text);
                        }
                    }
                    Some("assistant") => {
                        t.assistant_texts.push(texts.join(""));
                        t.last = Last::Other;
                    }
                    _ => {}
                }
            }
            "function_call" | "custom_tool_call" => {
                let name = item.get("name").and_then(Value::as_str).unwrap_or("");
                let full = match item.get("namespace").and_then(Value::as_str) {
                    Some(ns) if !ns.is_empty() => format!("{ns}__{name}"),
                    _ => name.to_string(),
                };
                calls.insert(call_id.to_string(), full);
                t.last = Last::Other;
            }
            "function_call_output" | "custom_tool_call_output" => {
                t.last = Last::ToolResult {
                    name: calls.get(call_id).cloned().unwrap_or_default(),
                    output: output_text(item.get("output").unwrap_or(&Value::Null)),
                };
            }
            _ => {}
        }
    }
    t
}

/// Names of the offered tools (tools nested in a namespace as `NS__NAME`).
fn tool_names(body: &Value) -> Vec<String> {
    let mut names = Vec::new();
    for tool in body
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = tool.get("name").and_then(Value::as_str).unwrap_or("");
        if !name.is_empty() {
            names.push(name.to_string());
        }
        for sub in tool
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(s) = sub.get("name").and_then(Value::as_str) {
                names.push(format!("{name}__{s}"));
            }
        }
    }
    names
}

/// The `type` of the offered tool `name` (`function`, `custom`, ...).
fn tool_type<'a>(body: &'a Value, name: &str) -> Option<&'a str> {
    body.get("tools")?
        .as_array()?
        .iter()
        .find(|t| t.get("name").and_then(Value::as_str) == Some(name))?
        .get("type")?
        .as_str()
}

/// Whether the offered function tool `name` declares parameter `param`.
fn tool_has_param(body: &Value, name: &str, param: &str) -> bool {
    body.get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|t| t.get("name").and_then(Value::as_str) == Some(name))
        .any(|t| {
            t.pointer(&format!("/parameters/properties/{param}"))
                .is_some()
        })
}

/// The `apply_patch` text creating `path` with `content`.
pub(crate) fn add_file_patch(path: &str, content: &str) -> String {
    let mut patch = format!("*** Begin Patch\n*** Add File: {path}\n");
    for line in content.lines() {
        patch.push('+');
        patch.push_str(line);
        patch.push('\n');
    }
    patch.push_str("*** End Patch\n");
    patch
}

/// The output item a tool-calling reply produces.
fn call_item(reply: &Reply, t: &Transcript, body: &Value, n: u64) -> Option<Value> {
    let call_id = format!("call_mock_{n}");
    let function = |name: &str, args: Value| {
        json!({"type": "function_call", "id": format!("fc_mock_{n}"), "call_id": call_id,
               "name": name, "arguments": args.to_string(), "status": "completed"})
    };
    Some(match reply {
        Reply::Shell(cmd) => {
            if t.offers("exec_command") || !(t.offers("shell_command") || t.offers("shell")) {
                // A non-login shell, so profile noise does not precede the output.
                let mut args = json!({ "cmd": cmd });
                if tool_has_param(body, "exec_command", "login") {
                    args["login"] = json!(false);
                }
                function("exec_command", args)
            } else if t.offers("shell_command") {
                function("shell_command", json!({ "command": cmd }))
            } else {
                function("shell", json!({ "command": ["bash", "-lc", cmd] }))
            }
        }
        Reply::Patch { path, content } => {
            let patch = add_file_patch(path, content);
            if tool_type(body, "apply_patch") == Some("function") {
                function("apply_patch", json!({ "input": patch }))
            } else {
                json!({"type": "custom_tool_call", "id": format!("ctc_mock_{n}"),
                       "call_id": call_id, "name": "apply_patch", "input": patch,
                       "status": "completed"})
            }
        }
        Reply::Mcp { server, tool, args } => {
            let mut item = function(tool, args.clone());
            item["namespace"] = json!(format!("mcp__{server}"));
            item
        }
        _ => return None,
    })
}

/// Renders `reply` as a Responses stream (or, for `stream: false`, one response object).
pub(crate) fn render(reply: &Reply, t: &Transcript, body: &Value, n: u64) -> Response {
    let model = body.get("model").and_then(Value::as_str).unwrap_or("mock");
    let resp_id = format!("resp_mock_{n}");
    let created_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let response = |status: &str, output: Value, usage: Value| {
        json!({"id": resp_id, "object": "response", "created_at": created_at, "status": status,
               "model": model, "output": output, "usage": usage, "error": null,
               "incomplete_details": null})
    };
    let mut frames = vec![Frame::named(
        "response.created",
        json!({"type": "response.created", "response": response("in_progress", json!([]), Value::Null)}),
    )];
    let (item, out_tokens) = if let Some(call) = call_item(reply, t, body, n) {
        let tokens = tokens_of(&call);
        frames.push(Frame::named(
            "response.output_item.added",
            json!({"type": "response.output_item.added", "output_index": 0, "item": call}),
        ));
        (call, tokens)
    } else {
        let msg_id = format!("msg_mock_{n}");
        let parts = reply.stream_parts();
        let text: String = parts.concat();
        let delay = match reply {
            Reply::Slow { ms, .. } => *ms,
            _ => 0,
        };
        frames.push(Frame::named(
            "response.output_item.added",
            json!({"type": "response.output_item.added", "output_index": 0,
                   "item": {"type": "message", "id": msg_id, "status": "in_progress",
                            "role": "assistant", "content": []}}),
        ));
        frames.push(Frame::named(
            "response.content_part.added",
            json!({"type": "response.content_part.added", "item_id": msg_id, "output_index": 0,
                   "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}),
        ));
        for (i, part) in parts.iter().enumerate() {
            let f = Frame::named(
                "response.output_text.delta",
                json!({"type": "response.output_text.delta", "item_id": msg_id,
                       "output_index": 0, "content_index": 0, "delta": part}),
            );
            frames.push(if i > 0 { f.after_ms(delay) } else { f });
        }
        let done_part = json!({"type": "output_text", "text": text, "annotations": []});
        frames.push(Frame::named(
            "response.output_text.done",
            json!({"type": "response.output_text.done", "item_id": msg_id, "output_index": 0,
                   "content_index": 0, "text": text}),
        ));
        frames.push(Frame::named(
            "response.content_part.done",
            json!({"type": "response.content_part.done", "item_id": msg_id, "output_index": 0,
                   "content_index": 0, "part": done_part}),
        ));
        let item = json!({"type": "message", "id": msg_id, "status": "completed",
                          "role": "assistant", "content": [done_part]});
        (item, tokens_of_text(&text))
    };
    frames.push(Frame::named(
        "response.output_item.done",
        json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
    ));
    let in_tokens = tokens_of(body);
    let usage = json!({"input_tokens": in_tokens, "input_tokens_details": {"cached_tokens": 0},
                       "output_tokens": out_tokens,
                       "output_tokens_details": {"reasoning_tokens": 0},
                       "total_tokens": in_tokens + out_tokens});
    let done = response("completed", json!([item]), usage);
    if body.get("stream").and_then(Value::as_bool) == Some(false) {
        return json_response(200, done);
    }
    frames.push(Frame::named(
        "response.completed",
        json!({"type": "response.completed", "response": done}),
    ));
    sse_response(frames)
}

/// The JSON error body of the Responses API.
pub(crate) fn error_body(status: u16) -> Value {
    json!({"error": {"message": format!("mock model error {status}"),
                     "type": if status >= 500 { "server_error" } else { "invalid_request_error" },
                     "param": null, "code": format!("mock_{status}")}})
}
