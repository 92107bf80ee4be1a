//! Property tests of the NDJSON JSON-RPC reader shared by the ACP and Codex drivers, over
//! in-memory pipes (bounded: 256 cases). Whatever the peer prints — JSON-RPC-shaped
//! objects with random ids and values, other JSON, truncated JSON, arbitrary text, blank
//! lines — the reader never panics, hands the handler exactly the messages that carry a
//! string `method` (in order), drops the rest, and still answers the next real request;
//! when the peer's output ends, a pending request fails with `Closed`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Map, Value, json};
use tether_agents::jsonrpc::{
    CloseInfo, Connection, Handler, Incoming, OnClose, Options, RpcError,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const KEYS: &[&str] = &[
    "jsonrpc", "id", "method", "params", "result", "error", "code", "message", "data",
];

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-2i64..4).prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        "\\PC{0,10}".prop_map(Value::from),
        prop::sample::select(vec!["2.0", "session/update", "ping", "initialize"])
            .prop_map(Value::from),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(
                (prop::sample::select(KEYS).prop_map(str::to_owned), inner),
                0..4
            )
            .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn message() -> impl Strategy<Value = Value> {
    prop::collection::vec((prop::sample::select(KEYS), json_value()), 0..6).prop_map(|kv| {
        Value::Object(
            kv.into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect::<Map<_, _>>(),
        )
    })
}

fn line() -> impl Strategy<Value = String> {
    prop_oneof![
        5 => message().prop_map(|v| v.to_string()),
        2 => json_value().prop_map(|v| v.to_string()),
        1 => (message(), any::<prop::sample::Index>()).prop_map(|(v, i)| {
            let s = v.to_string();
            let mut end = i.index(s.len() + 1).min(s.len());
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            s[..end].to_string()
        }),
        1 => "[^\\n]{0,60}",
        1 => Just(String::new()),
        1 => prop::collection::vec(any::<u8>(), 0..40)
            .prop_map(|b| String::from_utf8_lossy(&b).replace('\n', " ")),
    ]
}

/// The messages the reader should hand to the handler: objects with a string `method`.
fn expected(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter_map(|l| {
            let v: Value = serde_json::from_str(l.trim()).ok()?;
            let method = v.as_object()?.get("method")?.as_str()?;
            Some(method.to_owned())
        })
        .collect()
}

async fn case(lines: Vec<String>) -> Result<(), TestCaseError> {
    let (ours, theirs) = tokio::io::duplex(1 << 20);
    let (read, write) = tokio::io::split(ours);
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen_in = seen.clone();
    let handler: Handler = Box::new(move |_conn, incoming| {
        let method = match incoming {
            Incoming::Notification { method, .. } | Incoming::Request { method, .. } => method,
        };
        seen_in.lock().unwrap().push(method);
    });
    let closes = Arc::new(Mutex::new(0u32));
    let closes_in = closes.clone();
    let on_close: OnClose = Box::new(move || {
        Box::pin(async move {
            *closes_in.lock().unwrap() += 1;
            CloseInfo {
                status: "gone".to_owned(),
                stderr_tail: String::new(),
            }
        })
    });
    let conn = Connection::spawn(
        read,
        write,
        Options {
            jsonrpc_field: true,
        },
        handler,
        on_close,
    );
    let (their_read, mut their_write) = tokio::io::split(theirs);
    let mut their_lines = BufReader::new(their_read).lines();

    let mut out = String::new();
    for l in &lines {
        out.push_str(l);
        out.push('\n');
    }
    out.push_str("{\"jsonrpc\":\"2.0\",\"method\":\"sentinel\"}\n");
    their_write.write_all(out.as_bytes()).await.unwrap();
    let want: Vec<String> = expected(&lines)
        .into_iter()
        .chain(["sentinel".to_owned()])
        .collect();
    let got = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let got = seen.lock().unwrap().clone();
            if got.last().map(String::as_str) == Some("sentinel") && got.len() >= want.len() {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .map_err(|_| {
        TestCaseError::fail(format!(
            "the reader stalled; saw {:?}",
            seen.lock().unwrap()
        ))
    })?;
    prop_assert_eq!(got, want);

    // A real request still round-trips.
    let req = tokio::spawn({
        let conn = conn.clone();
        async move { conn.request("ping", json!({"n": 1})).await }
    });
    let sent = tokio::time::timeout(Duration::from_secs(5), their_lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let sent: Value = serde_json::from_str(&sent).unwrap();
    prop_assert_eq!(&sent["method"], "ping");
    prop_assert_eq!(&sent["jsonrpc"], "2.0");
    let reply = json!({"jsonrpc": "2.0", "id": sent["id"], "result": {"pong": true}});
    their_write
        .write_all(format!("{reply}\n").as_bytes())
        .await
        .unwrap();
    let result = tokio::time::timeout(Duration::from_secs(5), req)
        .await
        .unwrap()
        .unwrap();
    prop_assert_eq!(result.unwrap(), json!({"pong": true}));

    // The peer's output ends: a pending request fails with Closed, on_close runs once.
    let pending = tokio::spawn({
        let conn = conn.clone();
        async move { conn.request("never", Value::Null).await }
    });
    let _ = tokio::time::timeout(Duration::from_secs(5), their_lines.next_line()).await;
    their_write.shutdown().await.unwrap();
    let r = tokio::time::timeout(Duration::from_secs(5), pending)
        .await
        .unwrap()
        .unwrap();
    prop_assert!(matches!(r, Err(RpcError::Closed(_))), "{:?}", r);
    prop_assert_eq!(*closes.lock().unwrap(), 1);
    prop_assert!(conn.closed().is_some());
    Ok(())
}

#[test]
fn the_reader_survives_hostile_lines_and_keeps_working() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut runner = TestRunner::new(Config {
        cases: 256,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&prop::collection::vec(line(), 0..32), |lines| {
            rt.block_on(case(lines))
        })
        .unwrap_or_else(|e| panic!("{e}"));
}
