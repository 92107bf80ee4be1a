//! The usage ledger with the REAL CLIs against the mock model (issue 29): after a mixed
//! workload — Codex, Claude and gemini turns, a Codex parent delegating to a Claude
//! child, a turn the model fails, a turn stopped mid-stream, a SIGKILL of the daemon in
//! the middle of a Codex turn and the session resumed after it — the ledger's totals
//! equal the mock model's own count (what its responses reported), to the token; the
//! parent's tree holds the child's usage. (The failover is `real_cluster`'s.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::{Value, json};
use tether_testkit::real_agents;
use tether_testkit::{Daemon, DaemonOptions, MockModel, within};

fn ids(o: &Value) -> (String, String) {
    (
        o["session_id"].as_str().unwrap().to_owned(),
        o["turn_id"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test]
async fn the_ledger_equals_the_models_own_count_after_a_mixed_workload() {
    let model = MockModel::start().await;
    let agents = real_agents::codex_claude_and_gemini(&model.base_url());
    let mut d = Daemon::start(DaemonOptions {
        extra_config: agents.config.clone(),
        start_timeout_secs: 30,
        ..DaemonOptions::default()
    })
    .await;

    // Codex: two turns, and one the model fails.
    let cx = d.new_conversation(Some("codex")).await;
    for text in ["hello codex", "and again"] {
        let (_, t) = d.say_and_wait(&cx, text).await;
        assert_eq!(t["status"], "completed", "{t}");
    }
    let (_, t) = d.say_and_wait(&cx, "error 500").await;
    assert_eq!(t["status"], "failed", "{t}");
    // Claude: a turn, and one stopped while it streams.
    let cl = d.new_conversation(Some("claude")).await;
    let (_, t) = d.say_and_wait(&cl, "hello claude").await;
    assert_eq!(t["status"], "completed", "{t}");
    let o = d.say(&cl, "slow 40 100").await;
    let (sid, tid) = ids(&o);
    tokio::time::sleep(Duration::from_millis(800)).await;
    d.post_ok(&format!("/api/v1/conversations/{cl}/stop"), json!({}))
        .await;
    let t = d.wait_turn(&sid, &tid).await;
    assert_eq!(t["status"], "cancelled", "{t}");
    // A Codex parent delegates to a Claude child and collects its result.
    let parent = d.new_conversation(Some("codex")).await;
    let args = json!({"agent_type": "claude", "task": "child task"});
    let (_, t) = d
        .say_and_wait(&parent, &format!("mcp tether delegate_to_agent {args}"))
        .await;
    assert_eq!(t["status"], "completed", "{t}");
    let text = t["result_text"].as_str().unwrap_or_default().to_owned();
    let task = text
        .split("\"task_id\":\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .unwrap_or_else(|| panic!("no task id in {text}"))
        .to_owned();
    let status = json!({"task_ids": [task], "wait_ms": 40000});
    let (_, t) = d
        .say_and_wait(
            &parent,
            &format!("mcp tether get_delegation_status {status}"),
        )
        .await;
    assert!(
        t["result_text"].as_str().unwrap().contains("completed"),
        "{t}"
    );

    // gemini: two turns (it reports a turn's usage in the prompt's `_meta.quota`).
    let g = d.new_conversation(Some("gemini")).await;
    for text in ["hello gemini", "and gemini again"] {
        let (_, t) = d.say_and_wait(&g, text).await;
        assert_eq!(t["status"], "completed", "{t}");
    }
    let gemini = d
        .get_ok(&format!("/api/v1/usage?conversation_id={g}"))
        .await;
    assert_eq!(gemini["totals"]["unreported_turns"], 0, "{gemini}");

    // A SIGKILL in the middle of a Codex turn: the next start ends the codex the dead
    // daemon left (its answer, and the usage that comes with it, never completes), and
    // the next message resumes the same thread.
    let o = d.say(&cx, "slow 80 100").await;
    let (sid, tid) = ids(&o);
    within("the first delta", async {
        loop {
            let page = d.get_ok(&format!("/api/v1/sessions/{sid}/events")).await;
            if page["events"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["turn_id"] == tid.as_str() && e["payload"]["type"] == "message_delta")
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    d.restart().await;
    let (o, t) = d.say_and_wait(&cx, "after the kill").await;
    assert_eq!(o["session_id"], sid.as_str(), "{o}");
    assert_eq!(t["status"], "completed", "{t}");

    let team = crate::ledger_equals_the_models_count(&d, &model).await;
    let (billed_in, billed_out) = model.billed_tokens();
    assert!(billed_in > 0 && billed_out > 0);
    // The child's usage is in the parent's tree, not in the parent's own conversation.
    let own = d
        .get_ok(&format!("/api/v1/usage?conversation_id={parent}"))
        .await;
    let tree = d
        .get_ok(&format!(
            "/api/v1/usage?scope=tree&conversation_id={parent}"
        ))
        .await;
    let child = d
        .get_ok(&format!("/api/v1/usage?conversation_id={task}"))
        .await;
    let n = |v: &Value| v["totals"]["total_tokens"].as_i64().unwrap();
    assert!(n(&child) > 0, "{child}");
    assert_eq!(n(&tree), n(&own) + n(&child), "{tree}");
    // Priced by the built-in table where the model is known (codex's and claude's
    // defaults), each report once.
    assert!(team["totals"]["cost_usd"].as_f64().unwrap() > 0.0, "{team}");
}
