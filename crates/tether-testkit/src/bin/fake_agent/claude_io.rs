//! The claude-code stream-json side of a turn: `assistant` messages (text and `tool_use`
//! blocks), `user` messages carrying `tool_result`s, and `control_request can_use_tool`
//! for approvals (tool `Bash`) and questions (tool `AskUserQuestion`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::engine::{ToolCall, ToolEnd, TurnIo};
use crate::out::Out;
use crate::script::Permission;

pub const MODEL: &str = "fake-model";

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn new_uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

type Pending = Mutex<HashMap<String, oneshot::Sender<Result<Value, String>>>>;

/// The control channel: our `control_request`s and the client's `control_response`s.
pub struct Control {
    out: Out,
    pending: Pending,
}

struct PendingGuard<'a> {
    pending: &'a Pending,
    key: String,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        lock(self.pending).remove(&self.key);
    }
}

impl Control {
    pub fn new(out: Out) -> Self {
        Self {
            out,
            pending: Mutex::new(HashMap::new()),
        }
    }

    pub fn out(&self) -> &Out {
        &self.out
    }

    /// Send a control request and wait for the response (`Err(message)` for an error).
    pub async fn request(&self, request: Value) -> Result<Result<Value, String>> {
        let request_id = new_uuid();
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(request_id.clone(), tx);
        let _guard = PendingGuard {
            pending: &self.pending,
            key: request_id.clone(),
        };
        let message = json!({"type": "control_request", "request_id": request_id,
                             "request": request});
        self.out.send(&message).await?;
        rx.await.context("no control_response: input closed")
    }

    /// Route a `control_response` (its `response` object) to the waiting request.
    pub fn deliver(&self, response: &Value) {
        let Some(id) = response["request_id"].as_str() else {
            return;
        };
        let Some(tx) = lock(&self.pending).remove(id) else {
            eprintln!("fake-agent: ignoring control_response to unknown request {id}");
            return;
        };
        let reply = if response["subtype"] == "error" {
            Err(response["error"].as_str().unwrap_or("error").to_owned())
        } else {
            Ok(response["response"].clone())
        };
        let _ = tx.send(reply);
    }

    pub async fn respond(&self, request_id: &Value, response: Value) -> Result<()> {
        let message = json!({"type": "control_response", "response": {
            "subtype": "success", "request_id": request_id, "response": response}});
        self.out.send(&message).await
    }

    pub async fn respond_error(&self, request_id: &Value, error: &str) -> Result<()> {
        let message = json!({"type": "control_response", "response": {
            "subtype": "error", "request_id": request_id, "error": error}});
        self.out.send(&message).await
    }
}

pub struct ClaudeIo {
    control: Arc<Control>,
    session_id: String,
    /// All agent text of the turn (the `result` field).
    pub text: String,
    /// Denied tool uses (the `permission_denials` field).
    pub denials: Vec<Value>,
    /// Tokens reported in the turn (`result.usage`): input, output.
    pub spent: (u64, u64),
}

fn tool_use_id(call: &ToolCall) -> String {
    format!("toolu_{}", call.id.trim_start_matches("call_"))
}

fn bash_input(call: &ToolCall) -> Value {
    json!({"command": call.command, "description": call.title})
}

impl ClaudeIo {
    pub fn new(control: Arc<Control>, session_id: &str) -> Self {
        Self {
            control,
            session_id: session_id.to_owned(),
            text: String::new(),
            denials: Vec::new(),
            spent: (0, 0),
        }
    }

    async fn assistant(&self, block: Value) -> Result<()> {
        let message = json!({
            "type": "assistant",
            "message": {
                "id": format!("msg_{}", uuid::Uuid::new_v4().simple()),
                "type": "message",
                "role": "assistant",
                "model": MODEL,
                "content": [block],
                "stop_reason": null,
                "stop_sequence": null,
                "usage": {"input_tokens": 0, "output_tokens": 0},
            },
            "parent_tool_use_id": null,
            "session_id": self.session_id,
            "uuid": new_uuid(),
        });
        self.control.out().send(&message).await
    }

    async fn tool_result(&self, tool_use_id: &str, content: &str, is_error: bool) -> Result<()> {
        let message = json!({
            "type": "user",
            "message": {"role": "user", "content": [{
                "tool_use_id": tool_use_id, "type": "tool_result",
                "content": content, "is_error": is_error,
            }]},
            "parent_tool_use_id": null,
            "session_id": self.session_id,
            "uuid": new_uuid(),
        });
        self.control.out().send(&message).await
    }
}

