//! The fake agent's `codex app-server` dialect, driven over real pipes.

mod fake_agent_support;

use anyhow::{Result, ensure};
use fake_agent_support::{Agent, is_response};
use serde_json::{Value, json};

const ARGS: &[&str] = &["--dialect", "codex", "app-server", "-c", "model=\"x\""];

async fn call(agent: &mut Agent, id: i64, method: &str, params: Value) -> Result<Value> {
    agent
        .send(json!({"id": id, "method": method, "params": params}))
        .await?;
    let (resp, _) = agent.recv_until(|v| is_response(v, &json!(id))).await?;
    Ok(resp)
}

async fn start(agent: &mut Agent) -> Result<()> {
    let resp = call(
        agent,
        0,
        "initialize",
        json!({"clientInfo": {"name": "t", "version": "0"}}),
    )
    .await?;
    ensure!(resp["result"]["userAgent"].is_string(), "{resp}");
    agent.send(json!({"method": "initialized"})).await
}

/// Start a turn and read up to turn/completed: (turn/start response, messages, final turn).
async fn turn(agent: &mut Agent, id: i64, thread: &str, text: &str) -> Result<(Vec<Value>, Value)> {
    agent
        .send(json!({"id": id, "method": "turn/start",
            "params": {"threadId": thread, "input": [{"type": "text", "text": text}]}}))
        .await?;
    let (done, before) = agent
        .recv_until(|v| v["method"] == "turn/completed")
        .await?;
    Ok((before, done["params"]["turn"].clone()))
}

fn deltas(messages: &[Value]) -> String {
    messages
        .iter()
        .filter(|m| m["method"] == "item/agentMessage/delta")
        .filter_map(|m| m["params"]["delta"].as_str())
        .collect()
}

