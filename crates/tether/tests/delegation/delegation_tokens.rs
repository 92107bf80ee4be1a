//! Delegation hardening through a real `tether serve` (issue 16): MCP session tokens die
//! with their session's process, when it is replaced and when its conversation is
//! archived; `get_delegation_status` waits without a time limit end with their caller
//! (disconnect, revoked token, daemon shutdown) and are capped per caller.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use crate::delegation_util::*;
use serde_json::{Value, json};
use tether_testkit::{Daemon, DaemonOptions, within};

/// Whether `/mcp` admits `token` (a snapshot of an unknown task: 200; refused: 401).
async fn admitted(d: &Daemon, token: &str) -> bool {
    let (status, body) = mcp_http(
        d,
        token,
        1,
        "tools/call",
        json!({"name": "get_delegation_status", "arguments": {"task_ids": ["none"]}}),
    )
    .await;
    match status {
        200 => {
            assert_eq!(
                body["result"]["structuredContent"]["tasks"][0]["status"], "unknown",
                "{body}"
            );
            true
        }
        401 => false,
        other => panic!("/mcp answered {other}: {body}"),
    }
}

#[tokio::test]
async fn session_tokens_die_with_new_sessions_and_archiving() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let parent = d.new_conversation(None).await;
    let (socket, old) = session_mcp_env(&d, &parent).await;
    assert!(admitted(&d, &old).await);
    // The old agent keeps a companion connection open across the /new.
    let mut companion = Companion::start(&socket, &old).await;
    d.post_ok(
        &format!("/api/v1/conversations/{parent}/new-session"),
        json!({}),
    )
    .await;
    assert!(
        !admitted(&d, &old).await,
        "the replaced session's token still works"
    );
    let id = companion
        .call(
            "delegate_to_agent",
            json!({"agent_type": "fake", "task": "sneaky"}),
        )
        .await;
    let r = companion.tool_result(id).await;
    assert_eq!(r["error_code"], "unauthorized", "{r}");
    let kids = d
        .get_ok(&format!("/api/v1/conversations/{parent}/delegations"))
        .await;
    assert_eq!(kids, json!([]));

    // The new session has a token of its own, which archiving revokes.
    let (_, new) = session_mcp_env(&d, &parent).await;
    assert_ne!(new, old);
    assert!(admitted(&d, &new).await);
    let (status, body) = d
        .patch(
            &format!("/api/v1/conversations/{parent}"),
            json!({"archived": true}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        !admitted(&d, &new).await,
        "an archived conversation's token still works"
    );
    let (status, _) = mcp_http(
        &d,
        &new,
        2,
        "tools/call",
        json!({"name": "delegate_to_agent", "arguments": {"agent_type": "fake", "task": "x"}}),
    )
    .await;
    assert_eq!(status, 401);
}

#[tokio::test]
async fn a_session_token_dies_with_its_process() {
    let d = Daemon::start(DaemonOptions {
        extra_config: "[pool]\nidle_ttl_secs = 1\n".to_string(),
        ..DaemonOptions::default()
    })
    .await;
    let parent = d.new_conversation(None).await;
    let (_, first) = session_mcp_env(&d, &parent).await;
    let session = bound_session(&d, &parent).await;
    // Idle past the TTL: the process is evicted, and its token with it.
    within("the session goes dormant", async {
        loop {
            let s = d.get_ok(&format!("/api/v1/sessions/{session}")).await;
            if s["status"] == "dormant" {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(
        !admitted(&d, &first).await,
        "an ended process's token still works"
    );
    // The resumed process gets a new one.
    let (_, second) = session_mcp_env(&d, &parent).await;
    assert_ne!(second, first);
    assert!(admitted(&d, &second).await);
}

/// A bounded wait (200 ms) over HTTP with `token`: `true` when it was refused for the
/// cap on waits.
async fn probe(d: &Daemon, token: &str, task: &str) -> bool {
    let r = http_tool(
        d,
        token,
        "get_delegation_status",
        json!({"task_ids": [task], "wait_ms": 200}),
    )
    .await;
    let full = r["error_code"] == "concurrency_limit";
    if !full {
        assert_eq!(r["tasks"][0]["status"], "running", "{r}");
    }
    full
}

/// An unlimited wait over HTTP with `token` on a connection of its own (plain TCP, so
/// aborting the task surely closes it), in its own task; the response's status line and
/// JSON body.
fn spawn_wait(d: &Daemon, token: &str, task: &str) -> tokio::task::JoinHandle<(String, Value)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "get_delegation_status",
        "arguments": {"task_ids": [task], "wait_ms": 0}}})
    .to_string();
    let addr = d.base.trim_start_matches("http://").to_string();
    let req = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\n\
         Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        token,
        body.len()
    );
    tokio::spawn(async move {
        let mut conn = tokio::net::TcpStream::connect(&addr).await.unwrap();
        conn.write_all(req.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        conn.read_to_end(&mut raw).await.unwrap();
        let text = String::from_utf8_lossy(&raw).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head.lines().next().unwrap_or_default().to_string();
        (
            status,
            serde_json::from_str(body).unwrap_or(Value::String(body.to_string())),
        )
    })
}

