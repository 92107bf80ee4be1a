//! Typed tool arguments through a real `tether serve` (issue 11): the delegation tools'
//! `inputSchema`s are derived from their argument types and list the required fields; a
//! missing or mistyped argument is `invalid_params` naming it — on MCP and on the HTTP
//! continue/close routes alike — and never reaches the runtime as `""`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::delegation_util::*;
use serde_json::{Value, json};
use tether_testkit::{Daemon, DaemonOptions};

/// Calls `tool` over `/mcp` with the API token; `(isError, structuredContent)`.
async fn call(d: &Daemon, tool: &str, args: Value) -> (bool, Value) {
    let (status, r) = mcp_http(
        d,
        &d.token,
        3,
        "tools/call",
        json!({"name": tool, "arguments": args}),
    )
    .await;
    assert_eq!(status, 200, "{tool}: {r}");
    (
        r["result"]["isError"] == true,
        r["result"]["structuredContent"].clone(),
    )
}

/// Asserts that the call was refused as `invalid_params` naming `argument`.
async fn refused(d: &Daemon, tool: &str, args: Value, argument: &str) {
    let (is_error, r) = call(d, tool, args.clone()).await;
    assert!(is_error, "{tool} {args}: {r}");
    assert_eq!(r["error_code"], "invalid_params", "{tool} {args}: {r}");
    assert_eq!(r["argument"], argument, "{tool} {args}: {r}");
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .contains(&format!("`{argument}`")),
        "{tool} {args}: {r}"
    );
}

fn sorted_required(tool: &Value) -> Vec<String> {
    let mut required: Vec<String> = tool["inputSchema"]["required"]
        .as_array()
        .unwrap_or_else(|| panic!("no required list: {tool}"))
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    required.sort();
    required
}

#[tokio::test]
async fn tools_list_shows_the_derived_schemas() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let (status, r) = mcp_http(&d, &d.token, 1, "tools/list", json!({})).await;
    assert_eq!(status, 200, "{r}");
    let tools = r["result"]["tools"].as_array().unwrap();
    let tool = |name: &str| {
        tools
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("no tool {name}: {r}"))
            .clone()
    };
    let expect: [(&str, &[&str]); 5] = [
        ("delegate_to_agent", &["agent_type", "task"]),
        ("get_delegation_status", &["task_ids"]),
        ("cancel_delegation", &["task_id"]),
        (
            "continue_with_session",
            &["continuation_id", "message", "task_id"],
        ),
        ("close_session", &["continuation_id", "task_id"]),
    ];
    for (name, required) in expect {
        let t = tool(name);
        assert_eq!(sorted_required(&t), required, "{t}");
        assert_eq!(t["inputSchema"]["type"], "object", "{t}");
        assert_eq!(t["inputSchema"]["additionalProperties"], false, "{t}");
        for field in required {
            let property = &t["inputSchema"]["properties"][*field];
            assert!(
                property["description"]
                    .as_str()
                    .is_some_and(|s| !s.is_empty()),
                "{name}.{field} has no description: {t}"
            );
        }
    }
    let delegate = tool("delegate_to_agent");
    let agent_type = &delegate["inputSchema"]["properties"]["agent_type"];
    assert!(
        agent_type["enum"]
            .as_array()
            .unwrap()
            .contains(&json!("fake")),
        "{delegate}"
    );
    let status = tool("get_delegation_status");
    let props = &status["inputSchema"]["properties"];
    assert_eq!(props["task_ids"]["type"], "array", "{status}");
    assert_eq!(props["task_ids"]["minItems"], 1, "{status}");
    assert_eq!(props["task_ids"]["items"]["type"], "string", "{status}");
    assert!(
        props["wait_ms"]["type"]
            .as_array()
            .is_some_and(|t| t.contains(&json!("integer"))),
        "{status}"
    );
    assert_eq!(props["wait_ms"]["minimum"], 0, "{status}");
}

