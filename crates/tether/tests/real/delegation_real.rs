//! Delegation end to end with the REAL CLIs against the mock model server: a real Codex
//! parent calls tether's MCP tools (over HTTP, with its session's token) to delegate to a real Claude
//! child, collects the result, continues the same child session, closes it, and a further
//! continuation is refused with `session_released`. Offline (loopback only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use tether_testkit::real_agents::{self, RealAgent};
use tether_testkit::{Api, Daemon, DaemonOptions, MockModel};

/// The JSON the tool returned, from the parent's `done: <tool output>` reply.
pub(crate) fn tool_json(turn: &Value) -> Value {
    let text = turn["result_text"].as_str().unwrap_or_default();
    let start = text
        .find('{')
        .unwrap_or_else(|| panic!("no JSON in {text:?}"));
    let mut de = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
    match de.next() {
        Some(Ok(v)) => v,
        other => panic!("bad JSON in {text:?}: {other:?}"),
    }
}

async fn call(d: &Daemon, parent: &str, tool: &str, args: Value) -> Value {
    let (_, turn) = d
        .say_and_wait(parent, &format!("mcp tether {tool} {args}"))
        .await;
    assert_eq!(turn["status"], "completed", "{turn}");
    tool_json(&turn)
}

#[tokio::test]
async fn codex_parent_delegates_to_a_claude_child() {
    let model = MockModel::start().await;
    let codex_home = real_agents::codex_home(&model.base_url());
    let claude_dir = tempfile::tempdir().unwrap();
    let mut config = real_agents::agent_toml(
        "codex",
        RealAgent::Codex,
        &real_agents::codex_env(codex_home.path()),
    );
    config.push_str(&real_agents::agent_toml(
        "claude",
        RealAgent::Claude,
        &real_agents::claude_env(&model.base_url(), claude_dir.path()),
    ));
    let d = Daemon::start(DaemonOptions {
        extra_config: config,
        ..DaemonOptions::default()
    })
    .await;
    let parent = d.new_conversation(Some("codex")).await;

    let started = call(
        &d,
        &parent,
        "delegate_to_agent",
        json!({"agent_type": "claude", "task": "child task one"}),
    )
    .await;
    assert_eq!(started["status"], "running", "{started}");
    let task = started["task_id"].as_str().unwrap().to_string();
    // Codex reached tether's MCP over HTTP with its session's token: no `tether mcp`
    // companion runs for this daemon (issue 15).
    let socket = d.data_dir().join("run").join("mcp.sock");
    let companions = real_agents::pids_with_env("TETHER_MCP_SOCKET", &socket.display().to_string());
    assert!(companions.is_empty(), "companions: {companions:?}");

    let status = json!({"task_ids": [task], "wait_ms": 40000});
    let r = call(&d, &parent, "get_delegation_status", status.clone()).await;
    let t = &r["tasks"][0];
    assert_eq!(t["status"], "completed", "{r}");
    assert_eq!(t["text"], "mock reply to: child task one (turn 1)");

    let r = call(
        &d,
        &parent,
        "continue_with_session",
        json!({"task_id": task, "message": "child task two", "continuation_id": "k1"}),
    )
    .await;
    assert_eq!(r["turn_version"], 2, "{r}");
    let r = call(&d, &parent, "get_delegation_status", status).await;
    let t = &r["tasks"][0];
    assert_eq!(t["status"], "completed", "{r}");
    // The child's history carries the first task: its second request had both.
    assert_eq!(t["text"], "mock reply to: child task two (turn 2)");
    let claude_last = model.main_requests(Api::AnthropicMessages);
    let last = claude_last.last().unwrap();
    assert_eq!(last.user_texts(), ["child task one", "child task two"]);

    let r = call(
        &d,
        &parent,
        "close_session",
        json!({"task_id": task, "continuation_id": "k2"}),
    )
    .await;
    assert_eq!(r["availability"], "released", "{r}");
    let r = call(
        &d,
        &parent,
        "continue_with_session",
        json!({"task_id": task, "message": "child task three", "continuation_id": "k3"}),
    )
    .await;
    assert_eq!(r["error_code"], "session_released", "{r}");
    let c = d
        .get_ok(&format!("/api/v1/conversations/{task}/continuation"))
        .await;
    assert_eq!(c["agent_type"], "claude");
    assert_eq!(c["parent_conversation_id"], parent.as_str());
}

#[tokio::test]
async fn claude_parent_uses_the_tools_without_asking() {
    let model = MockModel::start().await;
    let claude_dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(DaemonOptions {
        extra_config: real_agents::agent_toml(
            "claude",
            RealAgent::Claude,
            &real_agents::claude_env(&model.base_url(), claude_dir.path()),
        ),
        ..DaemonOptions::default()
    })
    .await;
    let parent = d.new_conversation(Some("claude")).await;
    let started = call(
        &d,
        &parent,
        "delegate_to_agent",
        json!({"agent_type": "fake", "task": "for the fake"}),
    )
    .await;
    let task = started["task_id"].as_str().unwrap().to_string();
    // Claude too reaches tether's MCP over HTTP: no companion.
    let socket = d.data_dir().join("run").join("mcp.sock");
    let companions = real_agents::pids_with_env("TETHER_MCP_SOCKET", &socket.display().to_string());
    assert!(companions.is_empty(), "companions: {companions:?}");
    let r = call(
        &d,
        &parent,
        "get_delegation_status",
        json!({"task_ids": [task], "wait_ms": 20000}),
    )
    .await;
    assert_eq!(
        r["tasks"][0]["text"], "echo: for the fake\nremembers 0: []",
        "{r}"
    );
    let pending = d.get_ok("/api/v1/approvals?status=pending").await;
    assert_eq!(pending.as_array().unwrap().len(), 0, "{pending}");
}
