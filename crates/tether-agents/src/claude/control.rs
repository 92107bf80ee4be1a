//! Control requests from claude: `can_use_tool` → [`PermissionRequest`] (or, for the
//! `AskUserQuestion` tool, one [`QuestionRequest`] per question), `elicitation` →
//! [`QuestionRequest`]. Every other subtype is answered with an error at once, never left
//! unanswered. A request claude withdraws (`control_cancel_request`) is not answered.

use std::future::Future;
use std::sync::Arc;

use serde_json::{Map, Value, json};
use tether_proto::Decision;
use tokio::sync::oneshot;

use super::map;
use super::state::Shared;
use super::wire::Link;
use crate::driver::{AgentEvent, PermissionReply, PermissionRequest, QuestionRequest};

/// The deny message claude passes on to the model when the person says no.
pub(crate) const DENIED: &str = "denied by the person";
const CANCELLED: &str = "the permission request was cancelled";

pub(crate) fn on_request(shared: &Arc<Shared>, link: &Link, message: Map<String, Value>) {
    let id = message.get("request_id").cloned().unwrap_or(Value::Null);
    let request = message.get("request").cloned().unwrap_or(Value::Null);
    let subtype = request
        .get("subtype")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let tool = request.get("tool_name").and_then(Value::as_str);
    match (subtype.as_str(), tool) {
        ("can_use_tool", Some("AskUserQuestion")) => ask(shared, link, id, request),
        ("can_use_tool", _) => permission(shared, link, id, request),
        ("elicitation", _) => elicitation(shared, link, id, request),
        (other, _) => {
            tracing::debug!(subtype = other, "refusing claude control request");
            let link = link.clone();
            let error = format!("unsupported: {other}");
            tokio::spawn(async move {
                let _ = link.respond(&id, Err(error)).await;
            });
        }
    }
}

/// Waits for `answer` unless the turn is cancelled (`Some(None)`) or claude withdraws the
/// request (`None`: do not answer).
fn wait<T, F>(
    shared: &Arc<Shared>,
    id: &Value,
    answer: F,
) -> impl Future<Output = Option<Option<T>>> + Send + 'static
where
    T: Send + 'static,
    F: Future<Output = Option<T>> + Send + 'static,
{
    let (withdraw_tx, withdraw_rx) = oneshot::channel();
    let key = id.as_str().map(str::to_owned);
    if let Some(key) = &key {
        shared.lock().withdraw.insert(key.clone(), withdraw_tx);
    }
    let mut cancelled = shared.cancels.watch();
    let shared = Arc::clone(shared);
    async move {
        let outcome = tokio::select! {
            answer = answer => Some(answer),
            () = cancelled.cancelled() => Some(None),
            Ok(()) = withdraw_rx => None,
        };
        if let Some(key) = key {
            shared.lock().withdraw.remove(&key);
        }
        outcome
    }
}

fn permission(shared: &Arc<Shared>, link: &Link, id: Value, request: Value) {
    let tool = request
        .get("tool_name")
        .and_then(Value::as_str)
        .unwrap_or("tool")
        .to_owned();
    let input = request.get("input").cloned().unwrap_or(json!({}));
    let suggestions = request
        .get("permission_suggestions")
        .filter(|s| s.as_array().is_some_and(|a| !a.is_empty()))
        .cloned();
    let mut options = vec![Decision::Allow];
    if suggestions.is_some() {
        options.push(Decision::AllowAlways);
    }
    options.push(Decision::Deny);
    let (tx, rx) = oneshot::channel();
    if let Some(events) = shared.turn_events() {
        let mut detail = json!({"tool": tool, "input": input});
        for key in [
            "tool_use_id",
            "decision_reason",
            "blocked_path",
            "permission_suggestions",
        ] {
            if let Some(v) = request.get(key).filter(|v| !v.is_null()) {
                detail[key] = v.clone();
            }
        }
        let _ = events.send(AgentEvent::Permission(PermissionRequest {
            title: map::tool_title(&tool, &input),
            kind: Some(map::tool_kind(&tool).to_owned()),
            detail: Some(detail),
            options,
            reply: tx,
        }));
    }
    let waiting = wait(shared, &id, async { rx.await.ok() });
    let link = link.clone();
    tokio::spawn(async move {
        let Some(reply) = waiting.await else {
            return;
        };
        let response = match reply.unwrap_or(PermissionReply::Cancelled) {
            PermissionReply::Decision(Decision::Allow) => {
                json!({"behavior": "allow", "updatedInput": input})
            }
            PermissionReply::Decision(Decision::AllowAlways) => match suggestions {
                Some(rules) => json!({"behavior": "allow", "updatedInput": input,
                                      "updatedPermissions": rules}),
                None => json!({"behavior": "allow", "updatedInput": input}),
            },
            PermissionReply::Decision(Decision::Deny) => {
                json!({"behavior": "deny", "message": DENIED})
            }
            PermissionReply::Cancelled => json!({"behavior": "deny", "message": CANCELLED}),
        };
        let _ = link.respond(&id, Ok(response)).await;
    });
}

