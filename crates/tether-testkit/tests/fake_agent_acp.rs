//! The fake agent's ACP v1 dialect, driven over real pipes.

mod fake_agent_support;

use anyhow::{Result, ensure};
use fake_agent_support::{Agent, is_response};
use serde_json::{Value, json};

async fn initialize(agent: &mut Agent) -> Result<Value> {
    agent
        .send(json!({"jsonrpc":"2.0","id":0,"method":"initialize",
            "params":{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":false}}}}))
        .await?;
    let (resp, _) = agent.recv_until(|v| is_response(v, &json!(0))).await?;
    Ok(resp["result"].clone())
}

async fn new_session(agent: &mut Agent) -> Result<String> {
    agent
        .send(json!({"jsonrpc":"2.0","id":"new","method":"session/new",
            "params":{"cwd":"/tmp","mcpServers":[]}}))
        .await?;
    let (resp, _) = agent.recv_until(|v| is_response(v, &json!("new"))).await?;
    let sid = resp["result"]["sessionId"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    ensure!(!sid.is_empty(), "no sessionId in {resp}");
    Ok(sid)
}

/// Agent text streamed in `updates` for session `sid`.
fn agent_text(updates: &[Value], sid: &str) -> String {
    updates
        .iter()
        .filter(|u| u["method"] == "session/update" && u["params"]["sessionId"] == sid)
        .filter(|u| u["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|u| u["params"]["update"]["content"]["text"].as_str())
        .collect()
}

/// Send a prompt and read to its response: (response, everything before it).
async fn prompt(agent: &mut Agent, id: i64, sid: &str, text: &str) -> Result<(Value, Vec<Value>)> {
    agent
        .send(json!({"jsonrpc":"2.0","id":id,"method":"session/prompt",
            "params":{"sessionId":sid,"prompt":[{"type":"text","text":text}]}}))
        .await?;
    agent.recv_until(|v| is_response(v, &json!(id))).await
}

#[tokio::test]
async fn remembers_across_prompts_and_processes() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut agent = Agent::spawn(dir.path(), &[], &[])?;
    let init = initialize(&mut agent).await?;
    ensure!(init["protocolVersion"] == 1, "{init}");
    ensure!(init["agentCapabilities"]["loadSession"] == true, "{init}");
    let sid = new_session(&mut agent).await?;

    let (resp, updates) = prompt(&mut agent, 1, &sid, "a").await?;
    ensure!(resp["result"]["stopReason"] == "end_turn", "{resp}");
    ensure!(resp["jsonrpc"] == "2.0", "{resp}");
    assert_eq!(agent_text(&updates, &sid), "echo: a\nremembers 0: []");

    let (resp, updates) = prompt(&mut agent, 2, &sid, "  b ").await?;
    ensure!(resp["result"]["stopReason"] == "end_turn", "{resp}");
    assert_eq!(agent_text(&updates, &sid), "echo: b\nremembers 1: [\"a\"]");
    ensure!(agent.close().await?.success());
    ensure!(dir.path().join(format!("{sid}.json")).is_file());

    let mut agent = Agent::spawn(dir.path(), &["--dialect", "acp"], &[])?;
    initialize(&mut agent).await?;
    agent
        .send(json!({"jsonrpc":"2.0","id":5,"method":"session/load",
            "params":{"sessionId":sid,"cwd":"/tmp","mcpServers":[]}}))
        .await?;
    let (resp, replay) = agent.recv_until(|v| is_response(v, &json!(5))).await?;
    ensure!(resp.get("error").is_none(), "{resp}");
    let users: Vec<&str> = replay
        .iter()
        .filter(|u| u["params"]["update"]["sessionUpdate"] == "user_message_chunk")
        .filter_map(|u| u["params"]["update"]["content"]["text"].as_str())
        .collect();
    assert_eq!(users, ["a", "b"]);

    let (resp, updates) = prompt(&mut agent, 6, &sid, "c").await?;
    ensure!(resp["result"]["stopReason"] == "end_turn", "{resp}");
    assert_eq!(
        agent_text(&updates, &sid),
        "echo: c\nremembers 2: [\"a\",\"b\"]"
    );
    Ok(())
}

#[tokio::test]
async fn errors_for_unknown_sessions_and_methods() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut agent = Agent::spawn(dir.path(), &[], &[])?;
    initialize(&mut agent).await?;
    agent
        .send(json!({"jsonrpc":"2.0","id":1,"method":"session/load",
            "params":{"sessionId":"nope","cwd":"/tmp","mcpServers":[]}}))
        .await?;
    let (resp, _) = agent.recv_until(|v| is_response(v, &json!(1))).await?;
    // Answered like gemini: "Internal error", the reason in `data`.
    ensure!(resp["error"]["code"] == -32603, "{resp}");
    ensure!(resp["error"]["message"] == "Internal error", "{resp}");
    ensure!(resp["error"]["data"] == "session not found: nope", "{resp}");

    let (resp, _) = prompt(&mut agent, 2, "nope", "hi").await?;
    ensure!(resp["error"]["code"] == -32002, "{resp}");

    agent
        .send(json!({"jsonrpc":"2.0","id":3,"method":"bogus/method","params":{}}))
        .await?;
    let (resp, _) = agent.recv_until(|v| is_response(v, &json!(3))).await?;
    ensure!(resp["error"]["code"] == -32601, "{resp}");

    let sid = new_session(&mut agent).await?;
    let (resp, _) = prompt(&mut agent, 4, &sid, "fail").await?;
    ensure!(resp["error"]["code"] == -32603, "{resp}");
    ensure!(
        resp["error"]["message"] == "fake failure as asked",
        "{resp}"
    );

    let (resp, updates) = prompt(&mut agent, 5, &sid, "garbage").await?;
    ensure!(resp["result"]["stopReason"] == "end_turn", "{resp}");
    assert_eq!(agent.garbage.len(), 3);
    assert_eq!(
        agent_text(&updates, &sid),
        "garbage done\nremembers 1: [\"fail\"]"
    );
    Ok(())
}

#[tokio::test]
async fn permission_allowed() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut agent = Agent::spawn(dir.path(), &[], &[])?;
    initialize(&mut agent).await?;
    let sid = new_session(&mut agent).await?;
    agent
        .send(json!({"jsonrpc":"2.0","id":7,"method":"session/prompt",
            "params":{"sessionId":sid,"prompt":[{"type":"text","text":"approve run the tests"}]}}))
        .await?;
    let (request, before) = agent
        .recv_until(|v| v["method"] == "session/request_permission")
        .await?;
    ensure!(
        before
            .iter()
            .any(|u| u["params"]["update"]["sessionUpdate"] == "tool_call"),
        "no tool_call before the permission request: {before:?}"
    );
    let params = &request["params"];
    ensure!(params["sessionId"] == sid.as_str(), "{request}");
    ensure!(params["toolCall"]["title"] == "run the tests", "{request}");
    ensure!(params["toolCall"]["kind"] == "execute", "{request}");
    ensure!(params["options"][0]["optionId"] == "allow", "{request}");
    ensure!(request["id"].is_i64(), "{request}");
    agent
        .send(json!({"jsonrpc":"2.0","id":request["id"],
            "result":{"outcome":{"outcome":"selected","optionId":"allow"}}}))
        .await?;
    let (resp, updates) = agent.recv_until(|v| is_response(v, &json!(7))).await?;
    ensure!(resp["result"]["stopReason"] == "end_turn", "{resp}");
    ensure!(
        updates.iter().any(|u| {
            let u = &u["params"]["update"];
            u["sessionUpdate"] == "tool_call_update" && u["status"] == "completed"
        }),
        "no completed tool_call_update: {updates:?}"
    );
    assert_eq!(
        agent_text(&updates, &sid),
        "approval: allowed\nremembers 0: []"
    );
    Ok(())
}

#[tokio::test]
async fn cancel_stops_a_stream() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut agent = Agent::spawn(dir.path(), &[], &[])?;
    initialize(&mut agent).await?;
    let sid = new_session(&mut agent).await?;
    agent
        .send(json!({"jsonrpc":"2.0","id":"p","method":"session/prompt",
            "params":{"sessionId":sid,"prompt":[{"type":"text","text":"stream 50 50"}]}}))
        .await?;
    let (second, _) = agent
        .recv_until(|v| v["params"]["update"]["content"]["text"] == "chunk 2 ")
        .await?;
    ensure!(second["params"]["sessionId"] == sid.as_str());
    agent
        .send(json!({"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":sid}}))
        .await?;
    let (resp, updates) = agent.recv_until(|v| is_response(v, &json!("p"))).await?;
    ensure!(resp["result"]["stopReason"] == "cancelled", "{resp}");
    ensure!(
        updates.len() < 5,
        "kept streaming after cancel: {updates:?}"
    );

    // The session is still usable and remembers the cancelled prompt.
    let (resp, updates) = prompt(&mut agent, 9, &sid, "after").await?;
    ensure!(resp["result"]["stopReason"] == "end_turn", "{resp}");
    assert_eq!(
        agent_text(&updates, &sid),
        "echo: after\nremembers 1: [\"stream 50 50\"]"
    );
    Ok(())
}

#[tokio::test]
async fn quirks_exit_crash_and_other_id() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut agent = Agent::spawn(dir.path(), &["--exit-on-start"], &[])?;
    let status = agent.wait().await?;
    assert_eq!(status.code(), Some(2));
    agent
        .stderr_contains("fake-agent: exiting on start as asked")
        .await?;

    let mut agent = Agent::spawn(dir.path(), &[], &[])?;
    initialize(&mut agent).await?;
    let sid = new_session(&mut agent).await?;
    agent
        .send(json!({"jsonrpc":"2.0","id":1,"method":"session/prompt",
            "params":{"sessionId":sid,"prompt":[{"type":"text","text":"crash"}]}}))
        .await?;
    let chunk = agent.recv().await?;
    ensure!(
        chunk["params"]["update"]["content"]["text"] == "about to crash",
        "{chunk}"
    );
    assert_eq!(agent.wait().await?.code(), Some(3));
    agent
        .stderr_contains("fake-agent: crashing as asked")
        .await?;

    let mut agent = Agent::spawn(dir.path(), &[], &[("FAKE_AGENT_RESUME_OTHER_ID", "1")])?;
    initialize(&mut agent).await?;
    agent
        .send(json!({"jsonrpc":"2.0","id":2,"method":"session/resume",
            "params":{"sessionId":sid,"cwd":"/tmp","mcpServers":[]}}))
        .await?;
    let (resp, _) = agent.recv_until(|v| is_response(v, &json!(2))).await?;
    ensure!(resp.get("error").is_none(), "{resp}");
    let (_, updates) = prompt(&mut agent, 3, &sid, "who").await?;
    let other = updates[0]["params"]["sessionId"]
        .as_str()
        .unwrap_or_default();
    ensure!(!other.is_empty() && other != sid, "same id: {updates:?}");
    assert_eq!(agent_text(&updates, other), "echo: who\nremembers 0: []");

    let mut agent = Agent::spawn(dir.path(), &["--refuse-resume"], &[])?;
    initialize(&mut agent).await?;
    agent
        .send(json!({"jsonrpc":"2.0","id":4,"method":"session/load",
            "params":{"sessionId":sid,"cwd":"/tmp","mcpServers":[]}}))
        .await?;
    let (resp, _) = agent.recv_until(|v| is_response(v, &json!(4))).await?;
    ensure!(resp.get("error").is_some(), "{resp}");
    Ok(())
}

#[tokio::test]
async fn elicitation_and_cancel_during_permission() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut agent = Agent::spawn(dir.path(), &["--stderr-flood", "50"], &[])?;
    initialize(&mut agent).await?;
    let sid = new_session(&mut agent).await?;
    agent
        .send(json!({"jsonrpc":"2.0","id":1,"method":"session/prompt",
            "params":{"sessionId":sid,"prompt":[{"type":"text","text":"ask your name?"}]}}))
        .await?;
    let (request, _) = agent
        .recv_until(|v| v["method"] == "elicitation/create")
        .await?;
    ensure!(request["params"]["message"] == "your name?", "{request}");
    ensure!(request["params"]["mode"] == "form", "{request}");
    agent
        .send(json!({"jsonrpc":"2.0","id":request["id"],
            "result":{"action":"accept","content":{"answer":"Ada"}}}))
        .await?;
    let (resp, updates) = agent.recv_until(|v| is_response(v, &json!(1))).await?;
    ensure!(resp["result"]["stopReason"] == "end_turn", "{resp}");
    assert_eq!(agent_text(&updates, &sid), "answer: Ada\nremembers 0: []");

    agent
        .send(json!({"jsonrpc":"2.0","id":2,"method":"session/prompt",
            "params":{"sessionId":sid,"prompt":[{"type":"text","text":"approve x"}]}}))
        .await?;
    let (request, _) = agent
        .recv_until(|v| v["method"] == "session/request_permission")
        .await?;
    agent
        .send(json!({"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":sid}}))
        .await?;
    let (resp, _) = agent.recv_until(|v| is_response(v, &json!(2))).await?;
    ensure!(resp["result"]["stopReason"] == "cancelled", "{resp}");
    // A late answer to the abandoned request is ignored.
    agent
        .send(json!({"jsonrpc":"2.0","id":request["id"],
            "result":{"outcome":{"outcome":"cancelled"}}}))
        .await?;
    let (_, updates) = prompt(&mut agent, 3, &sid, "d").await?;
    assert_eq!(
        agent_text(&updates, &sid),
        "echo: d\nremembers 2: [\"ask your name?\",\"approve x\"]"
    );
    agent.stderr_contains("stderr flood line 50").await?;
    Ok(())
}
