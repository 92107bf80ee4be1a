//! Delegation across a restart and an eviction: results persist, an interrupted child
//! turn is reported to the parent, and the child resumes its own session.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::delegation_util::*;
use serde_json::json;
use tether_testkit::{Daemon, DaemonOptions};

#[tokio::test]
async fn restart_in_the_middle_of_a_child_turn() {
    let mut d = Daemon::start(DaemonOptions::default()).await;
    let parent = d.new_conversation(None).await;
    let done = delegate(&d, &parent, "fake", "first task").await;
    let t = wait_task(&d, &parent, &done).await;
    assert_eq!(t["status"], "completed");
    let task = delegate(&d, &parent, "fake", "hang").await;
    wait_availability(&d, &task, "running").await;
    wait_child_session(&d, &task).await;

    d.restart().await;

    // The finished task's result survived; the interrupted one failed and can resume.
    let c = get_ready(&d, &format!("/api/v1/conversations/{done}/continuation")).await;
    assert_eq!(
        (c["status"].as_str(), c["turn_version"].as_i64()),
        (Some("completed"), Some(1))
    );
    let c = wait_availability(&d, &task, "continuable_resume").await;
    assert_eq!(c["status"], "failed", "{c}");
    // The parent's session was told (after the restart) how the first turn ended.
    let completed = within_events(&d, &parent, &task).await;
    assert_eq!(completed["payload"]["outcome"]["status"], "failed");
    assert_eq!(
        completed["payload"]["outcome"]["error_code"],
        "subagent_error"
    );
    assert!(
        completed["payload"]["outcome"]["message"]
            .as_str()
            .unwrap()
            .contains("interrupted")
    );

    // The parent (a new process after the restart) continues the same child session,
    // which remembers the interrupted task.
    let r = mcp(
        &d,
        &parent,
        "continue_with_session",
        json!({"task_id": task, "message": "go on", "continuation_id": "r1"}),
    )
    .await;
    assert_eq!(r["turn_version"], 2, "{r}");
    let t = wait_task(&d, &parent, &task).await;
    assert_eq!(t["status"], "completed", "{t}");
    assert_eq!(t["text"], "echo: go on\nremembers 1: [\"hang\"]");
    // The ledger survived the restart too.
    let again = mcp(
        &d,
        &parent,
        "continue_with_session",
        json!({"task_id": task, "message": "go on", "continuation_id": "r1"}),
    )
    .await;
    assert_eq!(again, r);
}

async fn within_events(d: &Daemon, parent: &str, task: &str) -> serde_json::Value {
    tether_testkit::within("delegation_completed after restart", async {
        loop {
            let evs = parent_events(d, parent, "delegation_completed").await;
            if let Some(e) = evs.into_iter().find(|e| e["payload"]["task_id"] == task) {
                return e;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
}

#[tokio::test]
async fn eviction_then_resume_and_strict_resume() {
    // One child fits the parent's cap (its own session does not count); a second child
    // evicts the first.
    let opts = DaemonOptions {
        extra_config: "[pool]\nmax_live_per_owner = 1\n".to_string(),
        ..DaemonOptions::default()
    };
    let d = Daemon::start(opts).await;
    let parent = d.new_conversation(None).await;
    let first = delegate(&d, &parent, "fake", "one").await;
    assert_eq!(
        wait_task(&d, &parent, &first).await["availability"],
        "continuable_live"
    );
    let second = delegate(&d, &parent, "fake", "two").await;
    wait_task(&d, &parent, &second).await;
    wait_availability(&d, &first, "continuable_resume").await;
    let pool = d.get_ok("/api/v1/pool").await;
    assert!(pool["evictions"].as_u64().unwrap() >= 1, "{pool}");

    let r = mcp(
        &d,
        &parent,
        "continue_with_session",
        json!({"task_id": first, "message": "again", "continuation_id": "e1"}),
    )
    .await;
    assert_eq!(r["turn_version"], 2);
    let t = wait_task(&d, &parent, &first).await;
    assert_eq!(t["text"], "echo: again\nremembers 1: [\"one\"]");

    // Strict resume: an agent that refuses to resume fails before anything is sent.
    let refusing = delegate(&d, &parent, "fake-refuse", "three").await;
    wait_task(&d, &parent, &refusing).await;
    // Evict it by starting two more children.
    for n in 0..2 {
        let other = delegate(&d, &parent, "fake", &format!("filler {n}")).await;
        wait_task(&d, &parent, &other).await;
    }
    wait_availability(&d, &refusing, "continuable_resume").await;
    let r = mcp(
        &d,
        &parent,
        "continue_with_session",
        json!({"task_id": refusing, "message": "again", "continuation_id": "e2"}),
    )
    .await;
    assert_eq!(r["error_code"], "resume_unavailable", "{r}");
    let c = get_ready(
        &d,
        &format!("/api/v1/conversations/{refusing}/continuation"),
    )
    .await;
    assert_eq!(
        (c["turn_version"].as_i64(), c["status"].as_str()),
        (Some(1), Some("completed"))
    );
    // Nothing was recorded under that continuation id: a retry fails the same way.
    let r = mcp(
        &d,
        &parent,
        "continue_with_session",
        json!({"task_id": refusing, "message": "again", "continuation_id": "e2"}),
    )
    .await;
    assert_eq!(r["error_code"], "resume_unavailable", "{r}");
}