/// The `AskUserQuestion` tool: every question goes to the person; all answered → allow
/// with `answers`, otherwise deny.
fn ask(shared: &Arc<Shared>, link: &Link, id: Value, request: Value) {
    let input = request.get("input").cloned().unwrap_or(json!({}));
    let questions: Vec<String> = input
        .get("questions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|q| q.get("question").and_then(Value::as_str))
        .map(str::to_owned)
        .collect();
    let mut replies = Vec::new();
    if let Some(events) = shared.turn_events() {
        for question in &questions {
            let (tx, rx) = oneshot::channel();
            let _ = events.send(AgentEvent::Question(QuestionRequest {
                prompt: question.clone(),
                reply: tx,
            }));
            replies.push(rx);
        }
    }
    let asked = !replies.is_empty() && replies.len() == questions.len();
    let answers = async move {
        let mut answers = Map::new();
        for (question, rx) in questions.into_iter().zip(replies) {
            answers.insert(question, Value::String(rx.await.ok().flatten()?));
        }
        asked.then_some(answers)
    };
    let waiting = wait(shared, &id, answers);
    let link = link.clone();
    tokio::spawn(async move {
        let Some(answers) = waiting.await else {
            return;
        };
        let response = match answers {
            Some(answers) => {
                let mut updated = input;
                updated["answers"] = Value::Object(answers);
                json!({"behavior": "allow", "updatedInput": updated})
            }
            None => json!({"behavior": "deny", "message": "the person did not answer"}),
        };
        let _ = link.respond(&id, Ok(response)).await;
    });
}

/// An MCP server's elicitation: a form with one field becomes a question; URL mode is
/// declined.
fn elicitation(shared: &Arc<Shared>, link: &Link, id: Value, request: Value) {
    let form = request.get("mode").and_then(Value::as_str) != Some("url");
    let field = request
        .get("property_order")
        .and_then(Value::as_array)
        .and_then(|o| o.first())
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| {
            request
                .pointer("/requested_schema/properties")
                .and_then(Value::as_object)
                .and_then(|p| p.keys().next().cloned())
        });
    let (tx, rx) = oneshot::channel();
    let events = if form { shared.turn_events() } else { None };
    if let Some(events) = events {
        let prompt = request
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let _ = events.send(AgentEvent::Question(QuestionRequest { prompt, reply: tx }));
    }
    let waiting = wait(shared, &id, async { rx.await.ok().flatten() });
    let link = link.clone();
    tokio::spawn(async move {
        let Some(answer) = waiting.await else {
            return;
        };
        let response = match (answer, field, form) {
            (Some(answer), Some(field), _) => {
                json!({"action": "accept", "content": { field: answer }})
            }
            (_, _, false) => json!({"action": "decline"}),
            _ => json!({"action": "cancel"}),
        };
        let _ = link.respond(&id, Ok(response)).await;
    });
}
