//! Turns parked at the vendor's usage limit (issue 29), with the fake agent speaking
//! Codex's and Claude's limit signals: the turn ends `usage_limit`, the person is told
//! when tether continues, and at the reset the same session goes on by itself, once;
//! `/cancel` stops it; a second conversation on the limited account is parked at once,
//! its message kept, and wakes after the first (staggered).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::Value;
use tether_testkit::{Daemon, DaemonOptions, within_for};

use crate::reliability_util::agents_per_dialect;

const CONTINUE: &str = "The usage limit has reset: continue where you stopped.";

async fn daemon() -> (Daemon, tempfile::TempDir) {
    let state = tempfile::tempdir().unwrap();
    let mut config = agents_per_dialect("", state.path(), &[]);
    config.push_str("[limits]\nunknown_reset_secs = 1\nstagger_secs = 1\n");
    let d = Daemon::start(DaemonOptions {
        extra_config: config,
        ..Default::default()
    })
    .await;
    (d, state)
}

async fn turns(d: &Daemon, sid: &str) -> Vec<Value> {
    let t = d.get_ok(&format!("/api/v1/sessions/{sid}/turns")).await;
    t.as_array()
        .cloned()
        .unwrap_or_else(|| t["turns"].as_array().cloned().unwrap_or_default())
}

/// Waits for the session's `n`-th turn to end; it.
async fn nth_turn_ended(d: &Daemon, sid: &str, n: usize) -> Value {
    within_for("a continuation", Duration::from_secs(20), async {
        loop {
            let all = turns(d, sid).await;
            if let Some(t) = all.get(n - 1)
                && t["status"] != "running"
                && t["status"] != "queued"
            {
                return t.clone();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

async fn history_text(d: &Daemon, c: &str) -> String {
    d.get_ok(&format!("/api/v1/conversations/{c}/messages"))
        .await
        .to_string()
}

#[tokio::test]
async fn a_turn_stopped_by_the_limit_continues_in_the_same_session_at_the_reset() {
    let (d, _state) = daemon().await;
    // Codex says nothing of the reset (the wait is unknown_reset_secs); Claude's
    // rate_limit_event says it.
    for dialect in ["codex", "claude"] {
        let c = d.new_conversation(Some(dialect)).await;
        let (o, t) = d.say_and_wait(&c, "limit 1").await;
        assert_eq!(t["status"], "failed", "{dialect}: {t}");
        assert_eq!(t["error_code"], "usage_limit", "{dialect}: {t}");
        let sid = o["session_id"].as_str().unwrap().to_owned();
        let told = history_text(&d, &c).await;
        assert!(told.contains("I will continue at"), "{dialect}: {told}");
        assert!(told.contains("/cancel"), "{dialect}: {told}");
        let next = nth_turn_ended(&d, &sid, 2).await;
        assert_eq!(next["input"], CONTINUE, "{dialect}: {next}");
        assert_eq!(next["status"], "completed", "{dialect}: {next}");
        // The same session: the agent remembers the turn the limit stopped.
        assert!(
            next["result_text"].as_str().unwrap().contains("limit 1"),
            "{dialect}: {next}"
        );
        // Once: no third turn follows.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert_eq!(turns(&d, &sid).await.len(), 2, "{dialect}");
    }
}

#[tokio::test]
async fn cancel_stops_the_continuation() {
    let (d, _state) = daemon().await;
    let c = d.new_conversation(Some("codex")).await;
    let (o, t) = d.say_and_wait(&c, "limit 1").await;
    assert_eq!(t["error_code"], "usage_limit", "{t}");
    let sid = o["session_id"].as_str().unwrap().to_owned();
    let r = d.say(&c, "/cancel").await;
    assert_eq!(
        r["reply"], "The automatic continuation was cancelled.",
        "{r}"
    );
    let r = d.say(&c, "/cancel").await;
    assert_eq!(r["reply"], "No continuation is waiting.", "{r}");
    tokio::time::sleep(Duration::from_millis(3000)).await;
    assert_eq!(turns(&d, &sid).await.len(), 1, "nothing continued");
}

#[tokio::test]
async fn a_limited_account_parks_new_turns_at_once_and_they_wake_staggered() {
    let (d, _state) = daemon().await;
    let a = d.new_conversation(Some("codex")).await;
    let (oa, t) = d.say_and_wait(&a, "limit 2").await;
    assert_eq!(t["error_code"], "usage_limit", "{t}");
    let parked = Instant::now();
    // Another conversation on the same account: parked before its agent is asked.
    let b = d.new_conversation(Some("codex")).await;
    let (ob, tb) = d.say_and_wait(&b, "hello there").await;
    assert_eq!(tb["status"], "failed", "{tb}");
    assert_eq!(tb["error_code"], "usage_limit", "{tb}");
    let (sa, sb) = (
        oa["session_id"].as_str().unwrap().to_owned(),
        ob["session_id"].as_str().unwrap().to_owned(),
    );
    let next_a = nth_turn_ended(&d, &sa, 2).await;
    let next_b = nth_turn_ended(&d, &sb, 2).await;
    assert_eq!(next_a["input"], CONTINUE, "{next_a}");
    // B's own message was kept and goes at the reset.
    assert_eq!(next_b["input"], "hello there", "{next_b}");
    assert_eq!(next_b["status"], "completed", "{next_b}");
    assert!(
        parked.elapsed() >= Duration::from_secs(2),
        "{:?}",
        parked.elapsed()
    );
    let (at_a, at_b) = (
        next_a["started_at_ms"].as_i64().unwrap(),
        next_b["started_at_ms"].as_i64().unwrap(),
    );
    assert!(at_b - at_a >= 700, "staggered: a at {at_a}, b at {at_b}");
}