#[tokio::test]
async fn turns_approvals_questions_and_resume() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut agent = Agent::spawn(dir.path(), ARGS, &[])?;
    let early = call(&mut agent, 9, "thread/start", json!({})).await?;
    ensure!(early["error"]["message"] == "Not initialized", "{early}");
    start(&mut agent).await?;

    let resp = call(
        &mut agent,
        1,
        "thread/start",
        json!({"cwd": "/tmp", "approvalPolicy": "untrusted", "sandbox": "workspace-write"}),
    )
    .await?;
    ensure!(
        resp.get("jsonrpc").is_none(),
        "codex messages carry no jsonrpc: {resp}"
    );
    let thread = resp["result"]["thread"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    ensure!(!thread.is_empty(), "{resp}");
    let started = agent.recv().await?;
    ensure!(started["method"] == "thread/started", "{started}");

    let (messages, done) = turn(&mut agent, 2, &thread, "a").await?;
    ensure!(done["status"] == "completed", "{done}");
    ensure!(messages.iter().all(|m| m.get("jsonrpc").is_none()));
    ensure!(messages.iter().any(|m| m["method"] == "turn/started"));
    assert_eq!(deltas(&messages), "echo: a\nremembers 0: []");
    let completed_text = messages
        .iter()
        .find(|m| m["method"] == "item/completed" && m["params"]["item"]["type"] == "agentMessage")
        .map(|m| m["params"]["item"]["text"].clone());
    assert_eq!(completed_text, Some(json!("echo: a\nremembers 0: []")));

    agent
        .send(json!({"id": 3, "method": "turn/start",
            "params": {"threadId": thread, "input": [{"type": "text", "text": "approve deploy it"}]}}))
        .await?;
    let (request, _) = agent
        .recv_until(|v| v["method"] == "item/commandExecution/requestApproval")
        .await?;
    ensure!(
        request["id"] == 0,
        "server requests count from 0: {request}"
    );
    ensure!(
        request["params"]["command"] == "echo deploy it",
        "{request}"
    );
    ensure!(
        request["params"]["threadId"] == thread.as_str(),
        "{request}"
    );
    agent
        .send(json!({"id": 0, "result": {"decision": "acceptForSession"}}))
        .await?;
    let (done, messages) = agent
        .recv_until(|v| v["method"] == "turn/completed")
        .await?;
    ensure!(done["params"]["turn"]["status"] == "completed", "{done}");
    ensure!(
        messages
            .iter()
            .any(|m| m["params"]["item"]["type"] == "commandExecution"
                && m["params"]["item"]["status"] == "completed")
    );
    assert_eq!(
        deltas(&messages),
        "approval: allowed_always\nremembers 1: [\"a\"]"
    );

    agent
        .send(json!({"id": 4, "method": "turn/start",
            "params": {"threadId": thread, "input": [{"type": "text", "text": "ask favourite colour?"}]}}))
        .await?;
    let (request, _) = agent
        .recv_until(|v| v["method"] == "item/tool/requestUserInput")
        .await?;
    ensure!(request["id"] == 1, "{request}");
    let question = &request["params"]["questions"][0];
    ensure!(question["question"] == "favourite colour?", "{request}");
    agent
        .send(json!({"id": 1, "result": {"answers": {(question["id"].as_str().unwrap_or_default()): {"answers": ["blue"]}}}}))
        .await?;
    let (_, messages) = agent
        .recv_until(|v| v["method"] == "turn/completed")
        .await?;
    assert_eq!(
        deltas(&messages),
        "answer: blue\nremembers 2: [\"a\",\"approve deploy it\"]"
    );

    let (_, done) = turn(&mut agent, 5, &thread, "fail").await?;
    ensure!(done["status"] == "failed", "{done}");
    ensure!(
        done["error"]["message"] == "fake failure as asked",
        "{done}"
    );
    ensure!(agent.close().await?.success());

    let mut agent = Agent::spawn(dir.path(), ARGS, &[])?;
    start(&mut agent).await?;
    let resp = call(&mut agent, 1, "thread/resume", json!({"threadId": "nope"})).await?;
    ensure!(resp["error"].is_object(), "{resp}");
    let resp = call(&mut agent, 2, "thread/resume", json!({"threadId": thread})).await?;
    ensure!(resp["result"]["thread"]["id"] == thread.as_str(), "{resp}");
    ensure!(
        resp["result"]["thread"]["turns"].as_array().map(Vec::len) == Some(4),
        "{resp}"
    );
    let (messages, _) = turn(&mut agent, 3, &thread, "z").await?;
    assert_eq!(
        deltas(&messages),
        "echo: z\nremembers 4: [\"a\",\"approve deploy it\",\"ask favourite colour?\",\"fail\"]"
    );
    Ok(())
}

#[tokio::test]
async fn interrupt_and_other_id() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut agent = Agent::spawn(dir.path(), ARGS, &[])?;
    start(&mut agent).await?;
    let resp = call(&mut agent, 1, "thread/start", json!({"cwd": "/tmp"})).await?;
    let thread = resp["result"]["thread"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let resp = call(
        &mut agent,
        2,
        "turn/start",
        json!({"threadId": thread, "input": [{"type": "text", "text": "hang"}]}),
    )
    .await?;
    let turn_id = resp["result"]["turn"]["id"].clone();
    ensure!(resp["result"]["turn"]["status"] == "inProgress", "{resp}");
    agent
        .send(json!({"id": 3, "method": "turn/interrupt",
            "params": {"threadId": thread, "turnId": turn_id}}))
        .await?;
    let (done, _) = agent
        .recv_until(|v| v["method"] == "turn/completed")
        .await?;
    ensure!(done["params"]["turn"]["status"] == "interrupted", "{done}");
    ensure!(done["params"]["turn"]["id"] == turn_id, "{done}");
    ensure!(agent.close().await?.success());

    let mut agent = Agent::spawn(dir.path(), ARGS, &[("FAKE_AGENT_RESUME_OTHER_ID", "1")])?;
    start(&mut agent).await?;
    let resp = call(&mut agent, 1, "thread/resume", json!({"threadId": thread})).await?;
    let other = resp["result"]["thread"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    ensure!(!other.is_empty() && other != thread, "{resp}");
    let (messages, _) = turn(&mut agent, 2, &other, "who").await?;
    assert_eq!(deltas(&messages), "echo: who\nremembers 0: []");
    Ok(())
}
