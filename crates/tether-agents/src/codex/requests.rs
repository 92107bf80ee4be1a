//! Server→client requests of `codex app-server` during a turn:
//! `item/commandExecution/requestApproval` and `item/fileChange/requestApproval` become
//! [`PermissionRequest`]s answered `{"decision": "accept" | "acceptForSession" | "decline" |
//! "cancel"}`; `item/tool/requestUserInput` becomes one [`QuestionRequest`] per question,
//! answered `{"answers": {<question id>: {"answers": [<text>]}}}`. Every other request gets
//! a JSON-RPC error at once, never silence.

use serde_json::{Map, Value, json};
use tether_proto::Decision;
use tokio::sync::{mpsc, oneshot};

use super::items::{self, str_field};
use super::state::Shared;
use crate::driver::{AgentEvent, PermissionReply, PermissionRequest, QuestionRequest};
use crate::jsonrpc::Connection;

/// The wire decision for a reply; `offered` is what the request offered.
pub(crate) fn decision(reply: PermissionReply, offered: &[Decision]) -> &'static str {
    match reply {
        PermissionReply::Decision(Decision::Allow) => "accept",
        PermissionReply::Decision(Decision::AllowAlways)
            if offered.contains(&Decision::AllowAlways) =>
        {
            "acceptForSession"
        }
        PermissionReply::Decision(Decision::AllowAlways) => "accept",
        PermissionReply::Decision(Decision::Deny) => "decline",
        PermissionReply::Cancelled => "cancel",
    }
}

/// Copies the non-null `keys` of `v`.
fn pick(v: &Value, keys: &[&str]) -> Map<String, Value> {
    keys.iter()
        .filter_map(|k| {
            v.get(*k)
                .filter(|x| !x.is_null())
                .map(|x| ((*k).to_owned(), x.clone()))
        })
        .collect()
}

/// Title, kind, detail and options of an approval request. `item` is the tool item the
/// request is about, when it was announced with `item/started`.
pub(crate) fn describe_approval(
    method: &str,
    params: &Value,
    item: Option<&Value>,
) -> (String, String, Value, Vec<Decision>) {
    let reason = str_field(params, "reason");
    if method == "item/fileChange/requestApproval" {
        let mut detail = pick(params, &["reason", "grantRoot"]);
        let title = match item {
            Some(item) => {
                detail.insert("paths".to_owned(), json!(items::paths(item)));
                if let Some(changes) = item.get("changes") {
                    detail.insert("changes".to_owned(), changes.clone());
                }
                items::title(item)
            }
            None => reason.unwrap_or_else(|| "edit files".to_owned()),
        };
        detail.insert("type".to_owned(), json!("fileChange"));
        let options = vec![Decision::Allow, Decision::AllowAlways, Decision::Deny];
        return (title, "edit".to_owned(), Value::Object(detail), options);
    }
    let mut detail = pick(
        params,
        &[
            "command",
            "cwd",
            "reason",
            "commandActions",
            "networkApprovalContext",
            "kind",
        ],
    );
    let command =
        str_field(params, "command").or_else(|| item.and_then(|i| str_field(i, "command")));
    if let Some(command) = &command {
        detail.insert("command".to_owned(), json!(command));
    }
    detail.insert("type".to_owned(), json!("commandExecution"));
    let title = command
        .or(reason)
        .unwrap_or_else(|| "run a command".to_owned());
    // A managed checkpoint takes one-time decisions only.
    let options = if params.get("kind").and_then(Value::as_str) == Some("humanCommand") {
        vec![Decision::Allow, Decision::Deny]
    } else {
        vec![Decision::Allow, Decision::AllowAlways, Decision::Deny]
    };
    (title, "execute".to_owned(), Value::Object(detail), options)
}

/// The text shown for one `requestUserInput` question.
pub(crate) fn question_text(question: &Value) -> String {
    let mut text = str_field(question, "question").unwrap_or_default();
    let labels: Vec<String> = question
        .get("options")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|o| str_field(o, "label"))
        .collect();
    if !labels.is_empty() {
        text.push_str(&format!("\nOptions: {}", labels.join(" / ")));
    }
    text
}

impl Shared {
    pub(crate) fn on_request(&self, conn: &Connection, id: Value, method: &str, params: Value) {
        let conn = conn.clone();
        match method {
            "item/commandExecution/requestApproval" | "item/fileChange/requestApproval" => {
                self.on_approval(conn, id, method, params)
            }
            "item/tool/requestUserInput" => self.on_user_input(conn, id, params),
            _ => {
                tracing::debug!(%method, "refusing Codex request");
                conn.refuse(id, format!("tether does not support {method}"));
            }
        }
    }

    /// The running turn's event sender and the tool item `params` refer to.
    fn turn_context(
        &self,
        params: &Value,
    ) -> Option<(mpsc::UnboundedSender<AgentEvent>, Option<Value>)> {
        let mut state = self.lock();
        let turn = Shared::turn_of(&mut state, params)?;
        let item = params
            .get("itemId")
            .and_then(Value::as_str)
            .and_then(|id| turn.items.get(id))
            .cloned();
        Some((turn.events.clone(), item))
    }

