//! End to end with the REAL `codex app-server` (pinned in tools/agents) against the mock
//! model server, through tether's HTTP API: a thread that keeps its history, approvals
//! that really allow or stop a shell command, /stop, and resume after a daemon restart.
//! Each test has its own CODEX_HOME and runs offline (loopback only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tether_testkit::real_agents::{self, RealAgent};
use tether_testkit::{Api, Daemon, DaemonOptions, MockModel, within};

/// A test daemon with agent `codex` = the real codex talking to `model`, and its own
/// CODEX_HOME (keep it alive as long as the daemon).
async fn daemon_with_codex(model: &MockModel) -> (Daemon, tempfile::TempDir) {
    let home = real_agents::codex_home(&model.base_url());
    let env = real_agents::codex_env(home.path());
    let d = Daemon::start(DaemonOptions {
        extra_config: real_agents::agent_toml("codex", RealAgent::Codex, &env),
        ..DaemonOptions::default()
    })
    .await;
    (d, home)
}

fn ids(out: &Value) -> (String, String) {
    (
        out["session_id"].as_str().unwrap().to_owned(),
        out["turn_id"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test]
async fn first_turn_and_follow_up_continue_one_thread() {
    let model = MockModel::start().await;
    let (d, _codex_home) = daemon_with_codex(&model).await;
    let c = d.new_conversation(Some("codex")).await;
    let (o1, t1) = d.say_and_wait(&c, "hello codex").await;
    assert_eq!(t1["status"], "completed", "{t1}");
    assert_eq!(t1["result_text"], "mock reply to: hello codex (turn 1)");
    assert!(
        t1["usage"]["total"]["totalTokens"].as_u64().unwrap() > 0,
        "{t1}"
    );
    let (o2, t2) = d.say_and_wait(&c, "and again").await;
    assert_eq!(o2["session_id"], o1["session_id"]);
    assert_eq!(
        t2["result_text"], "mock reply to: and again (turn 2)",
        "{t2}"
    );
    let requests = model.main_requests(Api::OpenAiResponses);
    let last = requests.last().unwrap();
    assert_eq!(last.user_texts(), ["hello codex", "and again"]);
    assert_eq!(
        last.assistant_texts(),
        ["mock reply to: hello codex (turn 1)"]
    );
    let session = d.get_ok(&format!("/api/v1/sessions/{}", ids(&o1).0)).await;
    assert!(!session["external_id"].as_str().unwrap().is_empty());
}

#[tokio::test]
async fn shell_commands_and_file_changes_wait_for_approval() {
    let model = MockModel::start().await;
    let (d, _codex_home) = daemon_with_codex(&model).await;
    let c = d.new_conversation(Some("codex")).await;
    for (file, decision) in [("allowed.txt", "allow"), ("denied.txt", "deny")] {
        let o = d.say(&c, &format!("shell touch {file}")).await;
        let a = d.pending_approval(&c).await;
        let title = a["title"].as_str().unwrap();
        assert!(title.contains(&format!("touch {file}")), "{a}");
        assert!(!d.work_dir().join(file).exists(), "ran before approval");
        d.post_ok(
            &format!("/api/v1/approvals/{}", a["id"].as_str().unwrap()),
            json!({ "decision": decision }),
        )
        .await;
        let (sid, tid) = ids(&o);
        let t = d.wait_turn(&sid, &tid).await;
        assert_eq!(t["status"], "completed", "{t}");
    }
    assert!(d.work_dir().join("allowed.txt").exists());
    assert!(!d.work_dir().join("denied.txt").exists());

    // A file change (apply_patch) is asked for with its path, and applied once allowed.
    let o = d.say(&c, "patch edited.txt hello").await;
    let a = d.pending_approval(&c).await;
    assert!(a["title"].as_str().unwrap().ends_with("edited.txt"), "{a}");
    assert!(!d.work_dir().join("edited.txt").exists());
    d.post_ok(
        &format!("/api/v1/approvals/{}", a["id"].as_str().unwrap()),
        json!({ "decision": "allow" }),
    )
    .await;
    let (sid, tid) = ids(&o);
    assert_eq!(d.wait_turn(&sid, &tid).await["status"], "completed");
    let written = std::fs::read_to_string(d.work_dir().join("edited.txt")).unwrap();
    assert_eq!(written.trim(), "hello");
}

#[tokio::test]
async fn stop_interrupts_promptly_and_the_thread_goes_on() {
    let model = MockModel::start().await;
    let (d, _codex_home) = daemon_with_codex(&model).await;
    let c = d.new_conversation(Some("codex")).await;
    let o = d.say(&c, "slow 50 100").await;
    let (sid, tid) = ids(&o);
    within("first delta", async {
        loop {
            let page = d.get_ok(&format!("/api/v1/sessions/{sid}/events")).await;
            if page["events"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["payload"]["type"] == "message_delta")
            {
                break;
            }
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
    let last = model.main_requests(Api::OpenAiResponses);
    let texts = last.last().unwrap().user_texts();
    assert_eq!(texts.first().map(String::as_str), Some("slow 50 100"));
    assert_eq!(texts.last().map(String::as_str), Some("after the stop"));
}

#[tokio::test]
async fn restart_resumes_the_same_thread_with_its_history() {
    let model = MockModel::start().await;
    let (mut d, _codex_home) = daemon_with_codex(&model).await;
    let c = d.new_conversation(Some("codex")).await;
    let (o1, t1) = d.say_and_wait(&c, "remember apples").await;
    assert_eq!(t1["status"], "completed", "{t1}");
    let sid = ids(&o1).0;
    let thread = d.get_ok(&format!("/api/v1/sessions/{sid}")).await["external_id"].clone();

    d.restart().await;

    let (o2, t2) = d.say_and_wait(&c, "what did I say?").await;
    assert_eq!(o2["session_id"], sid.as_str());
    assert_eq!(t2["status"], "completed", "{t2}");
    assert_eq!(
        d.get_ok(&format!("/api/v1/sessions/{sid}")).await["external_id"],
        thread
    );
    let requests = model.main_requests(Api::OpenAiResponses);
    assert_eq!(
        requests.last().unwrap().user_texts(),
        ["remember apples", "what did I say?"]
    );
}
