//! The usage ledger with the REAL CLIs against the mock model (issue 29): after a mixed
//! workload — Codex and Claude turns, a Codex parent delegating to a Claude child, a
//! turn the model fails, a turn stopped mid-stream — the ledger's totals equal the mock
//! model's own count (what its responses reported), to the token; the parent's tree
//! holds the child's usage.
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
    let agents = real_agents::codex_and_claude(&model.base_url());
    let d = Daemon::start(DaemonOptions {
        extra_config: agents.config.clone(),
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

    // Reports arrive as the CLIs print them; give the last ones a moment.
    let (billed_in, billed_out) = model.billed_tokens();
    let team = within("the ledger to catch up", async {
        loop {
            let team = d.get_ok("/api/v1/usage?scope=team").await;
            let t = &team["totals"];
            let input = t["input_tokens"].as_u64().unwrap()
                + t["cached_input_tokens"].as_u64().unwrap()
                + t["cache_write_tokens"].as_u64().unwrap();
            let output =
                t["output_tokens"].as_u64().unwrap() + t["reasoning_tokens"].as_u64().unwrap();
            if (input, output) == model.billed_tokens() {
                return team;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    eprintln!(
        "usage exactness: mock model billed {billed_in} in / {billed_out} out; ledger {}",
        team["totals"]
    );
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
