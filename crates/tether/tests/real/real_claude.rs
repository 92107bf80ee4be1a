//! End to end with the REAL `claude` (pinned in tools/agents) against the mock model
//! server, through tether's HTTP API: a session that keeps its history, approvals that
//! really allow or stop a shell command, /stop, and resume after a daemon restart. Each
//! test has its own CLAUDE_CONFIG_DIR and runs offline (loopback only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tether_testkit::real_agents::{self, RealAgent};
use tether_testkit::{Api, Daemon, DaemonOptions, MockModel, within};

/// A test daemon with agent `claude` = the real claude (with partial messages) talking to
/// `model`, and its own CLAUDE_CONFIG_DIR (keep it alive as long as the daemon).
async fn daemon_with_claude(model: &MockModel) -> (Daemon, tempfile::TempDir) {
    let config_dir = tempfile::tempdir().unwrap();
    let env = real_agents::claude_env(&model.base_url(), config_dir.path());
    let (_, cli, args) = real_agents::agent_launch(RealAgent::Claude);
    let args: Vec<String> = args.iter().map(|a| real_agents::toml_str(a)).collect();
    let mut toml = format!(
        "[agents.claude]\ndriver = \"claude\"\ncommand = {}\nargs = [{}]\n\n[agents.claude.env]\n",
        real_agents::toml_str(&tether_testkit::agent_cli(cli).display().to_string()),
        args.join(", ")
    );
    for (k, v) in &env {
        toml.push_str(&format!("{k} = {}\n", real_agents::toml_str(v)));
    }
    let d = Daemon::start(DaemonOptions {
        extra_config: toml,
        ..DaemonOptions::default()
    })
    .await;
    (d, config_dir)
}

fn ids(out: &Value) -> (String, String) {
    (
        out["session_id"].as_str().unwrap().to_owned(),
        out["turn_id"].as_str().unwrap().to_owned(),
    )
}

