//! End to end: draining a node (issue 31). SIGTERM makes it refuse new work with
//! `draining` (503) and answer readiness 503, evicts idle sessions at once, lets the
//! running turn finish (not interrupted), then exit cleanly; after the restart the
//! conversations continue their sessions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::json;
use tether_testkit::{Daemon, DaemonOptions, within};

#[tokio::test]
async fn sigterm_drains_the_running_turn_refuses_new_work_and_exits() {
    let mut d = Daemon::start(DaemonOptions {
        extra_config: "[server]\ndrain_grace_secs = 30\n".to_owned(),
        ..DaemonOptions::default()
    })
    .await;
    // A: a session that will run a 3-second turn across the drain.
    let a = d.new_conversation(None).await;
    let (first, _) = d.say_and_wait(&a, "remember apples").await;
    let session_a = first["session_id"].as_str().unwrap().to_owned();
    // B: a live, idle session.
    let b = d.new_conversation(None).await;
    let (ob, _) = d.say_and_wait(&b, "remember pears").await;
    let session_b = ob["session_id"].as_str().unwrap().to_owned();
    assert_eq!(d.pool_sessions().await.len(), 2);
    let running = d.say(&a, "stream 30 100").await;
    d.wait_conversation(&a, "turn running", |c| c["state"] == "bound/running")
        .await;

    d.sigterm();
    within("readiness says draining", async {
        loop {
            let (status, body) = d.get("/api/v1/ready").await;
            if status == 503 && body["status"] == "draining" {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    // The idle session was evicted at once; the running one stays.
    within("idle session evicted", async {
        while d.pool_sessions().await != vec![session_a.clone()] {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    // New work is refused with a stable code, nothing stored.
    let (status, body) = d
        .post(
            &format!("/api/v1/conversations/{b}/messages"),
            json!({"text": "more pears"}),
        )
        .await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "draining", "{body}");
    // Reads still work while the turn runs.
    let conv = d.get_ok(&format!("/api/v1/conversations/{a}")).await;
    assert_eq!(conv["state"], "bound/running");

    let exit = d.wait_exit(Duration::from_secs(30)).await;
    assert!(exit.success(), "{exit:?}");

    d.launch_again().await;
    let turns = d.all_turns(&session_a).await;
    let t = turns
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == running["turn_id"])
        .unwrap()
        .clone();
    assert_eq!(t["status"], "completed", "the drain let the turn end: {t}");
    let hist = d
        .get_ok(&format!("/api/v1/conversations/{b}/messages"))
        .await;
    assert!(
        !hist.to_string().contains("more pears"),
        "a refused message is not stored: {hist}"
    );
    // Both conversations continue their sessions.
    let (again, _) = d.say_and_wait(&b, "what do you remember").await;
    assert_eq!(again["session_id"], session_b.as_str());
    let (again, done) = d.say_and_wait(&a, "what do you remember").await;
    assert_eq!(again["session_id"], session_a.as_str());
    assert!(done.to_string().contains("apples"), "{done}");
}

#[tokio::test]
async fn tether_drain_asks_the_daemon_and_waits_for_it_to_exit() {
    let mut d = Daemon::start(DaemonOptions::default()).await;
    let a = d.new_conversation(None).await;
    d.say_and_wait(&a, "hello").await;
    let out = within("tether drain", d.cli(&["drain"])).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("drains") && stdout.contains("stopped"),
        "{stdout}"
    );
    let exit = d.wait_exit(Duration::from_secs(10)).await;
    assert!(exit.success(), "{exit:?}");
}
