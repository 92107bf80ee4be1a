//! The codex app-server side of a turn: `agentMessage` items streamed with
//! `item/agentMessage/delta`, `commandExecution` items with the server→client request
//! `item/commandExecution/requestApproval`, and `item/tool/requestUserInput` questions.

use std::sync::Arc;

use anyhow::Result;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::engine::{ToolCall, ToolEnd, TurnIo};
use crate::rpc::Peer;
use crate::script::Permission;

/// Id of the single question sent with `item/tool/requestUserInput`.
pub const QUESTION_ID: &str = "answer";

pub fn user_message_item(id: &str, text: &str) -> Value {
    json!({
        "type": "userMessage",
        "id": id,
        "content": [{"type": "text", "text": text, "text_elements": []}],
    })
}

pub struct CodexIo {
    peer: Arc<Peer>,
    thread_id: String,
    turn_id: String,
    cwd: String,
    /// The turn's token: a `cancel` approval decision interrupts the turn, as in codex.
    token: CancellationToken,
    /// The agentMessage item being streamed: (item id, text so far).
    open: Option<(String, String)>,
    /// Where the thread's usage is kept.
    store: crate::store::Store,
}

/// `tokenUsage` of a step of `input` + `output` tokens bringing the thread to `total`.
fn usage_json(total: u64, input: u64, output: u64) -> serde_json::Value {
    let breakdown = |i: u64, o: u64| {
        json!({"inputTokens": i, "cachedInputTokens": 0, "outputTokens": o,
               "reasoningOutputTokens": 0, "totalTokens": i + o})
    };
    json!({"last": breakdown(input, output), "total": breakdown(total, 0),
           "modelContextWindow": 272000})
}

fn new_item_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

impl CodexIo {
    /// What codex 0.171 does with a resumed thread: it sends the thread's last usage
    /// update again (no turn id), which may arrive after the next turn began.
    pub async fn replay_usage(&mut self) -> Result<()> {
        let Some((total, input, output)) = self.store.usage(&self.thread_id) else {
            return Ok(());
        };
        let params = json!({"threadId": self.thread_id,
                            "tokenUsage": usage_json(total, input, output)});
        self.peer.notify("thread/tokenUsage/updated", params).await
    }

    pub fn new(
        peer: Arc<Peer>,
        thread_id: &str,
        turn_id: &str,
        cwd: &str,
        token: CancellationToken,
        store: crate::store::Store,
    ) -> Self {
        Self {
            store,
            peer,
            thread_id: thread_id.to_owned(),
            turn_id: turn_id.to_owned(),
            cwd: cwd.to_owned(),
            token,
            open: None,
        }
    }

    /// `item/started` or `item/completed` for `item`.
    pub async fn item(&self, method: &str, item: Value) -> Result<()> {
        let params = json!({"item": item, "threadId": self.thread_id, "turnId": self.turn_id});
        self.peer.notify(method, params).await
    }

    /// Complete the agentMessage item being streamed, if any.
    pub async fn close_message(&mut self) -> Result<()> {
        if let Some((id, text)) = self.open.take() {
            let item = json!({"type": "agentMessage", "id": id, "text": text});
            self.item("item/completed", item).await?;
        }
        Ok(())
    }

    pub async fn active(&self, flags: &[&str]) -> Result<()> {
        let status = json!({"type": "active", "activeFlags": flags});
        self.status(status).await
    }

    pub async fn idle(&self) -> Result<()> {
        self.status(json!({"type": "idle"})).await
    }

    async fn status(&self, status: Value) -> Result<()> {
        let params = json!({"threadId": self.thread_id, "status": status});
        self.peer.notify("thread/status/changed", params).await
    }

    fn command_item(&self, call: &ToolCall, status: &str, output: Option<&str>) -> Value {
        json!({
            "type": "commandExecution",
            "id": call.id,
            "command": call.command,
            "cwd": self.cwd,
            "processId": null,
            "status": status,
            "commandActions": [{"type": "unknown", "command": call.command}],
            "aggregatedOutput": output,
            "exitCode": output.map(|_| 0),
            "durationMs": output.map(|_| 1),
        })
    }
}

/// Map a codex approval decision (v2 names, v1 names, or an object variant).
fn decision(result: &Value) -> Permission {
    match &result["decision"] {
        Value::String(s) => match s.as_str() {
            "accept" | "approved" => Permission::Allowed,
            "acceptForSession" | "approved_for_session" => Permission::AllowedAlways,
            "cancel" | "abort" => Permission::Cancelled,
            _ => Permission::Denied,
        },
        Value::Object(o) if o.keys().any(|k| k.starts_with("accept")) => Permission::AllowedAlways,
        _ => Permission::Denied,
    }
}

