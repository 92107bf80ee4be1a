//! Delegation end to end through a real `tether serve`: a fake-agent parent calls
//! tether's MCP tools (via the `tether mcp` companion) to delegate to fake-agent children.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::delegation_util::*;
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
    let turns = d.all_turns(sid).await;
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
    let started_ev = parent_events(&d, &parent, "delegation_started").await;
    assert_eq!(started_ev.len(), 1);
    assert_eq!(started_ev[0]["payload"]["task_id"], task.as_str());
    assert!(
        started_ev[0]["payload"]["tool_call_id"].is_string(),
        "{}",
        started_ev[0]
    );
    let completed = parent_events(&d, &parent, "delegation_completed").await;
    assert_eq!(completed.len(), 1);
    assert_eq!(completed[0]["payload"]["outcome"]["status"], "completed");
    let updates = parent_events(&d, &parent, "delegation_session_update").await;
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

#[tokio::test]
async fn argument_and_limit_errors() {
    let opts = DaemonOptions {
        extra_config: "[delegation]\nmax_running_children = 1\n\n\
                       [agents.broken]\ndriver = \"acp\"\ncommand = \"/nonexistent/agent\"\n"
            .to_string(),
        ..DaemonOptions::default()
    };
    let d = Daemon::start(opts).await;
    let parent = d.new_conversation(None).await;
    let call = |args: serde_json::Value| mcp(&d, &parent, "delegate_to_agent", args);
    let r = call(json!({"agent_type": "nope", "task": "x"})).await;
    assert_eq!(r["error_code"], "invalid_agent_type", "{r}");
    assert!(r["message"].as_str().unwrap().contains("fake"));
    let r = call(json!({"agent_type": "fake", "task": "   "})).await;
    assert_eq!(r["error_code"], "invalid_task", "{r}");
    let r = call(json!({"agent_type": "fake", "task": "x", "working_dir": "/etc"})).await;
    assert_eq!(r["error_code"], "invalid_working_dir", "{r}");
    let r = call(json!({"agent_type": "fake", "task": "x", "working_dir": "relative"})).await;
    assert_eq!(r["error_code"], "invalid_working_dir", "{r}");

    // A child that cannot start: the task fails with spawn_failed.
    let broken = delegate(&d, &parent, "broken", "anything").await;
    let t = wait_task(&d, &parent, &broken).await;
    assert_eq!(
        (t["status"].as_str(), t["error_code"].as_str()),
        (Some("failed"), Some("spawn_failed")),
        "{t}"
    );
    assert_eq!(t["availability"], "not_continuable");
    let r = mcp(
        &d,
        &parent,
        "continue_with_session",
        json!({"task_id": broken, "message": "again", "continuation_id": "b1"}),
    )
    .await;
    assert_eq!(r["error_code"], "not_continuable", "{r}");

    // One running child at most: a second one is refused while the first hangs.
    let sub = d.work_dir().join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    let r = call(json!({"agent_type": "fake", "task": "hang", "working_dir": sub})).await;
    let hanging = r["task_id"].as_str().unwrap().to_string();
    let c = get_ready(&d, &format!("/api/v1/conversations/{hanging}/continuation")).await;
    assert_eq!(
        c["working_dir"],
        sub.canonicalize().unwrap().display().to_string()
    );
    let r = call(json!({"agent_type": "fake", "task": "more"})).await;
    assert_eq!(r["error_code"], "concurrency_limit", "{r}");
    // The tasks API-token clients start (the external scope) have the same cap, as one
    // parent's (issue 24 S6): one hangs, a second is refused, the conversation's cap is
    // its own.
    let ext = http_tool(
        &d,
        &d.token,
        "delegate_to_agent",
        json!({"agent_type": "fake", "task": "hang"}),
    )
    .await;
    assert!(ext["task_id"].is_string(), "{ext}");
    let r = http_tool(
        &d,
        &d.token,
        "delegate_to_agent",
        json!({"agent_type": "fake", "task": "more"}),
    )
    .await;
    assert_eq!(r["error_code"], "concurrency_limit", "{r}");
    assert!(
        r["message"].as_str().unwrap().contains("external scope"),
        "{r}"
    );
    let r = http_tool(
        &d,
        &d.token,
        "cancel_delegation",
        json!({"task_id": ext["task_id"]}),
    )
    .await;
    assert_eq!(r["status"], "canceled", "{r}");
    let r = mcp(
        &d,
        &parent,
        "continue_with_session",
        json!({"task_id": hanging, "message": "more", "continuation_id": "h1"}),
    )
    .await;
    assert_eq!(r["error_code"], "session_still_running", "{r}");

    // Cancel: the running turn ends canceled; cancelling again returns the same result.
    let r = mcp(
        &d,
        &parent,
        "cancel_delegation",
        json!({"task_id": hanging}),
    )
    .await;
    assert_eq!(
        (r["status"].as_str(), r["error_code"].as_str()),
        (Some("canceled"), Some("canceled")),
        "{r}"
    );
    let again = mcp(
        &d,
        &parent,
        "cancel_delegation",
        json!({"task_id": hanging}),
    )
    .await;
    assert_eq!(again["status"], "canceled");
    assert_eq!(again["turn_version"], 1);
    assert_eq!(again["availability"], "continuable_live");

    // A failing child turn is subagent_error.
    let failing = delegate(&d, &parent, "fake", "fail").await;
    let t = wait_task(&d, &parent, &failing).await;
    assert_eq!(t["error_code"], "subagent_error", "{t}");
    assert!(
        t["message"].as_str().unwrap().contains("fake failure"),
        "{t}"
    );

    // Unknown tasks.
    let r = mcp(&d, &parent, "cancel_delegation", json!({"task_id": "nope"})).await;
    assert_eq!(r["error_code"], "not_found", "{r}");
    let r = mcp(
        &d,
        &parent,
        "get_delegation_status",
        json!({"task_ids": "x"}),
    )
    .await;
    assert_eq!(r["error_code"], "invalid_params", "{r}");
}

