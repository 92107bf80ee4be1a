//! Pure translation of Codex app-server thread items into tool-call events: a title, a
//! kind (ACP's vocabulary: `execute`, `edit`, `fetch`, `search`, `other`), a status in
//! snake_case and a detail object with what a person needs to judge the call (command,
//! output and exit code; file paths; MCP server, tool, arguments and result).

use serde_json::{Map, Value, json};

use crate::driver::AgentEvent;

/// Item types shown as tool calls.
const TOOL_ITEMS: &[&str] = &[
    "commandExecution",
    "fileChange",
    "mcpToolCall",
    "dynamicToolCall",
    "webSearch",
];

pub(crate) fn str_field(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// Whether `item` is shown as a tool call.
pub(crate) fn is_tool(item: &Value) -> bool {
    item.get("type")
        .and_then(Value::as_str)
        .is_some_and(|t| TOOL_ITEMS.contains(&t))
}

/// Codex item status → the spelling tether uses (`inProgress` → `in_progress`).
pub(crate) fn status(item: &Value) -> Option<String> {
    let s = item.get("status").and_then(Value::as_str)?;
    Some(match s {
        "inProgress" => "in_progress".to_owned(),
        other => {
            let mut out = String::with_capacity(other.len() + 2);
            for c in other.chars() {
                if c.is_ascii_uppercase() {
                    out.push('_');
                    out.push(c.to_ascii_lowercase());
                } else {
                    out.push(c);
                }
            }
            out
        }
    })
}

/// The paths a `fileChange` item touches.
pub(crate) fn paths(item: &Value) -> Vec<String> {
    item.get("changes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| str_field(c, "path"))
        .collect()
}

fn kind(item_type: &str) -> &'static str {
    match item_type {
        "commandExecution" => "execute",
        "fileChange" => "edit",
        "webSearch" => "search",
        _ => "other",
    }
}

pub(crate) fn title(item: &Value) -> String {
    let item_type = item.get("type").and_then(Value::as_str).unwrap_or_default();
    match item_type {
        "commandExecution" => str_field(item, "command").unwrap_or_else(|| "command".to_owned()),
        "fileChange" => {
            let paths = paths(item);
            if paths.is_empty() {
                "edit files".to_owned()
            } else {
                format!("edit {}", paths.join(", "))
            }
        }
        "mcpToolCall" => format!(
            "{}.{}",
            str_field(item, "server").unwrap_or_default(),
            str_field(item, "tool").unwrap_or_default()
        ),
        "dynamicToolCall" => str_field(item, "tool").unwrap_or_else(|| "tool".to_owned()),
        "webSearch" => format!("search: {}", str_field(item, "query").unwrap_or_default()),
        other => other.to_owned(),
    }
}

/// Copies the non-null `keys` of `item` into a detail object.
fn pick(item: &Value, keys: &[&str]) -> Map<String, Value> {
    keys.iter()
        .filter_map(|k| {
            item.get(*k)
                .filter(|v| !v.is_null())
                .map(|v| ((*k).to_owned(), v.clone()))
        })
        .collect()
}

pub(crate) fn detail(item: &Value) -> Option<Value> {
    let item_type = item.get("type").and_then(Value::as_str).unwrap_or_default();
    let mut detail = match item_type {
        "commandExecution" => pick(
            item,
            &[
                "command",
                "cwd",
                "aggregatedOutput",
                "exitCode",
                "durationMs",
            ],
        ),
        "fileChange" => {
            let mut d = pick(item, &["changes"]);
            d.insert("paths".to_owned(), json!(paths(item)));
            d
        }
        "mcpToolCall" => pick(
            item,
            &[
                "server",
                "tool",
                "arguments",
                "result",
                "error",
                "durationMs",
            ],
        ),
        "dynamicToolCall" => pick(
            item,
            &["tool", "arguments", "contentItems", "success", "durationMs"],
        ),
        "webSearch" => pick(item, &["query", "action"]),
        _ => Map::new(),
    };
    (!detail.is_empty()).then(|| {
        detail.insert("type".to_owned(), json!(item_type));
        Value::Object(detail)
    })
}

/// `item/started` of a tool item → [`AgentEvent::ToolCall`].
pub(crate) fn tool_call(item: &Value) -> Option<AgentEvent> {
    if !is_tool(item) {
        return None;
    }
    let item_type = item.get("type").and_then(Value::as_str).unwrap_or_default();
    Some(AgentEvent::ToolCall {
        id: str_field(item, "id").unwrap_or_default(),
        title: title(item),
        kind: Some(kind(item_type).to_owned()),
        status: status(item),
        detail: detail(item),
    })
}

/// `item/completed` of a tool item → [`AgentEvent::ToolCallUpdate`].
pub(crate) fn tool_update(item: &Value) -> Option<AgentEvent> {
    if !is_tool(item) {
        return None;
    }
    Some(AgentEvent::ToolCallUpdate {
        id: str_field(item, "id").unwrap_or_default(),
        title: Some(title(item)),
        status: status(item),
        detail: detail(item),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_items() {
        let item = json!({"type": "commandExecution", "id": "c1", "command": "ls -l",
                          "cwd": "/w", "status": "completed", "aggregatedOutput": "a\n",
                          "exitCode": 0, "processId": null});
        let Some(AgentEvent::ToolCallUpdate {
            id,
            title,
            status,
            detail,
        }) = tool_update(&item)
        else {
            panic!("not an update");
        };
        assert_eq!(id, "c1");
        assert_eq!(title.as_deref(), Some("ls -l"));
        assert_eq!(status.as_deref(), Some("completed"));
        let detail = detail.unwrap_or_default();
        assert_eq!(detail["aggregatedOutput"], "a\n");
        assert_eq!(detail["exitCode"], 0);
        assert!(detail.get("processId").is_none());
    }

    #[test]
    fn file_changes_and_mcp_calls() {
        let item = json!({"type": "fileChange", "id": "f", "status": "inProgress",
                          "changes": [{"path": "a.txt", "kind": {"type": "add"}, "diff": "+x"}]});
        assert_eq!(title(&item), "edit a.txt");
        assert_eq!(status(&item).as_deref(), Some("in_progress"));
        assert_eq!(detail(&item).unwrap_or_default()["paths"], json!(["a.txt"]));
        let mcp = json!({"type": "mcpToolCall", "id": "m", "server": "tether",
                         "tool": "delegate", "arguments": {"a": 1}, "status": "failed"});
        assert_eq!(title(&mcp), "tether.delegate");
        assert_eq!(
            detail(&mcp).unwrap_or_default()["arguments"],
            json!({"a": 1})
        );
        let declined = json!({"type": "commandExecution", "status": "declined"});
        assert_eq!(status(&declined).as_deref(), Some("declined"));
        assert!(tool_call(&json!({"type": "agentMessage", "id": "x"})).is_none());
    }
}
