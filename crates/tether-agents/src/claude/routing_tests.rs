//! The reader's routing against a scripted peer speaking real claude's shapes over an
//! in-memory pipe: partial messages shown once, tool calls and results, the session-id
//! check, every control request answered (or withdrawn).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tether_proto::Decision;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines};
use tokio::sync::{mpsc, oneshot};

use super::state::{Shared, Turn, TurnEnd};
use super::wire::Link;
use crate::driver::{AgentEvent, PermissionReply};
use crate::jsonrpc::{CloseInfo, OnClose};

const LIMIT: Duration = Duration::from_secs(5);

/// The claude side of the pipe.
struct Peer {
    out: DuplexStream,
    input: Lines<BufReader<DuplexStream>>,
}

impl Peer {
    async fn say(&mut self, message: Value) {
        let mut line = serde_json::to_vec(&message).unwrap();
        line.push(b'\n');
        self.out.write_all(&line).await.unwrap();
    }

    async fn heard(&mut self) -> Value {
        let line = tokio::time::timeout(LIMIT, self.input.next_line())
            .await
            .expect("nothing written")
            .unwrap()
            .expect("input ended");
        serde_json::from_str(&line).unwrap()
    }
}

fn setup() -> (Arc<Shared>, Link, Peer) {
    let shared = Shared::new("sid".to_owned());
    let (driver_out, peer_in) = tokio::io::duplex(1 << 16);
    let (peer_out, driver_in) = tokio::io::duplex(1 << 16);
    let on_close: OnClose = Box::new(|| {
        Box::pin(async {
            CloseInfo {
                status: "gone".to_owned(),
                stderr_tail: String::new(),
            }
        })
    });
    let link = Link::spawn(driver_in, driver_out, shared.handler(), on_close);
    let peer = Peer {
        out: peer_out,
        input: BufReader::new(peer_in).lines(),
    };
    (shared, link, peer)
}

fn begin(
    shared: &Shared,
) -> (
    mpsc::UnboundedReceiver<AgentEvent>,
    oneshot::Receiver<TurnEnd>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let (done_tx, done) = oneshot::channel();
    shared.lock().turn = Some(Turn::new(tx, done_tx));
    (rx, done)
}

async fn next(rx: &mut mpsc::UnboundedReceiver<AgentEvent>) -> AgentEvent {
    tokio::time::timeout(LIMIT, rx.recv())
        .await
        .expect("no event")
        .expect("events closed")
}

fn describe(event: &AgentEvent) -> String {
    match event {
        AgentEvent::MessageDelta(t) => format!("delta:{t}"),
        AgentEvent::ThoughtDelta(t) => format!("thought:{t}"),
        AgentEvent::ToolCall { id, title, .. } => format!("tool:{id}:{title}"),
        AgentEvent::ToolCallUpdate { id, status, .. } => {
            format!("update:{id}:{}", status.clone().unwrap_or_default())
        }
        AgentEvent::Permission(p) => format!("permission:{}", p.title),
        AgentEvent::Question(q) => format!("question:{}", q.prompt),
        AgentEvent::Usage(u) => format!("usage:{}", u.tokens.total()),
        AgentEvent::Window(w) => format!("window:{}:{}", w.window, w.used_percent),
    }
}

fn partial(event: Value, parent: Value) -> Value {
    json!({"type": "stream_event", "event": event, "session_id": "sid",
           "parent_tool_use_id": parent, "uuid": "u"})
}

fn delta(text: &str) -> Value {
    json!({"type": "content_block_delta", "index": 0,
           "delta": {"type": "text_delta", "text": text}})
}

fn assistant(id: &str, content: Value) -> Value {
    json!({"type": "assistant", "session_id": "sid", "parent_tool_use_id": null,
           "message": {"id": id, "role": "assistant", "content": content}})
}

#[tokio::test]
async fn partial_messages_are_shown_once() {
    let (shared, _link, mut peer) = setup();
    let (mut rx, done) = begin(&shared);
    peer.say(json!({"type": "system", "subtype": "init", "session_id": "sid"}))
        .await;
    peer.say(partial(
        json!({"type": "message_start", "message": {"id": "m1"}}),
        Value::Null,
    ))
    .await;
    peer.say(partial(
        json!({"type": "content_block_delta",
                       "delta": {"type": "thinking_delta", "thinking": "hmm"}}),
        Value::Null,
    ))
    .await;
    peer.say(partial(delta("Hel"), Value::Null)).await;
    peer.say(partial(delta("lo"), Value::Null)).await;
    // A sub-agent's text is not the turn's.
    peer.say(partial(delta("inner"), json!("toolu_task"))).await;
    peer.say(assistant(
        "m1",
        json!([{"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "Hello"},
               {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}]),
    ))
    .await;
    peer.say(
        json!({"type": "user", "session_id": "sid", "message": {"role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.txt"}]}}),
    )
    .await;
    // Not streamed (no message_start): its text is shown from the full message.
    peer.say(assistant("m2", json!([{"type": "text", "text": " more"}])))
        .await;
    peer.say(
        json!({"type": "result", "subtype": "success", "is_error": false,
                    "result": " more", "session_id": "sid", "usage": {"output_tokens": 7}}),
    )
    .await;
    let mut seen = Vec::new();
    for _ in 0..6 {
        seen.push(describe(&next(&mut rx).await));
    }
    assert_eq!(
        seen,
        [
            "thought:hmm",
            "delta:Hel",
            "delta:lo",
            "tool:t1:Bash: ls",
            "update:t1:completed",
            "delta: more"
        ]
    );
    let TurnEnd::Result(result) = tokio::time::timeout(LIMIT, done).await.unwrap().unwrap() else {
        panic!("not a result");
    };
    let turn = shared.lock().turn.take().unwrap();
    let outcome = super::map::outcome(&result, turn.text, false).unwrap();
    assert_eq!(outcome.text, "Hello more");
    assert_eq!(outcome.usage.unwrap()["output_tokens"], 7);
}