#[tokio::test]
async fn depth_limit_and_people_share_the_ledger() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let parent = d.new_conversation(None).await;
    // The child tries to delegate further: depth limit 1.
    let task = delegate(
        &d,
        &parent,
        "fake",
        r#"mcp delegate_to_agent {"agent_type":"fake","task":"grandchild"}"#,
    )
    .await;
    let t = wait_task(&d, &parent, &task).await;
    assert_eq!(t["status"], "completed", "{t}");
    assert!(t["text"].as_str().unwrap().contains("depth_limit"), "{t}");

    // A person continues the child: the parent sees the turn (origin person).
    let out = d
        .post_ok(
            &format!("/api/v1/conversations/{task}/continue"),
            json!({"message": "from a person", "continuation_id": "p1"}),
        )
        .await;
    assert_eq!(out["turn_version"], 2);
    let t = wait_task(&d, &parent, &task).await;
    assert_eq!(
        (t["origin"].as_str(), t["turn_version"].as_i64()),
        (Some("person"), Some(2))
    );
    assert!(t["text"].as_str().unwrap().contains("echo: from a person"));
    let updates = parent_events(&d, &parent, "delegation_session_update").await;
    assert_eq!(updates.len(), 1);
    assert_eq!(updates[0]["payload"]["origin"], "person");

    // The ledger is shared: the parent reusing the person's id with another message
    // conflicts; the person repeating it gets the first result.
    let r = mcp(
        &d,
        &parent,
        "continue_with_session",
        json!({"task_id": task, "message": "other", "continuation_id": "p1"}),
    )
    .await;
    assert_eq!(r["error_code"], "continuation_conflict", "{r}");
    let again = d
        .post_ok(
            &format!("/api/v1/conversations/{task}/continue"),
            json!({"message": "from a person", "continuation_id": "p1"}),
        )
        .await;
    assert_eq!(again, out);
    let (status, body) = d
        .post(
            &format!("/api/v1/conversations/{task}/continue"),
            json!({"message": "x", "continuation_id": "p1"}),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("continuation_conflict"))
    );

    // A plain message in the delegated conversation is a person's continuation too;
    // commands that would rebind it are refused.
    let (_, turn) = d.say_and_wait(&task, "plain").await;
    assert_eq!(turn["status"], "completed");
    let t = wait_task(&d, &parent, &task).await;
    assert_eq!(t["turn_version"], 3);
    // ... and in the ledger like every continuation (issue 26 item 6), under its turn's id.
    if d.database_url().is_none() {
        let store = tether_store::Store::open(d.data_dir()).await.unwrap();
        let cid = format!("person:{}", turn["id"].as_str().unwrap());
        let entry = store
            .delegation()
            .ledger_entry(&parent, &cid)
            .await
            .unwrap();
        let entry = entry.unwrap_or_else(|| panic!("no ledger entry {cid}"));
        assert_eq!(
            (entry.action.as_str(), entry.message.as_deref()),
            ("continue", Some("plain"))
        );
        assert_eq!(entry.result["turn_version"], 3, "{:?}", entry.result);
    }
    let (status, body) = d
        .post(
            &format!("/api/v1/conversations/{task}/messages"),
            json!({"text": "/new"}),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_command"))
    );

    // The parent's conversation lists its children.
    let kids = d
        .get_ok(&format!("/api/v1/conversations/{parent}/delegations"))
        .await;
    assert_eq!(kids.as_array().unwrap().len(), 1);
    assert_eq!(kids[0]["task_id"], task.as_str());

    // People close; the parent then gets session_released.
    let closed = d
        .post_ok(
            &format!("/api/v1/conversations/{task}/close"),
            json!({"continuation_id": "p2"}),
        )
        .await;
    assert_eq!(closed["availability"], "released");
    let r = mcp(
        &d,
        &parent,
        "continue_with_session",
        json!({"task_id": task, "message": "more", "continuation_id": "p3"}),
    )
    .await;
    assert_eq!(r["error_code"], "session_released", "{r}");
    let (status, body) = d
        .post(
            &format!("/api/v1/conversations/{task}/close"),
            json!({"continuation_id": "p4"}),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("session_released"))
    );
}

#[tokio::test]
async fn archiving_the_parent_releases_its_children() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let parent = d.new_conversation(None).await;
    let started = mcp(
        &d,
        &parent,
        "delegate_to_agent",
        json!({"agent_type": "fake", "task": "stream 200 50"}),
    )
    .await;
    let task = started["task_id"].as_str().unwrap().to_string();
    let (status, body) = d
        .patch(
            &format!("/api/v1/conversations/{parent}"),
            json!({"archived": true}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let avail = d
        .get_ok(&format!("/api/v1/conversations/{task}/continuation"))
        .await;
    assert_eq!(avail["availability"], "released", "{avail}");
    let child = d.get_ok(&format!("/api/v1/conversations/{task}")).await;
    let sid = child["binding"]["session_id"].as_str().unwrap();
    let turns = d.all_turns(sid).await;
    assert_eq!(turns[0]["status"], "cancelled", "{turns}");
}
