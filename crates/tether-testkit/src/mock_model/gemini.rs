//! Gemini API (`POST /v1beta/models/{model}:streamGenerateContent?alt=sse` and
//! `:generateContent`, used by `gemini`): reading the history out of a request and
//! answering with `candidates[].content.parts[]` (text or `functionCall`) chunks, the last
//! one with `finishReason` and `usageMetadata`.

use axum::response::Response;
use serde_json::{Value, json};

use super::script::{Last, Reply, Transcript, schema_instance, user_text_of};
use super::sse::{Frame, json_response, sse_response, tokens_of, tokens_of_text};

/// Reads the history of a generateContent request.
pub(crate) fn transcript(body: &Value) -> Transcript {
    let tools = body
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| t.get("functionDeclarations").and_then(Value::as_array))
        .flatten()
        .filter_map(|d| d.get("name").and_then(Value::as_str).map(str::to_string))
        .collect();
    let mut t = Transcript {
        user_texts: Vec::new(),
        assistant_texts: Vec::new(),
        last: Last::Other,
        tools,
    };
    for content in body
        .get("contents")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let parts = content.get("parts").and_then(Value::as_array);
        let parts: Vec<&Value> = parts.into_iter().flatten().collect();
        let texts = parts
            .iter()
            .filter(|p| p.get("thought").and_then(Value::as_bool) != Some(true))
            .filter_map(|p| p.get("text").and_then(Value::as_str));
        match content.get("role").and_then(Value::as_str) {
            Some("model") => {
                let text: String = texts.collect();
                if !text.is_empty() {
                    t.assistant_texts.push(text);
                }
                t.last = Last::Other;
            }
            _ => {
                let user = user_text_of(texts);
                let result = parts.iter().rev().find_map(|p| p.get("functionResponse"));
                if let Some(text) = &user {
                    t.user_texts.push(text.clone());
                }
                if let Some(r) = result {
                    let response = r.get("response").cloned().unwrap_or(Value::Null);
                    let output = match response.get("output").or_else(|| response.get("error")) {
                        Some(Value::String(s)) => s.clone(),
                        Some(other) => other.to_string(),
                        None => response.to_string(),
                    };
                    let name = r.get("name").and_then(Value::as_str).unwrap_or("");
                    t.last = Last::ToolResult {
                        name: name.to_string(),
                        output,
                    };
                } else if let Some(text) = user {
                    t.last = Last::User(text);
                }
            }
        }
    }
    t
}

/// The answer to an auxiliary request, or `None` for a request of the scripted flow.
/// The chat itself streams (`streamGenerateContent`); the CLI's side queries (model
/// routing, next-speaker and loop checks, summaries) use `generateContent`, mostly with a
/// JSON response schema, which gets a minimal conforming JSON document.
pub(crate) fn auxiliary_text(path: &str, body: &Value) -> Option<String> {
    if path.contains(":streamGenerateContent") {
        return None;
    }
    let config = body.get("generationConfig");
    let schema = config.and_then(|c| {
        c.get("responseJsonSchema")
            .or_else(|| c.get("responseSchema"))
    });
    Some(match schema {
        Some(s) => schema_instance(s, "").to_string(),
        None if config
            .and_then(|c| c.get("responseMimeType"))
            .and_then(Value::as_str)
            == Some("application/json") =>
        {
            "{}".to_string()
        }
        None => "Mock summary.".to_string(),
    })
}

/// The `functionCall` part of a tool-calling reply.
fn function_call(reply: &Reply, t: &Transcript) -> Option<Value> {
    let (name, args) = match reply {
        Reply::Shell(cmd) => (
            "run_shell_command".to_string(),
            json!({ "command": cmd, "description": "Run a shell command" }),
        ),
        Reply::Patch { path, content } => (
            "write_file".to_string(),
            json!({ "file_path": path, "content": format!("{content}\n") }),
        ),
        Reply::Mcp { server, tool, args } => {
            let candidates = [
                format!("mcp_{server}_{tool}"),
                format!("{server}__{tool}"),
                tool.clone(),
            ];
            let name = candidates
                .iter()
                .find(|c| t.offers(c))
                .unwrap_or(&candidates[0])
                .clone();
            (name, args.clone())
        }
        _ => return None,
    };
    Some(json!({ "functionCall": { "name": name, "args": args } }))
}

/// Renders `reply` as a stream of chunks (`stream`) or as one response.
pub(crate) fn render(
    reply: &Reply,
    t: &Transcript,
    body: &Value,
    n: u64,
    stream: bool,
) -> Response {
    let prompt = tokens_of(body);
    let usage = |out: u64| {
        json!({"promptTokenCount": prompt, "candidatesTokenCount": out,
               "totalTokenCount": prompt + out})
    };
    let chunk = |parts: Value, last: Option<u64>| {
        let mut cand = json!({"content": {"parts": parts, "role": "model"}, "index": 0});
        let mut c = json!({"candidates": [], "modelVersion": "mock",
                           "responseId": format!("mock-{n}")});
        if let Some(out) = last {
            cand["finishReason"] = json!("STOP");
            c["usageMetadata"] = usage(out);
        }
        c["candidates"] = json!([cand]);
        c
    };
    if let Some(call) = function_call(reply, t) {
        let out = tokens_of(&call);
        let c = chunk(json!([call]), Some(out));
        return if stream {
            sse_response(vec![Frame::data(c)])
        } else {
            json_response(200, c)
        };
    }
    let parts = reply.stream_parts();
    let text: String = parts.concat();
    if !stream {
        return json_response(
            200,
            chunk(json!([{ "text": text }]), Some(tokens_of_text(&text))),
        );
    }
    let delay = match reply {
        Reply::Slow { ms, .. } => *ms,
        _ => 0,
    };
    let count = parts.len();
    let frames = parts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let last = (i + 1 == count).then(|| tokens_of_text(&text));
            let f = Frame::data(chunk(json!([{ "text": p }]), last));
            if i > 0 { f.after_ms(delay) } else { f }
        })
        .collect();
    sse_response(frames)
}

/// The JSON error body of the Gemini API.
pub(crate) fn error_body(status: u16) -> Value {
    let kind = match status {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        429 => "RESOURCE_EXHAUSTED",
        503 => "UNAVAILABLE",
        _ => "INTERNAL",
    };
    json!({"error": {"code": status, "message": format!("mock model error {status}"),
                     "status": kind}})
}
