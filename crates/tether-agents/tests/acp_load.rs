//! The ACP driver against a tiny scripted agent that supports `session/load` but not
//! `session/resume` (the fake agent offers both): the replay is discarded, a replay under
//! another session id fails the resume, models are set when offered, and client-side
//! methods (`fs/*`) are refused with "method not found"; and (mode `extras`) messages
//! with more than the ACP schema knows — unknown fields, `_meta`, malformed optional
//! fields, unknown update kinds, content types, tool kinds and stop reasons — are still
//! understood.
//!
//! The scripted agent is this test binary itself, re-run with `TETHER_TEST_AGENT` set;
//! the test harness's own stdout lines are not JSON and the driver skips them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::time::Duration;

use serde_json::{Value, json};
use tether_agents::{
    AcpDriver, AgentDriver, AgentError, AgentSpec, DriverKind, StartRequest, StopReason,
};
use tokio::sync::mpsc;

const LIMIT: Duration = Duration::from_secs(20);

/// The scripted agent (a no-op unless run by the tests below).
#[test]
fn scripted_acp_agent() {
    let Ok(mode) = std::env::var("TETHER_TEST_AGENT") else {
        return;
    };
    let mut out = std::io::stdout();
    // End the harness's unterminated "test scripted_acp_agent ... " line.
    writeln!(out).unwrap();
    let mut send = |v: Value| {
        writeln!(out, "{v}").unwrap();
        out.flush().unwrap();
    };
    let mut model = "default".to_owned();
    let mut fs_reply = Value::Null;
    let mut lines = std::io::stdin().lock().lines();
    while let Some(Ok(line)) = lines.next() {
        let msg: Value = serde_json::from_str(&line).unwrap();
        let id = msg["id"].clone();
        let params = &msg["params"];
        match msg["method"].as_str() {
            Some("initialize") => {
                let load = mode != "noload";
                send(
                    json!({"jsonrpc":"2.0","id":id,"result":{"protocolVersion":1,
                    "agentCapabilities":{"loadSession":load, "futureCapability":{"x":1},
                        "promptCapabilities":"bogus"},
                    "authMethods":[{"weird":1}], "_meta":{"vendor":true}, "later":[1]}}),
                );
            }
            Some("session/prompt") if mode == "extras" => {
                for update in extra_updates() {
                    send(json!({"jsonrpc":"2.0","method":"session/update","params":{
                        "sessionId":"S1","_meta":{"vendor":1},"later":true,"update":update}}));
                }
                send(
                    json!({"jsonrpc":"2.0","id":id,"result":{"stopReason":"paused_for_lunch",
                    "usage":{"inputTokens":3},"_meta":{}}}),
                );
            }
            Some("session/load") => {
                let sid = if mode == "other" { "S2" } else { "S1" };
                send(
                    json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":sid,
                    "update":{"sessionUpdate":"agent_message_chunk",
                    "content":{"type":"text","text":"(old)"}}}}),
                );
                send(
                    json!({"jsonrpc":"2.0","id":id,"result":{"models":{"currentModelId":"default",
                    "availableModels":[{"modelId":"default","name":"D"},{"modelId":"big","name":"B"}]}}}),
                );
            }
            Some("session/set_model") => {
                model = params["modelId"].as_str().unwrap().to_owned();
                send(json!({"jsonrpc":"2.0","id":id,"result":{}}));
            }
            Some("session/prompt") => {
                send(
                    json!({"jsonrpc":"2.0","id":"fs-1","method":"fs/read_text_file",
                    "params":{"sessionId":"S1","path":"/etc/passwd"}}),
                );
                // Wait for the refusal before ending the turn.
                while let Some(Ok(line)) = lines.next() {
                    let reply: Value = serde_json::from_str(&line).unwrap();
                    if reply["id"] == "fs-1" {
                        fs_reply = reply["error"]["code"].clone();
                        break;
                    }
                }
                send(
                    json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"S1",
                    "update":{"sessionUpdate":"agent_thought_chunk",
                    "content":{"type":"text","text":"hmm"}}}}),
                );
                let text = format!("model={model} fs={fs_reply}");
                send(
                    json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"S1",
                    "update":{"sessionUpdate":"agent_message_chunk",
                    "content":{"type":"text","text":text}}}}),
                );
                send(json!({"jsonrpc":"2.0","id":id,"result":{"stopReason":"max_tokens"}}));
            }
            _ => {}
        }
    }
}

/// What the `extras` agent streams in its turn: two chunks shown ("a", "b") and a tool
/// call around them, all with fields the schema does not know, and two updates that
/// cannot be shown.
fn extra_updates() -> Vec<Value> {
    vec![
        json!({"sessionUpdate":"agent_message_chunk","messageId":7,"future":1,
            "content":{"type":"text","text":"a","annotations":{"priority":"bogus"},"x":2}}),
        json!({"sessionUpdate":"something_new","content":{"type":"text","text":"NOT SHOWN"}}),
        json!({"sessionUpdate":"agent_message_chunk",
            "content":{"type":"hologram","text":"NOT SHOWN"}}),
        json!({"sessionUpdate":"tool_call","toolCallId":"t1","title":"Run","kind":"teleport",
            "status":"pending","rawInput":{"cmd":"ls"},"vendorField":{"a":1},
            "locations":"bogus"}),
        json!({"sessionUpdate":"tool_call_update","toolCallId":"t1","status":"completed",
            "content":[{"type":"content","content":{"type":"text","text":"out"}}]}),
        json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"b"}}),
    ]
}