#[tokio::test]
async fn unlimited_waits_are_capped_and_end_with_their_caller_or_the_daemon() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let token = d.token.clone();
    let started = http_tool(
        &d,
        &token,
        "delegate_to_agent",
        json!({"agent_type": "fake", "task": "hang"}),
    )
    .await;
    let task = started["task_id"].as_str().unwrap().to_string();
    let cap = tether_runtime::MAX_WAITS_PER_CALLER;
    let mut waits: Vec<_> = (0..cap).map(|_| spawn_wait(&d, &token, &task)).collect();
    // All of them wait: one more is refused. (A probe holds a slot for its 200 ms: a
    // wait it crowded out has ended and is started again.)
    within("every wait waits", async {
        loop {
            for w in waits.iter_mut().filter(|w| w.is_finished()) {
                *w = spawn_wait(&d, &token, &task);
            }
            if probe(&d, &token, &task).await {
                return;
            }
        }
    })
    .await;
    // Callers that go away free their slots.
    for w in waits.drain(..cap / 2) {
        w.abort();
    }
    within("the slots are free again", async {
        while probe(&d, &token, &task).await {}
    })
    .await;
    // Shutting down ends the others at once, with the tasks as they are.
    let pid = d.pid().unwrap();
    let at = Instant::now();
    std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    for w in waits {
        let (status, body) = within("a wait ends at shutdown", w).await.unwrap();
        assert!(status.contains(" 200 "), "{status} {body}");
        let tasks = &body["result"]["structuredContent"]["tasks"];
        assert_eq!(tasks[0]["status"], "running", "{body}");
    }
    assert!(
        at.elapsed() < Duration::from_secs(4),
        "waits held the shutdown for {:?}",
        at.elapsed()
    );
}

#[tokio::test]
async fn an_unlimited_wait_ends_when_its_token_is_revoked() {
    let d = Daemon::start(DaemonOptions::default()).await;
    // Waits with a session's token that are surely in flight: the cap refuses one more.
    // (A probe holds a slot for its 200 ms: a wait it crowded out is started again.)
    let other = d.new_conversation(None).await;
    let task = delegate(&d, &other, "fake", "hang").await;
    let (_, token) = session_mcp_env(&d, &other).await;
    let cap = tether_runtime::MAX_WAITS_PER_CALLER;
    let mut waits: Vec<_> = (0..cap).map(|_| spawn_wait(&d, &token, &task)).collect();
    within("every wait waits", async {
        loop {
            for w in waits.iter_mut().filter(|w| w.is_finished()) {
                *w = spawn_wait(&d, &token, &task);
            }
            if probe(&d, &token, &task).await {
                return;
            }
        }
    })
    .await;
    d.post_ok(
        &format!("/api/v1/conversations/{other}/new-session"),
        json!({}),
    )
    .await;
    for w in waits {
        let (status, body) = within("a wait ends at revocation", w).await.unwrap();
        assert!(status.contains(" 200 "), "{status} {body}");
        let r = &body["result"]["structuredContent"];
        assert_eq!(r["error_code"], "unauthorized", "{body}");
    }

    // An agent's wait through its companion: the agent's turn goes on to its end.
    let parent = d.new_conversation(None).await;
    let out = d
        .say(
            &parent,
            r#"mcp delegate_to_agent {"agent_type":"fake","task":"hang"} && get_delegation_status {"task_ids":["$task_id"],"wait_ms":0}"#,
        )
        .await;
    let session = out["session_id"].as_str().unwrap().to_string();
    // The second call has started, on the connection the fake agent opened (and tether
    // admitted) before its first call: from now on a revocation ends it with
    // `unauthorized`, whether it is waiting already or not.
    wait_event(&d, &session, "the wait starts", |e| {
        e["payload"]["type"] == "tool_call"
            && e["payload"]["title"]
                .as_str()
                .is_some_and(|t| t.ends_with("get_delegation_status"))
    })
    .await;
    d.post_ok(
        &format!("/api/v1/conversations/{parent}/new-session"),
        json!({}),
    )
    .await;
    let turn = d
        .wait_turn(&session, out["turn_id"].as_str().unwrap())
        .await;
    assert_eq!(turn["status"], "completed", "{turn}");
    let r = tool_result(&turn);
    assert_eq!(r["error_code"], "unauthorized", "{turn}");
}

#[tokio::test]
async fn waits_end_when_the_companion_goes_away() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let parent = d.new_conversation(None).await;
    let task = delegate(&d, &parent, "fake", "hang").await;
    let (socket, token) = session_mcp_env(&d, &parent).await;
    let wait = json!({"task_ids": [task], "wait_ms": 0});
    let cap = tether_runtime::MAX_WAITS_PER_CALLER;
    let mut companions = Vec::new();
    for _ in 0..cap {
        let mut c = Companion::start(&socket, &token).await;
        c.call("get_delegation_status", wait.clone()).await;
        companions.push(c);
    }
    let mut probe = Companion::start(&socket, &token).await;
    let bounded = json!({"task_ids": [task], "wait_ms": 200});
    within("the cap is reached", async {
        loop {
            let id = probe.call("get_delegation_status", bounded.clone()).await;
            let r = probe.tool_result(id).await;
            if r["error_code"] == "concurrency_limit" {
                return;
            }
            // Not reached yet: every wait must still be in flight, on a running task.
            assert_eq!(
                r["tasks"][0]["status"], "running",
                "the probe's answer: {r}"
            );
            // A probe holds a slot for its 200 ms: a companion's wait that arrived then
            // was refused, and starts again; any other answer is a wait that ended early.
            for (i, c) in companions.iter_mut().enumerate() {
                if let Some(line) = c.early_line().await {
                    assert!(
                        line.contains("concurrency_limit"),
                        "companion {i}'s wait ended early: {line}"
                    );
                    c.call("get_delegation_status", wait.clone()).await;
                }
            }
        }
    })
    .await;
    for c in companions {
        c.kill().await;
    }
    within("slots are freed", async {
        loop {
            let id = probe.call("get_delegation_status", bounded.clone()).await;
            let r = probe.tool_result(id).await;
            if r["error_code"] != "concurrency_limit" {
                assert_eq!(r["tasks"][0]["status"], "running", "{r}");
                return;
            }
        }
    })
    .await;
}
