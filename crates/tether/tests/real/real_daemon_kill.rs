//! With the REAL `codex`, `claude` and `codex-acp` (the ACP driver) against the mock
//! model: when the daemon is SIGKILLed in the middle of streaming turns, none of its agent
//! processes (nor their `tether mcp` companions) outlive it by more than a second.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use tether_testkit::real_agents::{
    AgentReaper, RealAgent, agent_toml, claude_env, codex_env, codex_home, pids_with_env,
};
use tether_testkit::{Daemon, DaemonOptions, MockModel, within};

/// Waits until the session of `conv`'s running turn has streamed some text.
async fn streaming(d: &Daemon, conv: &str, out: &serde_json::Value) {
    let sid = out["session_id"].as_str().unwrap();
    within(&format!("{conv} streams"), async {
        loop {
            let page = d.get_ok(&format!("/api/v1/sessions/{sid}/events")).await;
            let deltas = page["events"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| e["payload"]["type"] == "message_delta")
                .count();
            if deltas >= 2 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn agents_do_not_outlive_a_killed_daemon() {
    let model = MockModel::start().await;
    let codex = codex_home(&model.base_url());
    let acp = codex_home(&model.base_url());
    let claude = tempfile::tempdir().unwrap();
    let markers = [
        ("codex", "CODEX_HOME", codex.path().display().to_string()),
        ("codex-acp", "CODEX_HOME", acp.path().display().to_string()),
        (
            "claude",
            "CLAUDE_CONFIG_DIR",
            claude.path().display().to_string(),
        ),
    ];
    let _reapers: Vec<AgentReaper> = markers
        .iter()
        .map(|(_, k, v)| AgentReaper::new(k, v))
        .collect();
    let mut extra = agent_toml("codex", RealAgent::Codex, &codex_env(codex.path()));
    extra.push_str(&agent_toml(
        "codex-acp",
        RealAgent::CodexAcp,
        &codex_env(acp.path()),
    ));
    extra.push_str(&agent_toml(
        "claude",
        RealAgent::Claude,
        &claude_env(&model.base_url(), claude.path()),
    ));
    let mut d = Daemon::start(DaemonOptions {
        extra_config: extra,
        start_timeout_secs: 30,
        ..DaemonOptions::default()
    })
    .await;

    // Streaming turns of 40 s each.
    let mut turns = Vec::new();
    for (agent, _, _) in &markers {
        let c = d.new_conversation(Some(agent)).await;
        let out = d.say(&c, "slow 400 100").await;
        turns.push((c, out));
    }
    for (c, out) in &turns {
        streaming(&d, c, out).await;
    }
    let socket = d.data_dir().join("run").join("mcp.sock");
    let socket = socket.display().to_string();
    let left = || {
        let mut left: Vec<(String, Vec<u32>)> = markers
            .iter()
            .map(|(agent, k, v)| (agent.to_string(), pids_with_env(k, v)))
            .collect();
        left.push((
            "tether mcp".to_string(),
            pids_with_env("TETHER_MCP_SOCKET", &socket),
        ));
        left
    };
    let before = left();
    for (agent, pids) in &before[..3] {
        assert!(!pids.is_empty(), "{agent} is not running: {before:?}");
    }

    d.kill9().await;
    let killed = Instant::now();
    loop {
        let now = left();
        if now.iter().all(|(_, pids)| pids.is_empty()) {
            break;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(1),
            "agent processes outlived the daemon by a second: {now:?} (before the kill: {before:?})"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