fn request(mode: &str, model: Option<&str>) -> StartRequest {
    let exe = std::env::current_exe().unwrap();
    StartRequest {
        spec: AgentSpec {
            name: "scripted".to_owned(),
            driver: DriverKind::Acp,
            command: exe.display().to_string(),
            args: [
                "scripted_acp_agent",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ]
            .map(str::to_owned)
            .to_vec(),
            pass_env: Vec::new(),
            env: BTreeMap::from([("TETHER_TEST_AGENT".to_owned(), mode.to_owned())]),
        },
        cwd: std::env::temp_dir(),
        model: model.map(str::to_owned),
        resume: Some("S1".to_owned()),
        mcp_servers: Vec::new(),
        ceiling: None,
    }
}

#[tokio::test]
async fn load_discards_replay_sets_model_and_refuses_fs() {
    let driver = AcpDriver::default();
    let session = tokio::time::timeout(LIMIT, driver.start(request("load", Some("big"))))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(session.external_id(), "S1");
    let (tx, mut rx) = mpsc::unbounded_channel();
    let outcome = tokio::time::timeout(LIMIT, session.prompt("hi", tx))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(outcome.stop_reason, StopReason::MaxTokens);
    assert_eq!(outcome.text, "model=big fs=-32601");
    let mut thoughts = 0;
    while let Ok(event) = rx.try_recv() {
        if let tether_agents::AgentEvent::ThoughtDelta(t) = event {
            assert_eq!(t, "hmm");
            thoughts += 1;
        }
    }
    assert_eq!(thoughts, 1);
    tokio::time::timeout(LIMIT, session.shutdown())
        .await
        .unwrap();
}

#[tokio::test]
async fn load_under_another_id_or_no_load_is_unavailable() {
    for mode in ["other", "noload"] {
        let driver = AcpDriver::default();
        match tokio::time::timeout(LIMIT, driver.start(request(mode, None)))
            .await
            .unwrap()
        {
            Err(AgentError::ResumeUnavailable { external_id, .. }) => {
                assert_eq!(external_id, "S1")
            }
            Err(other) => panic!("{mode}: {other}"),
            Ok(_) => panic!("{mode}: resumed"),
        }
    }
}

#[tokio::test]
async fn more_than_the_schema_knows_is_still_understood() {
    use tether_agents::AgentEvent;
    let driver = AcpDriver::default();
    let session = tokio::time::timeout(LIMIT, driver.start(request("extras", None)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(session.external_id(), "S1");
    let (tx, mut rx) = mpsc::unbounded_channel();
    let outcome = tokio::time::timeout(LIMIT, session.prompt("hi", tx))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(outcome.text, "ab");
    assert_eq!(
        outcome.stop_reason,
        StopReason::Other("paused_for_lunch".to_owned())
    );
    assert_eq!(outcome.usage, Some(json!({"inputTokens": 3})));
    let mut events = Vec::new();
    while let Ok(event) = rx.try_recv() {
        events.push(event);
    }
    assert_eq!(events.len(), 5, "{events:?}");
    // The reply's usage, as a report (issue 29).
    assert!(
        matches!(&events[4], AgentEvent::Usage(u) if u.tokens.input == 3),
        "{events:?}"
    );
    assert!(
        matches!(&events[0], AgentEvent::MessageDelta(t) if t == "a"),
        "{events:?}"
    );
    match &events[1] {
        AgentEvent::ToolCall {
            id,
            title,
            kind,
            status,
            detail,
        } => {
            assert_eq!((id.as_str(), title.as_str()), ("t1", "Run"));
            // ToolKind falls back to `other` for a kind the schema does not know.
            assert_eq!(kind.as_deref(), Some("other"));
            assert_eq!(status.as_deref(), Some("pending"));
            let detail = detail.as_ref().unwrap();
            assert_eq!(detail["vendorField"], json!({"a": 1}), "{detail}");
            assert_eq!(detail["rawInput"], json!({"cmd": "ls"}), "{detail}");
        }
        other => panic!("{other:?}"),
    }
    match &events[2] {
        AgentEvent::ToolCallUpdate { id, status, .. } => {
            assert_eq!((id.as_str(), status.as_deref()), ("t1", Some("completed")));
        }
        other => panic!("{other:?}"),
    }
    assert!(
        matches!(&events[3], AgentEvent::MessageDelta(t) if t == "b"),
        "{events:?}"
    );
    tokio::time::timeout(LIMIT, session.shutdown())
        .await
        .unwrap();
}
