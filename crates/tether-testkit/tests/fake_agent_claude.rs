//! The fake agent's claude-code stream-json dialect, driven over real pipes.

mod fake_agent_support;

use anyhow::{Result, ensure};
use fake_agent_support::Agent;
use serde_json::{Value, json};

const CLAUDE_ARGS: &[&str] = &[
    "-p",
    "--input-format",
    "stream-json",
    "--output-format",
    "stream-json",
    "--verbose",
    "--permission-prompt-tool",
    "stdio",
];

fn spawn(dir: &std::path::Path, extra: &[&str], envs: &[(&str, &str)]) -> Result<Agent> {
    let mut args = CLAUDE_ARGS.to_vec();
    args.extend_from_slice(extra);
    Agent::spawn(dir, &args, envs)
}

async fn user(agent: &mut Agent, text: &str) -> Result<()> {
    agent
        .send(json!({"type": "user", "message": {"role": "user",
            "content": [{"type": "text", "text": text}]}, "parent_tool_use_id": null}))
        .await
}

async fn result(agent: &mut Agent) -> Result<(Value, Vec<Value>)> {
    agent.recv_until(|v| v["type"] == "result").await
}

async fn answer_control(agent: &mut Agent, request: &Value, response: Value) -> Result<()> {
    agent
        .send(
            json!({"type": "control_response", "response": {"subtype": "success",
            "request_id": request["request_id"], "response": response}}),
        )
        .await
}

#[tokio::test]
async fn turns_approvals_questions_interrupt_and_resume() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let sid = "0b9c3f52-9a5e-4f0c-8d55-0c1f7f7d2b11";
    let mut agent = spawn(
        dir.path(),
        &["--session-id", sid],
        &[("FAKE_AGENT_DIALECT", "claude")],
    )?;
    agent
        .send(json!({"type": "control_request", "request_id": "r1",
            "request": {"subtype": "initialize"}}))
        .await?;
    let (init, _) = agent
        .recv_until(|v| v["type"] == "control_response")
        .await?;
    ensure!(init["response"]["request_id"] == "r1", "{init}");
    ensure!(init["response"]["subtype"] == "success", "{init}");

    user(&mut agent, "a").await?;
    let (done, before) = result(&mut agent).await?;
    ensure!(
        before[0]["type"] == "system" && before[0]["subtype"] == "init",
        "{before:?}"
    );
    ensure!(before[0]["session_id"] == sid, "{before:?}");
    ensure!(
        done["subtype"] == "success" && done["is_error"] == false,
        "{done}"
    );
    ensure!(done["result"] == "echo: a\nremembers 0: []", "{done}");
    ensure!(done["session_id"] == sid, "{done}");

    user(&mut agent, "approve build it").await?;
    let (request, before) = agent.recv_until(|v| v["type"] == "control_request").await?;
    ensure!(
        before
            .iter()
            .any(|m| m["message"]["content"][0]["type"] == "tool_use"),
        "no tool_use before the approval: {before:?}"
    );
    ensure!(request["request"]["subtype"] == "can_use_tool", "{request}");
    ensure!(request["request"]["tool_name"] == "Bash", "{request}");
    let input = request["request"]["input"].clone();
    ensure!(input["command"] == "echo build it", "{request}");
    answer_control(
        &mut agent,
        &request,
        json!({"behavior": "allow", "updatedInput": input}),
    )
    .await?;
    let (done, before) = result(&mut agent).await?;
    ensure!(
        before
            .iter()
            .any(|m| m["type"] == "user" && m["message"]["content"][0]["type"] == "tool_result"),
        "no tool_result: {before:?}"
    );
    ensure!(
        done["result"] == "approval: allowed\nremembers 1: [\"a\"]",
        "{done}"
    );

    user(&mut agent, "ask colour?").await?;
    let (request, _) = agent.recv_until(|v| v["type"] == "control_request").await?;
    ensure!(
        request["request"]["tool_name"] == "AskUserQuestion",
        "{request}"
    );
    let mut input = request["request"]["input"].clone();
    ensure!(input["questions"][0]["question"] == "colour?", "{request}");
    input["answers"] = json!({"colour?": "blue"});
    answer_control(
        &mut agent,
        &request,
        json!({"behavior": "allow", "updatedInput": input}),
    )
    .await?;
    let (done, _) = result(&mut agent).await?;
    ensure!(
        done["result"] == "answer: blue\nremembers 2: [\"a\",\"approve build it\"]",
        "{done}"
    );

    user(&mut agent, "hang").await?;
    agent.recv_until(|v| v["type"] == "system").await?;
    agent
        .send(json!({"type": "control_request", "request_id": "r2",
            "request": {"subtype": "interrupt"}}))
        .await?;
    let (done, _) = result(&mut agent).await?;
    ensure!(done["subtype"] == "error_during_execution", "{done}");
    ensure!(done["is_error"] == true, "{done}");
    let status = agent.close().await?;
    assert_eq!(status.code(), Some(1), "exit code 1 after an error result");

    let mut agent = spawn(
        dir.path(),
        &["--session-id", sid, "--dialect", "claude"],
        &[],
    )?;
    assert_eq!(agent.wait().await?.code(), Some(1));
    agent.stderr_contains("already in use").await?;

    let mut agent = spawn(
        dir.path(),
        &["--resume", "nope", "--dialect", "claude"],
        &[],
    )?;
    assert_eq!(agent.wait().await?.code(), Some(1));
    agent
        .stderr_contains("No conversation found with session ID: nope")
        .await?;

    let mut agent = spawn(dir.path(), &["--resume", sid, "--dialect", "claude"], &[])?;
    user(&mut agent, "fail").await?;
    let (done, before) = result(&mut agent).await?;
    ensure!(before[0]["session_id"] == sid, "{before:?}");
    ensure!(done["subtype"] == "error_during_execution", "{done}");
    ensure!(done["errors"][0] == "fake failure as asked", "{done}");
    user(&mut agent, "z").await?;
    let (done, _) = result(&mut agent).await?;
    ensure!(
        done["result"]
            == "echo: z\nremembers 5: [\"a\",\"approve build it\",\"ask colour?\",\"hang\",\"fail\"]",
        "{done}"
    );
    assert_eq!(agent.close().await?.code(), Some(0));

    let mut agent = spawn(
        dir.path(),
        &["--resume", sid, "--dialect", "claude"],
        &[("FAKE_AGENT_RESUME_OTHER_ID", "1")],
    )?;
    user(&mut agent, "who").await?;
    let (done, before) = result(&mut agent).await?;
    ensure!(before[0]["session_id"] != sid, "{before:?}");
    ensure!(done["result"] == "echo: who\nremembers 0: []", "{done}");
    Ok(())
}
