//! End to end with the REAL `codex` and `claude` CLIs (mock model server, offline): the
//! live pool at cap 1 evicts one agent's process for another's turn and the evicted
//! session resumes with its history; switching a conversation from Codex to Claude starts
//! a new session with a status message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use tether_testkit::real_agents::{self, RealAgent};
use tether_testkit::{Daemon, DaemonOptions, MockModel};

/// A daemon with `codex` and `claude` (real CLIs, own homes) and the pool capped at one.
async fn daemon(model: &MockModel) -> (Daemon, Vec<tempfile::TempDir>) {
    let codex_home = real_agents::codex_home(&model.base_url());
    let claude_dir = tempfile::tempdir().unwrap();
    let mut extra = real_agents::agent_toml(
        "codex",
        RealAgent::Codex,
        &real_agents::codex_env(codex_home.path()),
    );
    extra.push_str(&real_agents::agent_toml(
        "claude",
        RealAgent::Claude,
        &real_agents::claude_env(&model.base_url(), claude_dir.path()),
    ));
    extra.push_str("[pool]\nmax_live = 1\nidle_ttl_secs = 0\n");
    let d = Daemon::start(DaemonOptions {
        extra_config: extra,
        ..Default::default()
    })
    .await;
    (d, vec![codex_home, claude_dir])
}

async fn eviction_then_resume(agent: &str) {
    let model = MockModel::start().await;
    let (d, _homes) = daemon(&model).await;
    let a = d.new_conversation(Some(agent)).await;
    let b = d.new_conversation(Some(agent)).await;
    let (oa, ta) = d.say_and_wait(&a, "alpha one").await;
    assert_eq!(ta["status"], "completed", "{ta}");
    let sa = oa["session_id"].as_str().unwrap().to_string();
    let external = d.get_ok(&format!("/api/v1/sessions/{sa}")).await["external_id"].clone();

    let (_, tb) = d.say_and_wait(&b, "beta one").await;
    assert_eq!(tb["status"], "completed", "{tb}");
    d.wait_conversation(&a, "first session evicted", |c| {
        c["binding"]["status"] == "dormant"
    })
    .await;
    assert_eq!(d.get_ok("/api/v1/pool").await["evictions"], 1);

    let (oa2, ta2) = d.say_and_wait(&a, "alpha two").await;
    assert_eq!(
        oa2["session_id"],
        sa.as_str(),
        "same session after eviction"
    );
    assert_eq!(ta2["status"], "completed", "{ta2}");
    assert_eq!(
        ta2["result_text"], "mock reply to: alpha two (turn 2)",
        "history carried"
    );
    let session = d.get_ok(&format!("/api/v1/sessions/{sa}")).await;
    assert_eq!(session["external_id"], external, "same native session");
    let last = model.last_user_texts();
    assert!(last.iter().any(|t| t.contains("alpha one")), "{last:?}");
    assert!(
        !last.iter().any(|t| t.contains("beta one")),
        "no cross-talk: {last:?}"
    );
}

#[tokio::test]
async fn codex_session_evicted_at_cap_one_resumes_with_its_history() {
    eviction_then_resume("codex").await;
}

#[tokio::test]
async fn claude_session_evicted_at_cap_one_resumes_with_its_history() {
    eviction_then_resume("claude").await;
}

#[tokio::test]
async fn switching_from_codex_to_claude_starts_a_new_session_with_a_status_message() {
    let model = MockModel::start().await;
    let (d, _homes) = daemon(&model).await;
    let c = d.new_conversation(Some("codex")).await;
    let (o1, _) = d.say_and_wait(&c, "hello codex").await;
    let o2 = d
        .post_ok(
            &format!("/api/v1/conversations/{c}/messages"),
            json!({"text": "hello claude", "agent": "claude"}),
        )
        .await;
    assert_eq!(o2["new_session"], "drift");
    assert_ne!(o2["session_id"], o1["session_id"]);
    let t2 = d
        .wait_turn(
            o2["session_id"].as_str().unwrap(),
            o2["turn_id"].as_str().unwrap(),
        )
        .await;
    assert_eq!(t2["status"], "completed", "{t2}");
    assert_eq!(t2["result_text"], "mock reply to: hello claude (turn 1)");
    let session = d
        .get_ok(&format!(
            "/api/v1/sessions/{}",
            o2["session_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(session["agent"], "claude");
    let history = d
        .get_ok(&format!("/api/v1/conversations/{c}/messages"))
        .await;
    let status: Vec<&str> = history
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "status")
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert!(
        status
            .iter()
            .any(|s| s.contains("agent changed from codex to claude")),
        "{status:?}"
    );
}
