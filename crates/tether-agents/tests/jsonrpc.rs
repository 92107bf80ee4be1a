//! The NDJSON JSON-RPC connection over in-memory pipes: requests and responses, incoming
//! requests with string ids, non-JSON lines, the Codex flavour without `"jsonrpc"`, and
//! pending requests failing when the peer's output ends.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::{Value, json};
use tether_agents::jsonrpc::{CloseInfo, Connection, Incoming, Options, RpcError};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines};
use tokio::sync::mpsc;

const LIMIT: Duration = Duration::from_secs(10);

struct Peer {
    lines: Lines<BufReader<DuplexStream>>,
    out: DuplexStream,
}

impl Peer {
    async fn recv(&mut self) -> Value {
        let line = tokio::time::timeout(LIMIT, self.lines.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        serde_json::from_str(&line).unwrap()
    }

    async fn send(&mut self, line: &str) {
        self.out
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
    }
}

/// A connection whose handler forwards incoming messages and answers requests "ok".
fn connect(jsonrpc_field: bool) -> (Connection, Peer, mpsc::UnboundedReceiver<Incoming>) {
    let (ours_out, theirs_in) = tokio::io::duplex(1 << 16);
    let (theirs_out, ours_in) = tokio::io::duplex(1 << 16);
    let (tx, rx) = mpsc::unbounded_channel();
    let conn = Connection::spawn(
        ours_in,
        ours_out,
        Options { jsonrpc_field },
        Box::new(move |conn: &Connection, incoming: Incoming| {
            if let Incoming::Request { id, .. } = &incoming {
                let (conn, id) = (conn.clone(), id.clone());
                tokio::spawn(async move { conn.respond(id, Ok(json!("ok"))).await });
            }
            let _ = tx.send(incoming);
        }),
        Box::new(|| {
            Box::pin(async {
                CloseInfo {
                    status: "exit status: 9".to_owned(),
                    stderr_tail: "bye".to_owned(),
                }
            })
        }),
    );
    let peer = Peer {
        lines: BufReader::new(theirs_in).lines(),
        out: theirs_out,
    };
    (conn, peer, rx)
}

#[tokio::test]
async fn requests_notifications_and_incoming_requests() {
    let (conn, mut peer, mut incoming) = connect(true);
    let call = tokio::spawn({
        let conn = conn.clone();
        async move { conn.request("ping", json!({"x": 1})).await }
    });
    let sent = peer.recv().await;
    assert_eq!(sent["jsonrpc"], "2.0");
    assert_eq!(sent["method"], "ping");
    let id = sent["id"].as_i64().unwrap();

    peer.send("not json at all").await;
    peer.send(r#"{"jsonrpc":"2.0","method":"note","params":{"a":1},"extra":true}"#)
        .await;
    peer.send(r#"{"jsonrpc":"2.0","id":"s-1","method":"ask","params":{}}"#)
        .await;
    peer.send(&format!(
        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"pong":true}}}}"#
    ))
    .await;

    let result = tokio::time::timeout(LIMIT, call)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(result, json!({"pong": true}));
    match incoming.recv().await.unwrap() {
        Incoming::Notification { method, params } => {
            assert_eq!(method, "note");
            assert_eq!(params, json!({"a": 1}));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        incoming.recv().await.unwrap(),
        Incoming::Request { .. }
    ));
    let reply = peer.recv().await;
    assert_eq!(
        reply,
        json!({"jsonrpc": "2.0", "id": "s-1", "result": "ok"})
    );

    let call = tokio::spawn({
        let conn = conn.clone();
        async move { conn.request("bad", Value::Null).await }
    });
    let id = peer.recv().await["id"].clone();
    peer.send(&format!(
        r#"{{"id":{id},"error":{{"code":-32000,"message":"nope"}}}}"#
    ))
    .await;
    match tokio::time::timeout(LIMIT, call).await.unwrap().unwrap() {
        Err(RpcError::Remote { code, message, .. }) => {
            assert_eq!((code, message.as_str()), (-32000, "nope"))
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn codex_flavour_and_close() {
    let (conn, mut peer, _incoming) = connect(false);
    conn.notify("initialized", json!({})).await.unwrap();
    let sent = peer.recv().await;
    assert_eq!(sent, json!({"method": "initialized", "params": {}}));

    let call = tokio::spawn({
        let conn = conn.clone();
        async move { conn.request("turn/start", json!({})).await }
    });
    let _ = peer.recv().await;
    drop(peer.out);
    match tokio::time::timeout(LIMIT, call).await.unwrap().unwrap() {
        Err(RpcError::Closed(info)) => {
            assert_eq!(info.stderr_tail, "bye");
            let message = info.to_error().to_string();
            assert!(
                message.contains("exit status: 9") && message.contains("bye"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(conn.closed().is_some());
    assert!(matches!(
        conn.request("late", json!({})).await,
        Err(RpcError::Closed(_))
    ));
}
