//! Delegation end to end through a real `tether serve`: a fake-agent parent calls
//! tether's MCP tools (via the `tether mcp` companion) to delegate to fake-agent children.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod delegation_util;

use delegation_util::*;
use serde_json::json;
use tether_testkit::{Daemon, DaemonOptions};

#[tokio::test]
async fn delegate_collect_continue_close() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let parent = d.new_conversation(None).await;
    let started = mcp(
        &d,
        &parent,
        "delegate_to_agent",
        json!({"agent_type": "fake", "task": "hello child"}),
    )
    .await;
    assert_eq!(started["status"], "running");
    assert_eq!(started["turn_version"], 1);
    let task = started["task_id"].as_str().unwrap().to_string();

    // The child is a delegate conversation linked to the parent.
    let child = d.get_ok(&format!("/api/v1/conversations/{task}")).await;
    assert_eq!(child["kind"], "delegate");

    let done = wait_task(&d, &parent, &task).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["turn_version"], 1);
    assert_eq!(done["text"], "echo: hello child\nremembers 0: []");
    assert!(done["duration_ms"].as_i64().unwrap() >= 0);
    assert_eq!(done["availability"], "continuable_live");

    // A follow-up goes to the same child session, which remembers the first task.
    let args = json!({"task_id": task, "message": "second", "continuation_id": "c1"});
    let cont = mcp(&d, &parent, "continue_with_session", args.clone()).await;
    assert_eq!(cont["task_id"], task.as_str());
    assert_eq!(cont["turn_version"], 2);
    let done2 = wait_task(&d, &parent, &task).await;
    assert_eq!(done2["status"], "completed");
    assert_eq!(done2["turn_version"], 2);
    assert_eq!(done2["origin"], "parent");
    assert_eq!(
        done2["text"],
        "echo: second\nremembers 1: [\"hello child\"]"
    );

    // The same continuation_id again: the first result, nothing sent twice.
    let again = mcp(&d, &parent, "continue_with_session", args).await;
    assert_eq!(again, cont);
    let sid = child["binding"]["session_id"].as_str().unwrap();
    let turns = d.get_ok(&format!("/api/v1/sessions/{sid}/turns")).await;
    assert_eq!(turns.as_array().unwrap().len(), 2, "{turns}");
    // The same id with another message (or another action) conflicts.
    let other = json!({"task_id": task, "message": "third", "continuation_id": "c1"});
    let conflict = mcp(&d, &parent, "continue_with_session", other).await;
    assert_eq!(
        conflict["error_code"], "continuation_conflict",
        "{conflict}"
    );
    let conflict = mcp(
        &d,
        &parent,
        "close_session",
        json!({"task_id": task, "continuation_id": "c1"}),
    )
    .await;
    assert_eq!(conflict["error_code"], "continuation_conflict");

    // Close, idempotently; then continuing is refused.
    let close = json!({"task_id": task, "continuation_id": "c2"});
    let closed = mcp(&d, &parent, "close_session", close.clone()).await;
    assert_eq!(closed["availability"], "released", "{closed}");
    assert_eq!(closed["canceled_running_turn"], false);
    assert_eq!(mcp(&d, &parent, "close_session", close).await, closed);
    let refused = mcp(
        &d,
        &parent,
        "continue_with_session",
        json!({"task_id": task, "message": "more", "continuation_id": "c3"}),
    )
    .await;
    assert_eq!(refused["error_code"], "session_released", "{refused}");
    let c = get_ready(&d, &format!("/api/v1/conversations/{task}/continuation")).await;
    assert_eq!(c["availability"], "released");
    assert_eq!(c["parent_conversation_id"], parent.as_str());
    assert_eq!(c["depth"], 1);
    // The released session's process is gone; its history stays.
    let s = d.get_ok(&format!("/api/v1/sessions/{sid}")).await;
    assert_eq!(s["status"], "closed");
    let history = d
        .get_ok(&format!("/api/v1/conversations/{task}/messages"))
        .await;
    assert!(history.as_array().unwrap().len() >= 4, "{history}");

    // Events on the parent's session: started once, completed for turn 1, an update for
    // turn 2.
    let started_ev = parent_events(&d, &parent, "delegation.started").await;
    assert_eq!(started_ev.len(), 1);
    assert_eq!(started_ev[0]["payload"]["task_id"], task.as_str());
    assert!(
        started_ev[0]["payload"]["tool_call_id"].is_string(),
        "{}",
        started_ev[0]
    );
    let completed = parent_events(&d, &parent, "delegation.completed").await;
    assert_eq!(completed.len(), 1);
    assert_eq!(completed[0]["payload"]["outcome"]["status"], "completed");
    let updates = parent_events(&d, &parent, "delegation.session_update").await;
    assert_eq!(updates.len(), 1);
    assert_eq!(updates[0]["payload"]["turn_version"], 2);
    assert_eq!(updates[0]["payload"]["origin"], "parent");

    // Unknown ids are reported as unknown, in request order.
    let r = mcp(
        &d,
        &parent,
        "get_delegation_status",
        json!({"task_ids": ["nope", task]}),
    )
    .await;
    assert_eq!(r["tasks"][0]["status"], "unknown");
    assert_eq!(r["tasks"][1]["task_id"], task.as_str());
}
