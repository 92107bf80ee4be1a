//! Delegation timing rules through a real `tether serve`: waits that end when a child
//! needs a person, the parent's /stop cancelling only the children of that turn, close
//! racing continue, MCP over HTTP and the companion's token check.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::delegation_util::*;
use serde_json::{Value, json};
use tether_testkit::{Daemon, DaemonOptions, bin_path, within};

#[tokio::test]
async fn wait_returns_when_a_child_is_blocked_on_a_person() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let parent = d.new_conversation(None).await;
    let task = delegate(&d, &parent, "fake", "approve rm -rf build").await;
    // An unlimited wait returns as soon as the child asks for approval.
    let r = mcp(
        &d,
        &parent,
        "get_delegation_status",
        json!({"task_ids": [task], "wait_ms": 0}),
    )
    .await;
    let t = &r["tasks"][0];
    assert_eq!(t["status"], "running", "{t}");
    assert_eq!(t["availability"], "running");
    assert_eq!(t["blocked_on"]["kind"], "approval");
    assert_eq!(t["blocked_on"]["title"], "rm -rf build");
    let approval = t["blocked_on"]["request_id"].as_str().unwrap();
    // A bounded wait on the same block times out with the task still running.
    let r = mcp(
        &d,
        &parent,
        "get_delegation_status",
        json!({"task_ids": [task], "wait_ms": 300}),
    )
    .await;
    assert_eq!(r["tasks"][0]["status"], "running");
    // The person answers; the child completes.
    d.post_ok(
        &format!("/api/v1/approvals/{approval}"),
        json!({"decision": "allow"}),
    )
    .await;
    let t = wait_task(&d, &parent, &task).await;
    assert_eq!(t["status"], "completed");
    assert!(t["text"].as_str().unwrap().starts_with("approval: allowed"));
    assert!(t.get("blocked_on").is_none());
}

async fn children(d: &Daemon, parent: &str) -> Vec<Value> {
    d.get_ok(&format!("/api/v1/conversations/{parent}/delegations"))
        .await
        .as_array()
        .cloned()
        .unwrap()
}