    fn on_approval(&self, conn: Connection, id: Value, method: &str, params: Value) {
        let (tx, rx) = oneshot::channel();
        let mut offered = Vec::new();
        if let Some((events, item)) = self.turn_context(&params) {
            let (title, kind, detail, options) = describe_approval(method, &params, item.as_ref());
            offered.clone_from(&options);
            let _ = events.send(AgentEvent::Permission(PermissionRequest {
                title,
                kind: Some(kind),
                detail: Some(detail),
                options,
                reply: tx,
            }));
        }
        let mut cancelled = self.cancels.watch();
        tokio::spawn(async move {
            let reply = cancelled
                .answer(rx)
                .await
                .unwrap_or(PermissionReply::Cancelled);
            let result = json!({"decision": decision(reply, &offered)});
            let _ = conn.respond(id, Ok(result)).await;
        });
    }

    fn on_user_input(&self, conn: Connection, id: Value, params: Value) {
        let events = self.turn_context(&params).map(|(events, _)| events);
        let questions: Vec<Value> = params
            .get("questions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut cancelled = self.cancels.watch();
        tokio::spawn(async move {
            let mut answers = Map::new();
            // One question at a time; the first unanswered one ends the asking.
            for question in &questions {
                let Some(events) = &events else { break };
                let (tx, rx) = oneshot::channel();
                let request = QuestionRequest {
                    prompt: question_text(question),
                    reply: tx,
                };
                if events.send(AgentEvent::Question(request)).is_err() {
                    break;
                }
                let answer = cancelled.answer(rx).await.flatten();
                let (Some(answer), Some(qid)) = (answer, str_field(question, "id")) else {
                    break;
                };
                answers.insert(qid, json!({"answers": [answer]}));
            }
            let _ = conn.respond(id, Ok(json!({"answers": answers}))).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::METHOD_NOT_FOUND;

    #[test]
    fn decisions_map_to_codex_words() {
        let all = [Decision::Allow, Decision::AllowAlways, Decision::Deny];
        let allow = |d| PermissionReply::Decision(d);
        assert_eq!(decision(allow(Decision::Allow), &all), "accept");
        assert_eq!(
            decision(allow(Decision::AllowAlways), &all),
            "acceptForSession"
        );
        assert_eq!(decision(allow(Decision::AllowAlways), &all[..1]), "accept");
        assert_eq!(decision(allow(Decision::Deny), &all), "decline");
        assert_eq!(decision(PermissionReply::Cancelled, &all), "cancel");
    }

    #[test]
    fn approvals_are_described() {
        let params = json!({"threadId": "t", "turnId": "u", "itemId": "c",
                            "command": "touch x", "cwd": "/w", "reason": null});
        let (title, kind, detail, options) =
            describe_approval("item/commandExecution/requestApproval", &params, None);
        assert_eq!((title.as_str(), kind.as_str()), ("touch x", "execute"));
        assert_eq!(detail["cwd"], "/w");
        assert_eq!(options.len(), 3);
        let item = json!({"type": "fileChange", "id": "f",
                          "changes": [{"path": "/w/a.txt", "kind": {"type": "add"}, "diff": ""}]});
        let (title, kind, detail, _) = describe_approval(
            "item/fileChange/requestApproval",
            &json!({"itemId": "f"}),
            Some(&item),
        );
        assert_eq!((title.as_str(), kind.as_str()), ("edit /w/a.txt", "edit"));
        assert_eq!(detail["paths"], json!(["/w/a.txt"]));
    }

    /// Sends `lines` as the agent and returns what tether answered, one value per line.
    async fn answers_to(lines: &[&str]) -> Vec<Value> {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
        let (ours, theirs) = tokio::io::duplex(64 * 1024);
        let (read, write) = tokio::io::split(ours);
        let shared = Shared::new();
        let on_close: crate::jsonrpc::OnClose = Box::new(|| {
            Box::pin(async {
                crate::jsonrpc::CloseInfo {
                    status: "closed".to_owned(),
                    stderr_tail: String::new(),
                }
            })
        });
        let options = crate::jsonrpc::Options {
            jsonrpc_field: false,
        };
        let _conn = Connection::spawn(read, write, options, shared.handler(), on_close);
        let (their_read, mut their_write) = tokio::io::split(theirs);
        for line in lines {
            their_write
                .write_all(format!("{line}\n").as_bytes())
                .await
                .unwrap();
        }
        let mut replies = BufReader::new(their_read).lines();
        let mut out = Vec::new();
        for _ in lines {
            let line = tokio::time::timeout(std::time::Duration::from_secs(5), replies.next_line())
                .await
                .expect("an answer")
                .unwrap()
                .unwrap();
            out.push(serde_json::from_str(&line).unwrap());
        }
        out
    }

    #[tokio::test]
    async fn other_requests_get_an_error_and_stray_approvals_are_cancelled() {
        let replies = answers_to(&[
            r#"{"id":0,"method":"item/permissions/requestApproval","params":{}}"#,
            r#"{"id":1,"method":"item/commandExecution/requestApproval","params":{"threadId":"t","turnId":"u","itemId":"c"}}"#,
        ])
        .await;
        let refused = replies.iter().find(|r| r["id"] == 0).unwrap();
        assert_eq!(refused["error"]["code"], METHOD_NOT_FOUND);
        assert!(refused.get("jsonrpc").is_none());
        let stray = replies.iter().find(|r| r["id"] == 1).unwrap();
        assert_eq!(stray["result"], json!({"decision": "cancel"}));
    }

    #[test]
    fn questions_list_their_options() {
        let q = json!({"id": "a", "header": "H", "question": "Colour?",
                       "options": [{"label": "red", "description": ""},
                                   {"label": "blue", "description": ""}]});
        assert_eq!(question_text(&q), "Colour?\nOptions: red / blue");
    }
}
