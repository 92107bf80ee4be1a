//! End to end with the REAL `claude` against the mock model server (issue 15): the warm
//! spare. A new session takes the spare claude process (started before the session
//! existed, with a reserved MCP token) and its agent then calls tether's MCP tools as that
//! session: the token the spare was started with was handed to the session. Offline.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::{Value, json};
use tether_testkit::real_agents::{self, RealAgent};
use tether_testkit::{Daemon, DaemonOptions, MockModel, within};

/// The JSON the tool returned, from the agent's `done: <tool output>` reply.
fn tool_json(turn: &Value) -> Value {
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

async fn spare_pid(d: &Daemon) -> u64 {
    within("a ready claude spare", async {
        loop {
            let pool = d.get_ok("/api/v1/pool").await;
            let pid = pool["spares"].as_array().unwrap().iter().find_map(|s| {
                (s["agent"] == "claude" && s["ready"] == true)
                    .then(|| s["pid"].as_u64())
                    .flatten()
            });
            if let Some(pid) = pid {
                return pid;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
}

#[tokio::test]
async fn a_new_session_takes_the_real_claude_spare_and_its_mcp_token_is_the_sessions() {
    let model = MockModel::start().await;
    let claude_dir = tempfile::tempdir().unwrap();
    let mut config = real_agents::agent_toml(
        "claude",
        RealAgent::Claude,
        &real_agents::claude_env(&model.base_url(), claude_dir.path()),
    );
    config.push_str("[pool]\nclaude_spare = true\n");
    let d = Daemon::start(DaemonOptions {
        extra_config: config,
        ..DaemonOptions::default()
    })
    .await;
    let pid = spare_pid(&d).await;
    let parent = d.new_conversation(Some("claude")).await;
    let args = json!({"agent_type": "fake", "task": "for the fake"});
    let (out, turn) = d
        .say_and_wait(&parent, &format!("mcp tether delegate_to_agent {args}"))
        .await;
    assert_eq!(turn["status"], "completed", "{turn}");
    let pool = d.get_ok("/api/v1/pool").await;
    let sid = out["session_id"].as_str().unwrap();
    let own = pool["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["sessions"].as_array().unwrap().iter().any(|s| s == sid))
        .and_then(|p| p["pid"].as_u64());
    assert_eq!(own, Some(pid), "the session runs in the spare: {pool}");
    let started = tool_json(&turn);
    let task = started["task_id"]
        .as_str()
        .unwrap_or_else(|| panic!("the tool call was refused: {started}"))
        .to_owned();
    // The child belongs to this conversation: the call came as its session.
    let (_, turn) = d
        .say_and_wait(
            &parent,
            &format!(
                "mcp tether get_delegation_status {}",
                json!({"task_ids": [task], "wait_ms": 20000})
            ),
        )
        .await;
    let r = tool_json(&turn);
    assert_eq!(
        r["tasks"][0]["text"], "echo: for the fake\nremembers 0: []",
        "{r}"
    );
    // A replacement is ready for the next new session.
    assert_ne!(spare_pid(&d).await, pid);
}