/// The answer to `question` in an AskUserQuestion `updatedInput`.
fn answer_of(updated_input: &Value, question: &str) -> Option<String> {
    let answers = updated_input.get("answers")?;
    let value = answers
        .get(question)
        .or_else(|| answers.as_object().and_then(|m| m.values().next()))?;
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Array(items) => Some(
            items
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(", "),
        ),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

impl TurnIo for ClaudeIo {
    async fn chunk(&mut self, text: &str) -> Result<()> {
        self.text.push_str(text);
        self.assistant(json!({"type": "text", "text": text})).await
    }

    async fn raw_line(&mut self, line: &str) -> Result<()> {
        self.control.out().line(line).await
    }

    async fn tool_started(&mut self, call: &ToolCall) -> Result<()> {
        self.assistant(
            json!({"type": "tool_use", "id": tool_use_id(call), "name": "Bash",
                              "input": bash_input(call)}),
        )
        .await
    }

    async fn permission(&mut self, call: &ToolCall) -> Result<Permission> {
        let request = json!({
            "subtype": "can_use_tool",
            "tool_name": "Bash",
            "input": bash_input(call),
            "permission_suggestions": [{
                "type": "addRules",
                "rules": [{"toolName": "Bash", "ruleContent": call.command}],
                "behavior": "allow",
                "destination": "localSettings",
            }],
            "tool_use_id": tool_use_id(call),
        });
        let reply = self.control.request(request).await?;
        Ok(match reply {
            Ok(r) if r["behavior"] == "allow" => {
                let always = r["updatedPermissions"]
                    .as_array()
                    .is_some_and(|p| !p.is_empty());
                if always {
                    Permission::AllowedAlways
                } else {
                    Permission::Allowed
                }
            }
            Ok(_) => Permission::Denied,
            Err(_) => Permission::Cancelled,
        })
    }

    async fn tool_finished(&mut self, call: &ToolCall, end: &ToolEnd) -> Result<()> {
        let id = tool_use_id(call);
        match end {
            ToolEnd::Completed { output } => self.tool_result(&id, output, false).await,
            ToolEnd::Declined => {
                self.denials
                    .push(json!({"tool_name": "Bash", "tool_use_id": id,
                                         "tool_input": bash_input(call)}));
                let text = "The user doesn't want to proceed with this tool use. \
                            The tool use was rejected.";
                self.tool_result(&id, text, true).await
            }
            ToolEnd::Cancelled => self.tool_result(&id, "Interrupted by user", true).await,
        }
    }

    async fn usage(&mut self, input: u64, output: u64) -> Result<()> {
        self.spent.0 += input;
        self.spent.1 += output;
        // An API call of its own: a message with no content but its usage.
        let message = json!({
            "type": "assistant",
            "message": {
                "id": format!("msg_{}", uuid::Uuid::new_v4().simple()),
                "type": "message", "role": "assistant", "model": MODEL, "content": [],
                "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": input, "output_tokens": output,
                          "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
            },
            "parent_tool_use_id": null,
            "session_id": self.session_id,
            "uuid": new_uuid(),
        });
        self.control.out().send(&message).await
    }

    async fn window(&mut self, percent: u8) -> Result<()> {
        let resets_at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() + 3600)
            .unwrap_or(0);
        let status = if percent >= 100 {
            "rejected"
        } else if percent >= 80 {
            "allowed_warning"
        } else {
            "allowed"
        };
        let event = json!({"type": "rate_limit_event", "rate_limit_info": {
            "status": status, "resetsAt": resets_at, "rateLimitType": "five_hour",
            "utilization": f64::from(percent) / 100.0, "isUsingOverage": false},
            "uuid": new_uuid(), "session_id": self.session_id});
        self.control.out().send(&event).await
    }

    async fn ask(&mut self, question: &str) -> Result<Option<String>> {
        let id = format!("toolu_{}", uuid::Uuid::new_v4().simple());
        let input = json!({"questions": [{
            "question": question,
            "header": "Question",
            "options": [
                {"label": "Yes", "description": "Answer yes"},
                {"label": "No", "description": "Answer no"},
            ],
            "multiSelect": false,
        }]});
        self.assistant(
            json!({"type": "tool_use", "id": id, "name": "AskUserQuestion",
                              "input": input}),
        )
        .await?;
        let request = json!({"subtype": "can_use_tool", "tool_name": "AskUserQuestion",
                             "input": input, "permission_suggestions": [], "tool_use_id": id});
        let reply = self.control.request(request).await?;
        let answer = match reply {
            Ok(r) if r["behavior"] == "allow" => answer_of(&r["updatedInput"], question),
            _ => None,
        };
        match &answer {
            Some(a) => {
                let text = format!(
                    "User has answered your questions: \"{question}\"=\"{a}\". \
                     You can now continue with the user's answers in mind."
                );
                self.tool_result(&id, &text, false).await?;
            }
            None => {
                self.tool_result(&id, "User declined to answer questions", true)
                    .await?
            }
        }
        Ok(answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers() {
        let input = json!({"answers": {"colour?": "blue"}});
        assert_eq!(answer_of(&input, "colour?").as_deref(), Some("blue"));
        let input = json!({"answers": {"other": ["a", "b"]}});
        assert_eq!(answer_of(&input, "colour?").as_deref(), Some("a, b"));
        assert_eq!(answer_of(&json!({}), "colour?"), None);
    }
}