#[tokio::test]
async fn missing_or_mistyped_arguments_are_invalid_params_on_mcp_and_http() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let (is_error, started) = call(
        &d,
        "delegate_to_agent",
        json!({"agent_type": "fake", "task": "hello"}),
    )
    .await;
    assert!(!is_error, "{started}");
    let task = started["task_id"].as_str().unwrap().to_string();
    let (_, done) = call(
        &d,
        "get_delegation_status",
        json!({"task_ids": [task], "wait_ms": 15000}),
    )
    .await;
    assert_eq!(done["tasks"][0]["status"], "completed", "{done}");

    // MCP: each tool, a missing and a wrongly typed argument.
    refused(
        &d,
        "delegate_to_agent",
        json!({"agent_type": "fake"}),
        "task",
    )
    .await;
    refused(
        &d,
        "delegate_to_agent",
        json!({"agent_type": "fake", "task": "x", "working_dir": 3}),
        "working_dir",
    )
    .await;
    refused(&d, "get_delegation_status", json!({}), "task_ids").await;
    refused(
        &d,
        "get_delegation_status",
        json!({"task_ids": "x"}),
        "task_ids",
    )
    .await;
    refused(
        &d,
        "get_delegation_status",
        json!({"task_ids": [task], "wait_ms": -1}),
        "wait_ms",
    )
    .await;
    refused(&d, "cancel_delegation", json!({}), "task_id").await;
    refused(&d, "cancel_delegation", json!({"task_id": 1}), "task_id").await;
    refused(
        &d,
        "continue_with_session",
        json!({"task_id": task, "continuation_id": "c1"}),
        "message",
    )
    .await;
    refused(
        &d,
        "continue_with_session",
        json!({"task_id": task, "message": 5, "continuation_id": "c1"}),
        "message",
    )
    .await;
    refused(
        &d,
        "continue_with_session",
        json!({"message": "more", "continuation_id": "c1"}),
        "task_id",
    )
    .await;
    refused(
        &d,
        "close_session",
        json!({"task_id": task}),
        "continuation_id",
    )
    .await;
    refused(
        &d,
        "close_session",
        json!({"task_id": task, "continuation_id": ["c"]}),
        "continuation_id",
    )
    .await;

    // HTTP: the same bodies without the task id, which is in the path.
    let continue_path = format!("/api/v1/conversations/{task}/continue");
    let close_path = format!("/api/v1/conversations/{task}/close");
    for (path, body, argument) in [
        (&continue_path, json!({"continuation_id": "c1"}), "message"),
        (
            &continue_path,
            json!({"message": 5, "continuation_id": "c1"}),
            "message",
        ),
        (
            &continue_path,
            json!({"message": "more"}),
            "continuation_id",
        ),
        (
            &continue_path,
            json!({"message": "more", "continuation_id": "c1", "mesage": "x"}),
            "mesage",
        ),
        (&close_path, json!({}), "continuation_id"),
        (
            &close_path,
            json!({"continuation_id": 5}),
            "continuation_id",
        ),
    ] {
        let (status, r) = d.post(path, body.clone()).await;
        assert_eq!(status, 400, "{path} {body}: {r}");
        assert_eq!(r["error"]["code"], "invalid_params", "{path} {body}: {r}");
        assert!(
            r["error"]["message"]
                .as_str()
                .unwrap()
                .contains(&format!("`{argument}`")),
            "{path} {body}: {r}"
        );
    }

    // Nothing of that reached the task: still its first turn, still open.
    let (_, now) = call(&d, "get_delegation_status", json!({"task_ids": [task]})).await;
    assert_eq!(now["tasks"][0]["turn_version"], 1, "{now}");
    assert_eq!(now["tasks"][0]["availability"], "continuable_live", "{now}");

    // Well-formed arguments still work, on both surfaces.
    let (status, r) = d
        .post(
            &continue_path,
            json!({"message": "more", "continuation_id": "c1"}),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["turn_version"], 2, "{r}");
    let (is_error, r) = call(
        &d,
        "get_delegation_status",
        json!({"task_ids": [task], "wait_ms": 15000, "extra": "ignored"}),
    )
    .await;
    assert!(!is_error, "{r}");
    assert_eq!(r["tasks"][0]["status"], "completed", "{r}");
}
