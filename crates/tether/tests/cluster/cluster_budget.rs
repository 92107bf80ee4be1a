//! A team budget on a 3-node cluster (issue 29): 20 turns at once, spread over the
//! nodes, each spending far past a small cap in reports of 50 tokens. The counter is one
//! row the nodes add to under its lock, so every turn is stopped by the report that
//! finds the cap crossed; the overshoot is bounded by one report per running turn (plus
//! what an agent sends while its cancel travels). The figure is printed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::{Value, json};
use tether_testkit::{Cluster, DaemonOptions, bin_path, within_for};

const CAP: i64 = 2_000;
const REPORT: i64 = 50;
const TURNS: usize = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_turns_on_three_nodes_stop_at_a_small_cap_with_a_bounded_overshoot() {
    let state = tempfile::tempdir().unwrap();
    let agent = format!(
        "[agents.spender]\ndriver = \"codex\"\ncommand = {:?}\nargs = [\"--dialect\", \"codex\", \"--state-dir\", {:?}]\n\n",
        bin_path("fake-agent").display().to_string(),
        state.path().display().to_string(),
    );
    let cluster = Cluster::start(
        3,
        DaemonOptions {
            extra_config: agent,
            ..DaemonOptions::default()
        },
    )
    .await;
    let first = cluster.node(0);
    let (status, b) = first
        .post(
            "/api/v1/budgets",
            json!({"scope": "team", "limit": CAP, "period": "day"}),
        )
        .await;
    assert_eq!(status, 201, "{b}");
    let mut convs = Vec::new();
    for i in 0..TURNS {
        let node = cluster.node(i % 3);
        convs.push((i % 3, node.new_conversation(Some("spender")).await));
    }
    // 100 reports of 50 tokens, 100 ms apart: each turn alone would spend 5 000. (20 ms
    // apart, a cancel delayed past 20 ms by a loaded machine let a third report through:
    // the bound below is per report interval, not a time limit on the cancel.)
    let sends = convs.iter().map(|(n, c)| {
        let node = cluster.node(*n);
        async move { node.say(c, &format!("spend 100 {REPORT} 100")).await }
    });
    let started: Vec<Value> = futures::future::join_all(sends).await;
    let mut refused = 0;
    for ((n, _), o) in convs.iter().zip(&started) {
        let node = cluster.node(*n);
        let (sid, tid) = (
            o["session_id"].as_str().unwrap(),
            o["turn_id"].as_str().unwrap(),
        );
        let t = within_for(
            "a turn to end",
            Duration::from_secs(60),
            node.wait_turn(sid, tid),
        )
        .await;
        assert_eq!(t["status"], "failed", "{t}");
        assert_eq!(t["error_code"], "budget_exceeded", "{t}");
        let msg = t["error_message"].as_str().unwrap_or_default();
        if msg.starts_with("refused") {
            refused += 1;
        }
    }
    let team = first.get_ok("/api/v1/usage?scope=team").await;
    let spent = team["totals"]["total_tokens"].as_i64().unwrap();
    let reports = team["totals"]["reports"].as_i64().unwrap();
    let overshoot = spent - CAP;
    let running = TURNS as i64 - refused;
    eprintln!(
        "budget overshoot on 3 nodes: cap {CAP}, spent {spent} in {reports} reports of {REPORT}: \
         {overshoot} over ({:.0} % of the cap; {:.2} reports per turn that ran, {refused} of {TURNS} \
         refused before their agent started)",
        overshoot as f64 * 100.0 / CAP as f64,
        overshoot as f64 / REPORT as f64 / running.max(1) as f64,
    );
    assert!(spent >= CAP, "{team}");
    // One report per running turn, and one more each that the agent may send before
    // its cancel arrives.
    assert!(
        overshoot <= 2 * REPORT * running,
        "overshoot {overshoot} with {running} turns running: {team}"
    );
    assert_eq!(team["budgets"][0]["over"], true, "{team}");
}
