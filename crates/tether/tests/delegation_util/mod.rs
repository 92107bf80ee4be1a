//! Helpers for the delegation tests: a parent conversation on the fake agent calls
//! tether's MCP tools through the `mcp <tool> <json>` directive.
#![allow(dead_code)]

use std::time::Duration;

use serde_json::{Value, json};
use tether_testkit::{Daemon, within};

/// The JSON result of a tool call from the parent's reply (`<json>\nremembers ...`).
pub fn tool_result(turn: &Value) -> Value {
    let text = turn["result_text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text: {turn}"));
    let body = text
        .rsplit_once("\nremembers ")
        .map(|(b, _)| b)
        .unwrap_or(text);
    let last = body.lines().last().unwrap_or(body);
    serde_json::from_str(last).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// Calls `tool` from the parent conversation and waits for the result.
pub async fn mcp(d: &Daemon, parent: &str, tool: &str, args: Value) -> Value {
    let (_, turn) = d.say_and_wait(parent, &format!("mcp {tool} {args}")).await;
    assert_eq!(turn["status"], "completed", "parent turn: {turn}");
    tool_result(&turn)
}

/// Delegates `task` to `agent` and returns the task id.
pub async fn delegate(d: &Daemon, parent: &str, agent: &str, task: &str) -> String {
    let r = mcp(
        d,
        parent,
        "delegate_to_agent",
        json!({"agent_type": agent, "task": task}),
    )
    .await;
    assert_eq!(r["status"], "running", "{r}");
    r["task_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no task id: {r}"))
        .to_string()
}

/// Waits (from the parent) until the task's latest turn is no longer running.
pub async fn wait_task(d: &Daemon, parent: &str, task: &str) -> Value {
    within("task ends", async {
        loop {
            let r = mcp(
                d,
                parent,
                "get_delegation_status",
                json!({"task_ids": [task], "wait_ms": 15000}),
            )
            .await;
            let t = r["tasks"][0].clone();
            if t["status"] != "running" {
                return t;
            }
        }
    })
    .await
}

/// GET that retries while the daemon answers `rebuilding`.
pub async fn get_ready(d: &Daemon, path: &str) -> Value {
    within("not rebuilding", async {
        loop {
            let (status, body) = d.get(path).await;
            if status == 503 && body["error"]["code"] == "rebuilding" {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            assert_eq!(status, 200, "GET {path}: {body}");
            return body;
        }
    })
    .await
}

/// Polls the task's availability until `pred` holds.
pub async fn wait_availability(d: &Daemon, task: &str, want: &str) -> Value {
    within(&format!("availability {want}"), async {
        loop {
            let c = get_ready(d, &format!("/api/v1/conversations/{task}/continuation")).await;
            if c["availability"] == want {
                return c;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

/// The parent's events of one type.
pub async fn parent_events(d: &Daemon, parent: &str, kind: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let conv = d.get_ok(&format!("/api/v1/conversations/{parent}")).await;
    let sid = conv["binding"]["session_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let events = d
        .get_ok(&format!("/api/v1/sessions/{sid}/events?limit=1000"))
        .await;
    for e in events["events"].as_array().cloned().unwrap_or_default() {
        if e["payload"]["type"] == kind {
            out.push(e);
        }
    }
    out
}