impl TurnIo for CodexIo {
    async fn chunk(&mut self, text: &str) -> Result<()> {
        let item_id = match &mut self.open {
            Some((id, so_far)) => {
                so_far.push_str(text);
                id.clone()
            }
            None => {
                let id = new_item_id("msg");
                let item = json!({"type": "agentMessage", "id": id, "text": ""});
                self.item("item/started", item).await?;
                self.open = Some((id.clone(), text.to_owned()));
                id
            }
        };
        let params = json!({"threadId": self.thread_id, "turnId": self.turn_id,
                            "itemId": item_id, "delta": text});
        self.peer.notify("item/agentMessage/delta", params).await
    }

    async fn raw_line(&mut self, line: &str) -> Result<()> {
        self.peer.out().line(line).await
    }

    async fn tool_started(&mut self, call: &ToolCall) -> Result<()> {
        self.close_message().await?;
        self.item("item/started", self.command_item(call, "inProgress", None))
            .await
    }

    async fn permission(&mut self, call: &ToolCall) -> Result<Permission> {
        self.active(&["waitingOnApproval"]).await?;
        let params = json!({
            "threadId": self.thread_id,
            "turnId": self.turn_id,
            "itemId": call.id,
            "reason": call.title,
            "command": call.command,
            "cwd": self.cwd,
            "commandActions": [{"type": "unknown", "command": call.command}],
        });
        let reply = self
            .peer
            .request("item/commandExecution/requestApproval", params)
            .await?;
        self.active(&[]).await?;
        let permission = reply.map(|r| decision(&r)).unwrap_or(Permission::Cancelled);
        if permission == Permission::Cancelled {
            self.token.cancel();
        }
        Ok(permission)
    }

    async fn tool_finished(&mut self, call: &ToolCall, end: &ToolEnd) -> Result<()> {
        let item = match end {
            ToolEnd::Completed { output } => self.command_item(call, "completed", Some(output)),
            ToolEnd::Declined => self.command_item(call, "declined", None),
            ToolEnd::Cancelled => self.command_item(call, "failed", None),
        };
        self.item("item/completed", item).await
    }

    async fn usage(&mut self, input: u64, output: u64) -> Result<()> {
        // The thread's running sum (`tokenUsage.total`) only grows, across processes too:
        // codex keeps it with the thread.
        let total = self.store.add_usage(&self.thread_id, input, output)?;
        let params = json!({"threadId": self.thread_id, "turnId": self.turn_id,
                            "tokenUsage": usage_json(total, input, output)});
        self.peer.notify("thread/tokenUsage/updated", params).await
    }

    async fn window(&mut self, percent: u8) -> Result<()> {
        let resets_at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() + 3600)
            .unwrap_or(0);
        let params = json!({"rateLimits": {
            "primary": {"usedPercent": percent, "windowDurationMins": 300, "resetsAt": resets_at},
            "secondary": {"usedPercent": 1, "windowDurationMins": 10080, "resetsAt": resets_at + 86_400},
            "credits": null, "planType": "plus"}});
        self.peer.notify("account/rateLimits/updated", params).await
    }

    async fn ask(&mut self, question: &str) -> Result<Option<String>> {
        self.close_message().await?;
        let params = json!({
            "threadId": self.thread_id,
            "turnId": self.turn_id,
            "itemId": new_item_id("ask"),
            "questions": [{
                "id": QUESTION_ID,
                "header": "Question",
                "question": question,
                "isOther": true,
                "isSecret": false,
                "options": null,
            }],
        });
        let reply = self
            .peer
            .request("item/tool/requestUserInput", params)
            .await?;
        let Ok(result) = reply else {
            return Ok(None);
        };
        let answers = &result["answers"];
        let entry = answers
            .get(QUESTION_ID)
            .or_else(|| answers.as_object().and_then(|m| m.values().next()));
        Ok(entry
            .and_then(|e| e["answers"].as_array())
            .and_then(|a| a.first())
            .and_then(Value::as_str)
            .map(str::to_owned))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions() {
        assert_eq!(
            decision(&json!({"decision": "accept"})),
            Permission::Allowed
        );
        assert_eq!(
            decision(&json!({"decision": "acceptForSession"})),
            Permission::AllowedAlways
        );
        assert_eq!(
            decision(&json!({"decision": "decline"})),
            Permission::Denied
        );
        assert_eq!(
            decision(&json!({"decision": "cancel"})),
            Permission::Cancelled
        );
        assert_eq!(
            decision(&json!({"decision": {"acceptWithExecpolicyAmendment": {}}})),
            Permission::AllowedAlways
        );
        assert_eq!(decision(&json!({})), Permission::Denied);
    }
}