#[tokio::test]
async fn another_session_id_ends_the_turn_before_anything_is_shown() {
    let (shared, _link, mut peer) = setup();
    let (mut rx, done) = begin(&shared);
    peer.say(json!({"type": "system", "subtype": "init", "session_id": "other"}))
        .await;
    peer.say(assistant("m1", json!([{"type": "text", "text": "hi"}])))
        .await;
    match tokio::time::timeout(LIMIT, done).await.unwrap().unwrap() {
        TurnEnd::Mismatch(other) => assert_eq!(other, "other"),
        other => panic!("{other:?}"),
    }
    assert!(rx.try_recv().is_err());
    assert_eq!(shared.lock().mismatch.as_deref(), Some("other"));
}

#[tokio::test]
async fn control_requests_are_always_answered() {
    let (shared, _link, mut peer) = setup();
    let (mut rx, _done) = begin(&shared);

    peer.say(json!({"type": "control_request", "request_id": "h1",
                    "request": {"subtype": "hook_callback", "callback_id": "x"}}))
        .await;
    assert_eq!(
        peer.heard().await,
        json!({"type": "control_response", "response": {"subtype": "error",
               "request_id": "h1", "error": "unsupported: hook_callback"}})
    );

    // Allow always hands back the suggested rules.
    let rules = json!([{"type": "addRules", "rules": [{"toolName": "Bash"}],
                        "behavior": "allow", "destination": "localSettings"}]);
    peer.say(
        json!({"type": "control_request", "request_id": "p1", "request": {
        "subtype": "can_use_tool", "tool_name": "Bash", "input": {"command": "touch f"},
        "permission_suggestions": rules, "tool_use_id": "t1"}}),
    )
    .await;
    let AgentEvent::Permission(p) = next(&mut rx).await else {
        panic!("not a permission");
    };
    assert_eq!(p.title, "Bash: touch f");
    assert_eq!(
        p.options,
        [Decision::Allow, Decision::AllowAlways, Decision::Deny]
    );
    p.reply
        .send(PermissionReply::Decision(Decision::AllowAlways))
        .unwrap();
    assert_eq!(
        peer.heard().await["response"],
        json!({"subtype": "success", "request_id": "p1", "response": {"behavior": "allow",
               "updatedInput": {"command": "touch f"}, "updatedPermissions": rules}})
    );

    // Withdrawn by claude: never answered.
    peer.say(
        json!({"type": "control_request", "request_id": "p2", "request": {
        "subtype": "can_use_tool", "tool_name": "Write", "input": {"file_path": "/x"}}}),
    )
    .await;
    let AgentEvent::Permission(p) = next(&mut rx).await else {
        panic!("not a permission");
    };
    assert_eq!(p.options, [Decision::Allow, Decision::Deny]);
    peer.say(json!({"type": "control_cancel_request", "request_id": "p2"}))
        .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let _ = p.reply.send(PermissionReply::Decision(Decision::Allow));

    // An MCP elicitation is a question; the answer fills the form's field.
    peer.say(
        json!({"type": "control_request", "request_id": "e1", "request": {
        "subtype": "elicitation", "mcp_server_name": "srv", "message": "Your name?",
        "mode": "form", "requested_schema": {"type": "object",
            "properties": {"name": {"type": "string"}}}}}),
    )
    .await;
    let AgentEvent::Question(q) = next(&mut rx).await else {
        panic!("not a question");
    };
    assert_eq!(q.prompt, "Your name?");
    q.reply.send(Some("Ada".to_owned())).unwrap();
    // The next line is the elicitation's answer: nothing was written for p2.
    assert_eq!(
        peer.heard().await["response"],
        json!({"subtype": "success", "request_id": "e1",
               "response": {"action": "accept", "content": {"name": "Ada"}}})
    );

    // AskUserQuestion: one question per entry, answered into `answers`.
    let input = json!({"questions": [{"question": "Colour?", "header": "C", "options": [],
                                      "multiSelect": false}]});
    peer.say(
        json!({"type": "control_request", "request_id": "q1", "request": {
        "subtype": "can_use_tool", "tool_name": "AskUserQuestion", "input": input}}),
    )
    .await;
    let AgentEvent::Question(q) = next(&mut rx).await else {
        panic!("not a question");
    };
    assert_eq!(q.prompt, "Colour?");
    q.reply.send(Some("blue".to_owned())).unwrap();
    let mut updated = input.clone();
    updated["answers"] = json!({"Colour?": "blue"});
    assert_eq!(
        peer.heard().await["response"]["response"],
        json!({"behavior": "allow", "updatedInput": updated})
    );

    // Cancelling the turn denies what is still pending.
    peer.say(
        json!({"type": "control_request", "request_id": "p3", "request": {
        "subtype": "can_use_tool", "tool_name": "Bash", "input": {"command": "rm x"}}}),
    )
    .await;
    let _pending = next(&mut rx).await;
    shared.cancels.cancel_all();
    let answer = peer.heard().await;
    assert_eq!(answer["response"]["request_id"], "p3");
    assert_eq!(answer["response"]["response"]["behavior"], "deny");
}