/// The concatenated `message_delta` texts of one turn.
async fn streamed_text(d: &Daemon, sid: &str, tid: &str) -> String {
    let page = d.get_ok(&format!("/api/v1/sessions/{sid}/events")).await;
    page["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["turn_id"] == tid && e["payload"]["type"] == "message_delta")
        .map(|e| e["payload"]["text"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn first_turn_and_follow_up_continue_one_session() {
    let model = MockModel::start().await;
    let (d, _config) = daemon_with_claude(&model).await;
    let c = d.new_conversation(Some("claude")).await;
    let (o1, t1) = d.say_and_wait(&c, "hello claude").await;
    assert_eq!(t1["status"], "completed", "{t1}");
    assert_eq!(t1["result_text"], "mock reply to: hello claude (turn 1)");
    assert!(t1["usage"]["output_tokens"].as_u64().unwrap() > 0, "{t1}");
    let (sid, tid) = ids(&o1);
    // Streamed as partial messages, shown once.
    assert_eq!(streamed_text(&d, &sid, &tid).await, t1["result_text"]);

    let (o2, t2) = d.say_and_wait(&c, "and again").await;
    assert_eq!(o2["session_id"], sid.as_str());
    assert_eq!(
        t2["result_text"], "mock reply to: and again (turn 2)",
        "{t2}"
    );
    let requests = model.main_requests(Api::AnthropicMessages);
    let last = requests.last().unwrap();
    assert_eq!(last.user_texts(), ["hello claude", "and again"]);
    assert_eq!(
        last.assistant_texts(),
        ["mock reply to: hello claude (turn 1)"]
    );
    let session = d.get_ok(&format!("/api/v1/sessions/{sid}")).await;
    assert_eq!(session["external_id"].as_str().unwrap().len(), 36);
}

#[tokio::test]
async fn shell_commands_wait_for_approval() {
    let model = MockModel::start().await;
    let (d, _config) = daemon_with_claude(&model).await;
    let c = d.new_conversation(Some("claude")).await;
    for (file, decision) in [("allowed.txt", "allow"), ("denied.txt", "deny")] {
        let o = d.say(&c, &format!("shell touch {file}")).await;
        let a = d.pending_approval(&c).await;
        assert_eq!(a["title"], format!("Bash: touch {file}"), "{a}");
        assert!(!d.work_dir().join(file).exists(), "ran before approval");
        d.post_ok(
            &format!("/api/v1/approvals/{}", a["id"].as_str().unwrap()),
            json!({ "decision": decision }),
        )
        .await;
        let (sid, tid) = ids(&o);
        let t = d.wait_turn(&sid, &tid).await;
        assert_eq!(t["status"], "completed", "{t}");
        assert!(
            t["result_text"].as_str().unwrap().starts_with("done: "),
            "{t}"
        );
    }
    assert!(d.work_dir().join("allowed.txt").exists());
    assert!(!d.work_dir().join("denied.txt").exists());
    // The denial reached the model as the tool's result.
    let requests = model.main_requests(Api::AnthropicMessages);
    let body = requests.last().unwrap().body.to_string();
    assert!(body.contains("denied by the person"), "{body}");
}

#[tokio::test]
async fn stop_interrupts_promptly_and_the_session_goes_on() {
    let model = MockModel::start().await;
    let (d, _config) = daemon_with_claude(&model).await;
    let c = d.new_conversation(Some("claude")).await;
    let o = d.say(&c, "slow 50 100").await;
    let (sid, tid) = ids(&o);
    within("first delta", async {
        while streamed_text(&d, &sid, &tid).await.is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let stopped = Instant::now();
    d.post_ok(&format!("/api/v1/conversations/{c}/stop"), json!({}))
        .await;
    let t = d.wait_turn(&sid, &tid).await;
    assert_eq!(t["status"], "cancelled", "{t}");
    assert!(
        stopped.elapsed() < Duration::from_secs(2),
        "{:?}",
        stopped.elapsed()
    );
    let (o2, t2) = d.say_and_wait(&c, "after the stop").await;
    assert_eq!(o2["session_id"], sid.as_str());
    assert_eq!(t2["status"], "completed", "{t2}");
    let requests = model.main_requests(Api::AnthropicMessages);
    let texts = requests.last().unwrap().user_texts();
    assert_eq!(texts.first().map(String::as_str), Some("slow 50 100"));
    // claude tells the model about the interruption in the next user message.
    let last = texts.last().unwrap();
    assert!(last.ends_with("after the stop"), "{texts:?}");
    assert!(last.contains("interrupted"), "{texts:?}");
}

#[tokio::test]
async fn restart_resumes_the_same_session_with_its_history() {
    let model = MockModel::start().await;
    let (mut d, config) = daemon_with_claude(&model).await;
    let c = d.new_conversation(Some("claude")).await;
    let (o1, t1) = d.say_and_wait(&c, "remember apples").await;
    assert_eq!(t1["status"], "completed", "{t1}");
    let sid = ids(&o1).0;
    let external = d.get_ok(&format!("/api/v1/sessions/{sid}")).await["external_id"].clone();

    d.restart().await;

    let (o2, t2) = d.say_and_wait(&c, "what did I say?").await;
    assert_eq!(o2["session_id"], sid.as_str());
    assert_eq!(t2["status"], "completed", "{t2}");
    assert_eq!(
        t2["result_text"], "mock reply to: what did I say? (turn 2)",
        "{t2}"
    );
    assert_eq!(
        d.get_ok(&format!("/api/v1/sessions/{sid}")).await["external_id"],
        external
    );
    let requests = model.main_requests(Api::AnthropicMessages);
    assert_eq!(
        requests.last().unwrap().user_texts(),
        ["remember apples", "what did I say?"]
    );

    // claude lost the conversation: resume fails before the prompt reaches the model, and
    // the conversation stays bound to its session.
    d.restart().await;
    std::fs::remove_dir_all(config.path().join("projects")).unwrap();
    let (o3, t3) = d.say_and_wait(&c, "are you there?").await;
    assert_eq!(o3["session_id"], sid.as_str(), "no silent new session");
    assert_eq!(t3["status"], "failed", "{t3}");
    assert_eq!(t3["error_code"], "resume_unavailable", "{t3}");
    assert_eq!(
        model.main_requests(Api::AnthropicMessages).len(),
        requests.len()
    );
}
