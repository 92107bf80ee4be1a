//! End to end: HTTP errors, auth, OpenAPI, and SSE replay with Last-Event-ID.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use serde_json::{Value, json};
use tether_testkit::{Daemon, DaemonOptions, SseStream, within};

#[tokio::test]
async fn errors_have_stable_codes() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let c = d.new_conversation(None).await;
    let msgs = format!("/api/v1/conversations/{c}/messages");

    // Unknown command: an error listing the commands, never sent to the agent.
    let (status, body) = d.post(&msgs, json!({"text": "/frobnicate now"})).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "unknown_command");
    assert!(body["error"]["message"].as_str().unwrap().contains("/new"));
    let conv = d.get_ok(&format!("/api/v1/conversations/{c}")).await;
    assert_eq!(conv["state"], "unbound");

    // Malformed JSON.
    let resp = d
        .client
        .post(d.url(&msgs))
        .bearer_auth(&d.token)
        .header("content-type", "application/json")
        .body("{\"text\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_json");

    // Missing and wrong token.
    let resp = d
        .client
        .get(d.url("/api/v1/conversations"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "unauthorized");
    let resp = d
        .client
        .get(d.url("/api/v1/conversations"))
        .bearer_auth("nope")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);

    // Oversize body: the server answers 413 from the headers, before reading the body
    // (so a raw request shows it; a client still writing the body may see a reset).
    let addr = d.base.trim_start_matches("http://").to_string();
    let mut sock = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST {msgs} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        d.token,
        3 * 1024 * 1024
    );
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    sock.write_all(head.as_bytes()).await.unwrap();
    sock.write_all(b"{\"text\": \"xxxxxxxx").await.unwrap();
    let mut raw = Vec::new();
    within("413 response", sock.read_to_end(&mut raw))
        .await
        .unwrap();
    let raw = String::from_utf8_lossy(&raw);
    assert!(raw.starts_with("HTTP/1.1 413"), "{raw}");
    assert!(raw.contains("payload_too_large"), "{raw}");

    // Unknown conversation, unknown agent, bad cwd.
    let (status, body) = d.get("/api/v1/conversations/nope").await;
    assert_eq!(
        (status, body["error"]["code"].as_str().unwrap()),
        (404, "not_found")
    );
    let (status, body) = d
        .post("/api/v1/conversations", json!({"agent": "nobody"}))
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str().unwrap()),
        (400, "unknown_agent")
    );
    let (status, body) = d
        .post("/api/v1/conversations", json!({"cwd": "/etc"}))
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str().unwrap()),
        (400, "invalid_cwd")
    );
    let traversal = format!("{}/../..", d.work_dir().display());
    let (status, body) = d
        .post("/api/v1/conversations", json!({"cwd": traversal}))
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str().unwrap()),
        (400, "invalid_cwd")
    );

    // Health needs no token; the OpenAPI document lists the contract paths.
    let resp = d.client.get(d.url("/api/v1/health")).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let doc: Value = d
        .client
        .get(d.url("/api/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for path in [
        "/api/v1/conversations",
        "/api/v1/conversations/{id}/messages",
        "/api/v1/conversations/{id}/events",
        "/api/v1/sessions/{id}/events",
        "/api/v1/approvals/{id}",
        "/api/v1/questions/{id}",
    ] {
        assert!(doc["paths"].get(path).is_some(), "OpenAPI lacks {path}");
    }
}

async fn collect_until_turn_end(s: &mut SseStream, ends: usize) -> Vec<(i64, Value)> {
    within("SSE events", async {
        let mut out = Vec::new();
        let mut seen_ends = 0;
        while let Some(ev) = s.next().await {
            let id: i64 = ev.id.as_deref().unwrap().parse().unwrap();
            let v = ev.json();
            let kind = v["payload"]["type"].as_str().unwrap_or("").to_string();
            assert_eq!(ev.event.as_deref(), Some(kind.as_str()));
            out.push((id, v));
            if kind == "turn_completed" {
                seen_ends += 1;
                if seen_ends == ends {
                    return out;
                }
            }
        }
        panic!("stream ended early");
    })
    .await
}

#[tokio::test]
async fn sse_reconnect_with_last_event_id_gets_exactly_the_missed_events() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let c = d.new_conversation(None).await;
    let mut live = d.events(&c, None).await;
    d.say_and_wait(&c, "stream 5 10").await;
    let first = collect_until_turn_end(&mut live, 1).await;
    drop(live);
    let last_seen = first.last().unwrap().0;

    // Events happen while disconnected.
    d.say_and_wait(&c, "stream 3 10").await;
    d.say_and_wait(&c, "hello again").await;

    let mut resumed = d.events(&c, Some(&last_seen.to_string())).await;
    let missed = collect_until_turn_end(&mut resumed, 2).await;
    assert!(missed.iter().all(|(id, _)| *id > last_seen));

    // Compare with the full log from the beginning.
    let mut all = d.events(&c, Some("0")).await;
    let full = collect_until_turn_end(&mut all, 3).await;
    let expected: Vec<i64> = full
        .iter()
        .map(|(id, _)| *id)
        .filter(|id| *id > last_seen)
        .collect();
    let got: Vec<i64> = missed.iter().map(|(id, _)| *id).collect();
    assert_eq!(got, expected, "exactly the missed events, in order");
    let unique: BTreeSet<i64> = got.iter().copied().collect();
    assert_eq!(unique.len(), got.len(), "no duplicates");
    // The first stream saw the first turn's events from the start.
    assert_eq!(
        first.first().unwrap().1["payload"]["type"],
        "session_started"
    );
}
