//! End to end: the event feed behind the SSE streams. Many streams of one conversation
//! each get every event once, in order, across sessions; a resumed stream gets exactly
//! the rest; a conversation is followed only while a stream is open.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::Value;
use tether_testkit::{Daemon, DaemonOptions, SseStream, within};

/// Event ids of the stream until the event `last` (included).
async fn ids_until(s: &mut SseStream, last: i64) -> Vec<i64> {
    within("SSE events", async {
        let mut out = Vec::new();
        while let Some(ev) = s.next().await {
            let v = ev.json();
            let id = v["id"].as_i64().unwrap();
            assert_eq!(ev.id.as_deref(), Some(id.to_string().as_str()));
            out.push(id);
            if id >= last {
                return out;
            }
        }
        panic!("the event stream ended early");
    })
    .await
}

/// Ids of every stored event of the conversation's sessions, in id order.
async fn stored_ids(d: &Daemon, sessions: &[&str]) -> Vec<i64> {
    let mut ids = Vec::new();
    for sid in sessions {
        let page = d
            .get_ok(&format!("/api/v1/sessions/{sid}/events?limit=1000"))
            .await;
        ids.extend(
            page["events"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["id"].as_i64().unwrap()),
        );
    }
    ids.sort_unstable();
    ids
}

async fn followed(d: &Daemon) -> u64 {
    d.get_ok("/api/v1/runtime").await["followed_conversations"]
        .as_u64()
        .expect("GET /api/v1/runtime reports followed_conversations")
}

fn session_of(o: &Value) -> String {
    o["session_id"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn many_streams_of_one_conversation_each_get_every_event_once_in_order() {
    const STREAMS: usize = 30;
    let d = Daemon::start(DaemonOptions::default()).await;
    let c = d.new_conversation(None).await;
    let mut streams = Vec::new();
    for _ in 0..STREAMS {
        streams.push(d.events(&c, Some("0")).await);
    }
    // Two sessions of the conversation, one after the other, both streaming.
    let (o1, t1) = d.say_and_wait(&c, "stream 200 0").await;
    assert_eq!(t1["status"], "completed", "{t1}");
    let (o2, t2) = d.say_and_wait(&c, "/new stream 150 0").await;
    assert_eq!(t2["status"], "completed", "{t2}");
    let (s1, s2) = (session_of(&o1), session_of(&o2));
    assert_ne!(s1, s2, "/new started a second session");
    let stored = stored_ids(&d, &[&s1, &s2]).await;
    let last = *stored.last().unwrap();
    for s in &mut streams {
        assert_eq!(
            ids_until(s, last).await,
            stored,
            "every event, once, in order"
        );
    }
    // A stream resumed in the middle gets exactly the rest.
    let cut = stored[stored.len() / 2];
    let mut resumed = d.events(&c, Some(&cut.to_string())).await;
    let rest: Vec<i64> = stored.iter().copied().filter(|id| *id > cut).collect();
    assert_eq!(ids_until(&mut resumed, last).await, rest);
}

#[tokio::test]
async fn a_conversation_is_followed_only_while_a_stream_is_open() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let a = d.new_conversation(None).await;
    let b = d.new_conversation(None).await;
    assert_eq!(
        followed(&d).await,
        0,
        "nothing is followed before a stream opens"
    );
    let a1 = d.events(&a, None).await;
    let a2 = d.events(&a, None).await;
    let b1 = d.events(&b, None).await;
    assert_eq!(followed(&d).await, 2, "one feed per followed conversation");
    drop(a1);
    drop(b1);
    within("b's feed goes with its last stream", async {
        while followed(&d).await != 1 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    drop(a2);
    within("a's feed goes with its last stream", async {
        while followed(&d).await != 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}
