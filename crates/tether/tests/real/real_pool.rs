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

/// Issue 33 item 4: a codex session gone dormant on a shared process resumes there
/// without `config` — codex kept its thread loaded with the MCP server it had, and tether
/// kept the session's token — and its tools still act as that session; once the process
/// has ended, the token goes with it and the next resume opens the server again with a
/// new one.
#[tokio::test]
async fn a_dormant_codex_thread_resumes_on_its_process_with_the_mcp_server_it_had() {
    let model = MockModel::start().await;
    let codex_home = real_agents::codex_home(&model.base_url());
    let mut extra = real_agents::agent_toml(
        "codex",
        RealAgent::Codex,
        &real_agents::codex_env(codex_home.path()),
    );
    // Dormant after 1 s idle; the shared process, left empty, ends 6 s later.
    extra.push_str("[pool]\nidle_ttl_secs = 1\nprocess_idle_secs = 6\n");
    let d = Daemon::start(DaemonOptions {
        extra_config: extra,
        capture_stderr: true,
        log_filter: "info,tether_agents::codex=debug".into(),
        ..Default::default()
    })
    .await;
    let c = d.new_conversation(Some("codex")).await;
    let delegate = |task: &str| {
        format!(
            "mcp tether delegate_to_agent {}",
            json!({"agent_type": "fake", "task": task})
        )
    };
    let kept = |d: &Daemon| d.stderr_log().matches("kept_config=true").count();
    let resumes = |d: &Daemon| {
        d.stderr_log()
            .matches("codex answered thread/resume")
            .count()
    };

    let (o, t) = d.say_and_wait(&c, &delegate("one")).await;
    acts_as_the_session(&d, &c, &t).await;
    let session = o["session_id"].as_str().unwrap().to_string();
    let dormant = |c: &serde_json::Value| c["binding"]["status"] == "dormant";
    d.wait_conversation(&c, "dormant after its idle time", dormant)
        .await;

    // Back on the same process, which still holds the thread: no `config`.
    let (o, t) = d.say_and_wait(&c, &delegate("two")).await;
    assert_eq!(o["session_id"], session.as_str());
    acts_as_the_session(&d, &c, &t).await;
    assert_eq!((resumes(&d), kept(&d)), (1, 1), "{}", d.stderr_log());

    // Dormant again, and the process ends: its token is revoked, the next resume starts
    // a new process and gives it the server again, with a new token.
    d.wait_conversation(&c, "dormant again", dormant).await;
    tether_testkit::within("the empty shared process ends", async {
        while d.get_ok("/api/v1/pool").await["process_count"] != 0 {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    })
    .await;
    let (o, t) = d.say_and_wait(&c, &delegate("three")).await;
    assert_eq!(o["session_id"], session.as_str());
    acts_as_the_session(&d, &c, &t).await;
    assert_eq!((resumes(&d), kept(&d)), (2, 1), "{}", d.stderr_log());
}

/// The turn called `delegate_to_agent` as its own session: the task's parent is `c`.
async fn acts_as_the_session(d: &Daemon, c: &str, turn: &serde_json::Value) {
    assert_eq!(turn["status"], "completed", "{turn}");
    let r = crate::delegation_real::tool_json(turn);
    assert_eq!(r["status"], "running", "{r}");
    let task = r["task_id"].as_str().unwrap();
    let t = d
        .get_ok(&format!("/api/v1/conversations/{task}/continuation"))
        .await;
    assert_eq!(t["parent_conversation_id"], c, "{t}");
}
