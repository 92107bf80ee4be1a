//! End to end: every node follows every conversation live (issue 12, design point 5).
//! Three `tether serve` on one PostgreSQL database: a turn run on node A is followed by
//! SSE on node C complete and in order while it runs; a stream on node B that resumes
//! from `Last-Event-ID` gets exactly the rest; the conversation list stream on C sees A's
//! conversation change; with the commit notices off, polling alone delivers the same.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use tether_testkit::{Cluster, Daemon, DaemonOptions, SseStream, within};

fn options(notify: bool) -> DaemonOptions {
    let mut options = crate::common::node_options(2);
    if !notify {
        options.extra_config.push_str("notices = false\n");
    }
    options
}

/// Event ids of the stream until the event `last` (included); each once, each with the
/// SSE id of its own.
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

/// Ids of the session's stored events, in id order (read on `d`).
async fn stored_ids(d: &Daemon, session: &str) -> Vec<i64> {
    let page = d
        .get_ok(&format!("/api/v1/sessions/{session}/events?limit=1000"))
        .await;
    let mut ids: Vec<i64> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect();
    ids.sort_unstable();
    ids
}

/// The next `conversation` message of a list stream about `id` that satisfies `pred`.
async fn next_change(s: &mut SseStream, id: &str, pred: impl Fn(&Value) -> bool) -> Value {
    within("a list change", async {
        loop {
            let ev = s.next().await.expect("the list stream ended");
            if ev.event.as_deref() != Some("conversation") {
                continue;
            }
            let msg = ev.json();
            if msg["conversation"]["id"] == id && pred(&msg) {
                return msg;
            }
        }
    })
    .await
}

async fn list_stream(d: &Daemon) -> SseStream {
    let resp = within(
        "open the list stream",
        d.client
            .get(d.url("/api/v1/conversations/events"))
            .bearer_auth(&d.token)
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    SseStream::new(resp)
}

async fn runtime_figure(d: &Daemon, name: &str) -> u64 {
    d.get_ok("/api/v1/runtime").await[name]
        .as_u64()
        .unwrap_or_else(|| panic!("GET /api/v1/runtime reports {name}"))
}

/// The scenario of the module header, with the commit notices on or off.
async fn a_turn_on_one_node_is_followed_live_on_the_others(notify: bool) {
    let cluster = Cluster::start(3, options(notify)).await;
    let (a, b, c) = (cluster.node(0), cluster.node(1), cluster.node(2));
    let mut list = list_stream(c).await;

    let conv = a.new_conversation(None).await;
    let m = next_change(&mut list, &conv, |_| true).await;
    assert_eq!(m["change"], "created", "{m}");

    // C follows from the start, before anything runs; the turn runs on A, streaming.
    let mut on_c = c.events(&conv, Some("0")).await;
    let first = a.say(&conv, "stream 60 10").await;
    let session = first["session_id"].as_str().unwrap().to_string();
    // C's list sees the turn run while it runs, on a notice (the list poll, every 2 s,
    // may fall after the turn: then it sees the turn's end only, below).
    if notify {
        next_change(&mut list, &conv, |m| {
            m["conversation"]["state"] == "bound/running"
        })
        .await;
    }
    let live = within("C's stream delivers while the turn runs", on_c.next())
        .await
        .expect("C's stream ended");
    let running = a.get_ok(&format!("/api/v1/conversations/{conv}")).await;
    assert_eq!(
        running["state"], "bound/running",
        "the first event reached C during the turn: {live:?}"
    );
    let turn = a
        .wait_turn(&session, first["turn_id"].as_str().unwrap())
        .await;
    assert_eq!(turn["status"], "completed", "{turn}");
    next_change(&mut list, &conv, |m| {
        m["conversation"]["state"] == "bound/idle"
    })
    .await;

    let stored = stored_ids(a, &session).await;
    assert!(stored.len() > 60, "{} events", stored.len());
    let first_id = live.json()["id"].as_i64().unwrap();
    let mut got = vec![first_id];
    got.extend(ids_until(&mut on_c, *stored.last().unwrap()).await);
    assert_eq!(got, stored, "C got every event of A's turn, once, in order");

    // B resumes from the middle of the first turn while A runs a second one: exactly
    // the rest of the first, then the second live.
    let middle = stored[stored.len() / 2];
    let mut on_b = b.events(&conv, Some(&middle.to_string())).await;
    let (_, second) = a.say_and_wait(&conv, "stream 30 5").await;
    assert_eq!(second["status"], "completed", "{second}");
    let all = stored_ids(a, &session).await;
    let rest: Vec<i64> = all.iter().copied().filter(|id| *id > middle).collect();
    assert_eq!(
        ids_until(&mut on_b, *all.last().unwrap()).await,
        rest,
        "B resumed with exactly the rest"
    );
    // C, still open, got the second turn too, and nothing twice.
    let second_part: Vec<i64> = all
        .iter()
        .copied()
        .filter(|id| id > stored.last().unwrap())
        .collect();
    assert_eq!(
        ids_until(&mut on_c, *all.last().unwrap()).await,
        second_part
    );

    // What reached B and C came from A's commits through their tails.
    for (name, d) in [("b", b), ("c", c)] {
        let tailed = runtime_figure(d, "tailed_events").await;
        assert!(tailed > 0, "node {name} tailed no event");
        let notices = runtime_figure(d, "tail_notices").await;
        if notify {
            assert!(notices > 0, "node {name} got no notice");
        } else {
            assert_eq!(notices, 0, "node {name}: notices are off");
        }
    }
    assert_eq!(runtime_figure(a, "tailed_events").await, 0, "A ran it all");
}

#[tokio::test]
async fn a_turn_on_node_a_is_followed_live_on_node_c_and_resumed_on_node_b() {
    a_turn_on_one_node_is_followed_live_on_the_others(true).await;
}

#[tokio::test]
async fn with_the_commit_notices_off_polling_alone_delivers_to_the_other_nodes() {
    a_turn_on_one_node_is_followed_live_on_the_others(false).await;
}

#[tokio::test]
async fn a_lone_sqlite_daemon_has_no_tail() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let conv = d.new_conversation(None).await;
    let mut s = d.events(&conv, Some("0")).await;
    let (out, turn) = d.say_and_wait(&conv, "stream 5 0").await;
    assert_eq!(turn["status"], "completed");
    let stored = stored_ids(&d, out["session_id"].as_str().unwrap()).await;
    assert_eq!(ids_until(&mut s, *stored.last().unwrap()).await, stored);
    assert_eq!(runtime_figure(&d, "tailed_events").await, 0);
    assert_eq!(runtime_figure(&d, "tail_notices").await, 0);
}