#[tokio::test]
async fn stopping_the_parent_turn_cancels_its_children_only() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let parent = d.new_conversation(None).await;
    // A child from an earlier turn keeps running.
    let earlier = delegate(&d, &parent, "fake", "hang").await;
    // This turn delegates and then waits for its child without limit.
    let out = d
        .say(
            &parent,
            r#"mcp delegate_to_agent {"agent_type":"fake","task":"hang"} && get_delegation_status {"task_ids":["$task_id"],"wait_ms":0}"#,
        )
        .await;
    let kids = within("second child exists", async {
        loop {
            let kids = children(&d, &parent).await;
            if kids.len() == 2 && kids[1]["status"] == "running" {
                return kids;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let current = kids[1]["task_id"].as_str().unwrap().to_string();
    assert_eq!(kids[1]["parent_turn_id"], out["turn_id"]);
    // Its agent must have reported its session, or a cancel leaves nothing to continue
    // (`not_continuable`, which a loaded machine showed).
    wait_child_session(&d, &current).await;
    d.post_ok(&format!("/api/v1/conversations/{parent}/stop"), json!({}))
        .await;
    let c = wait_availability(&d, &current, "continuable_live").await;
    assert_eq!(c["status"], "canceled");
    let parent_turn = d
        .wait_turn(
            out["session_id"].as_str().unwrap(),
            out["turn_id"].as_str().unwrap(),
        )
        .await;
    assert_eq!(parent_turn["status"], "cancelled");
    let e = get_ready(&d, &format!("/api/v1/conversations/{earlier}/continuation")).await;
    assert_eq!(e["availability"], "running", "{e}");
    let r = mcp(
        &d,
        &parent,
        "cancel_delegation",
        json!({"task_id": earlier}),
    )
    .await;
    assert_eq!(r["status"], "canceled");
}

#[tokio::test]
async fn close_racing_continue_never_leaves_a_running_released_task() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let parent = d.new_conversation(None).await;
    for round in 0..3 {
        let task = delegate(&d, &parent, "fake", "first").await;
        wait_task(&d, &parent, &task).await;
        let (cont_path, close_path) = (
            format!("/api/v1/conversations/{task}/continue"),
            format!("/api/v1/conversations/{task}/close"),
        );
        let cont = d.post(
            &cont_path,
            json!({"message": "sleep 400", "continuation_id": format!("c{round}")}),
        );
        let close = d.post(&close_path, json!({"continuation_id": format!("x{round}")}));
        let ((cs, cb), (xs, xb)) = tokio::join!(cont, close);
        assert_eq!(xs, 200, "close: {xb}");
        assert_eq!(xb["availability"], "released");
        match cs {
            // Continue first: the close cancelled the new turn.
            200 => assert_eq!(xb["canceled_running_turn"], true, "{cb} {xb}"),
            // Close first: the continue was refused.
            409 => assert_eq!(cb["error"]["code"], "session_released", "{cb}"),
            other => panic!("continue: {other} {cb}"),
        }
        let c = get_ready(&d, &format!("/api/v1/conversations/{task}/continuation")).await;
        assert_eq!(c["availability"], "released");
        assert_ne!(c["status"], "running", "{c}");
        let conv = d.get_ok(&format!("/api/v1/conversations/{task}")).await;
        assert!(conv["running_turn_id"].is_null(), "{conv}");
        let (s, b) = d
            .post(
                &format!("/api/v1/conversations/{task}/continue"),
                json!({"message": "again", "continuation_id": format!("z{round}")}),
            )
            .await;
        assert_eq!(
            (s, b["error"]["code"].as_str()),
            (409, Some("session_released"))
        );
    }
}

async fn mcp_http(d: &Daemon, token: &str, id: i64, method: &str, params: Value) -> (u16, Value) {
    let resp = within(
        "MCP over HTTP",
        d.client
            .post(d.url("/mcp"))
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .json(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .send(),
    )
    .await
    .unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test]
async fn mcp_over_http_with_the_api_token() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let (s, _) = mcp_http(&d, "wrong", 1, "tools/list", json!({})).await;
    assert_eq!(s, 401);
    let token = d.token.clone();
    let (s, init) = mcp_http(
        &d,
        &token,
        1,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "test", "version": "1"}}),
    )
    .await;
    assert_eq!(s, 200, "{init}");
    assert_eq!(init["result"]["serverInfo"]["name"], "tether");
    let (_, list) = mcp_http(&d, &token, 2, "tools/list", json!({})).await;
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "delegate_to_agent",
            "get_delegation_status",
            "cancel_delegation",
            "continue_with_session",
            "close_session"
        ]
    );
    let desc = list["result"]["tools"][0]["description"].as_str().unwrap();
    assert!(
        desc.contains("continue_with_session") && desc.contains("Task"),
        "{desc}"
    );
    let call = |id: i64, name: &str, args: Value| {
        let token = token.clone();
        let name = name.to_string();
        let d = &d;
        async move {
            let (_, r) = mcp_http(
                d,
                &token,
                id,
                "tools/call",
                json!({"name": name, "arguments": args}),
            )
            .await;
            r["result"]["structuredContent"].clone()
        }
    };
    let started = call(
        3,
        "delegate_to_agent",
        json!({"agent_type": "fake", "task": "via http"}),
    )
    .await;
    let task = started["task_id"].as_str().unwrap().to_string();
    let r = call(
        4,
        "get_delegation_status",
        json!({"task_ids": [task], "wait_ms": 10000}),
    )
    .await;
    assert_eq!(r["tasks"][0]["status"], "completed", "{r}");
    assert_eq!(r["tasks"][0]["text"], "echo: via http\nremembers 0: []");
    // An external client's task has no parent conversation.
    let c = get_ready(&d, &format!("/api/v1/conversations/{task}/continuation")).await;
    assert!(c["parent_conversation_id"].is_null());
}

#[tokio::test]
async fn the_companion_refuses_an_unknown_token() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let socket = d.home.path().join("data/run/mcp.sock");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(socket.parent().unwrap())
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o700);
    let out = within(
        "tether mcp exits",
        tokio::process::Command::new(bin_path("tether"))
            .arg("mcp")
            .env("TETHER_MCP_SOCKET", &socket)
            .env("TETHER_MCP_TOKEN", "not-a-token")
            .stdin(std::process::Stdio::null())
            .output(),
    )
    .await
    .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("refused"), "{err}");
    let out = within(
        "tether mcp exits",
        tokio::process::Command::new(bin_path("tether"))
            .arg("mcp")
            .env_remove("TETHER_MCP_SOCKET")
            .stdin(std::process::Stdio::null())
            .output(),
    )
    .await
    .unwrap();
    assert!(!out.status.success());
}
