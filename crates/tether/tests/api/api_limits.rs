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
    let t = d.all_turns(sid).await;
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
        let told = d.wait_history(&c, "I will continue at").await;
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
    // Due a stagger (1 s, less a quarter for jitter) apart; each fires at the timer
    // loop's next look (every 500 ms), so their turns start at least 250 ms apart.
    assert!(at_b - at_a >= 250, "staggered: a at {at_a}, b at {at_b}");
}

#[tokio::test]
async fn a_parked_continuation_survives_a_sigkill_of_the_daemon() {
    let state = tempfile::tempdir().unwrap();
    let mut config = agents_per_dialect("", state.path(), &[]);
    config.push_str("[limits]\nunknown_reset_secs = 1\nstagger_secs = 1\n");
    let mut d = Daemon::start(DaemonOptions {
        extra_config: config,
        ..Default::default()
    })
    .await;
    let c = d.new_conversation(Some("claude")).await;
    // Resets in 3 s: the daemon is killed and back before then.
    let (o, t) = d.say_and_wait(&c, "limit 3").await;
    assert_eq!(t["error_code"], "usage_limit", "{t}");
    let sid = o["session_id"].as_str().unwrap().to_owned();
    d.restart().await;
    let next = nth_turn_ended(&d, &sid, 2).await;
    assert_eq!(next["input"], CONTINUE, "{next}");
    assert_eq!(next["status"], "completed", "{next}");
    // The same session, resumed after the restart: it remembers the limited turn.
    assert!(
        next["result_text"].as_str().unwrap().contains("limit 3"),
        "{next}"
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(turns(&d, &sid).await.len(), 2, "once");
}

#[tokio::test]
async fn a_persons_message_runs_instead_of_the_continuation() {
    let (d, _state) = daemon().await;
    let c = d.new_conversation(Some("codex")).await;
    let (o, t) = d.say_and_wait(&c, "limit 3").await;
    assert_eq!(t["error_code"], "usage_limit", "{t}");
    let sid = o["session_id"].as_str().unwrap().to_owned();
    // The account is limited for 3 s: this message parks at once too, and its own
    // continuation replaces the first (the person's words go, not "continue").
    let (_, t2) = d.say_and_wait(&c, "my own words").await;
    assert_eq!(t2["error_code"], "usage_limit", "{t2}");
    let next = nth_turn_ended(&d, &sid, 3).await;
    assert_eq!(next["input"], "my own words", "{next}");
    assert_eq!(next["status"], "completed", "{next}");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let all = turns(&d, &sid).await;
    assert_eq!(all.len(), 3, "one continuation, not two: {all:?}");
    // After the reset a message runs as usual and nothing continues after it.
    let (_, t4) = d.say_and_wait(&c, "hello again").await;
    assert_eq!(t4["status"], "completed", "{t4}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(turns(&d, &sid).await.len(), 4);
}

#[tokio::test]
async fn a_continuation_that_meets_the_limit_again_counts_as_the_next_attempt() {
    let state = tempfile::tempdir().unwrap();
    let mut config = agents_per_dialect("", state.path(), &[]);
    config.push_str("[limits]\nunknown_reset_secs = 1\nstagger_secs = 1\nattempts = 1\n");
    let d = Daemon::start(DaemonOptions {
        extra_config: config,
        ..Default::default()
    })
    .await;
    // Gemini's shape (ACP error 429, "Suggested retry after 1s"). b's turn limits the
    // account; a's message is parked at once, kept, and sent again at the reset (after
    // b's continuation, staggered), where it meets the limit again: with one attempt
    // allowed, a gives up.
    let b = d.new_conversation(Some("acp")).await;
    let (_, tb) = d.say_and_wait(&b, "limit 1").await;
    assert_eq!(tb["error_code"], "usage_limit", "{tb}");
    let a = d.new_conversation(Some("acp")).await;
    let (o, t) = d.say_and_wait(&a, "limit 1").await;
    assert_eq!(t["error_code"], "usage_limit", "{t}");
    let sid = o["session_id"].as_str().unwrap().to_owned();
    let second = nth_turn_ended(&d, &sid, 2).await;
    assert_eq!(second["input"], "limit 1", "{second}");
    assert_eq!(second["error_code"], "usage_limit", "{second}");
    let history = d.wait_history(&a, "I stop trying").await;
    assert!(history.contains("after 1 continuations"), "{history}");
    tokio::time::sleep(Duration::from_millis(5000)).await;
    assert_eq!(turns(&d, &sid).await.len(), 2, "no further continuation");
}
