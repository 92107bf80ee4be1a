//! End to end, issue 12 (failover within the lease): every node holds its presence lock
//! on PostgreSQL while it runs. A SIGKILLed owner's lock is freed by the server at once,
//! so a survivor takes its conversations over and the next message resumes the session
//! long before the node's lease (two minutes here) ends; a paused owner keeps its lock,
//! so its conversation stays its own and its turn ends normally when it wakes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::Value;
use tether_testkit::{Cluster, DaemonOptions, within};

use crate::common::{self, node_options, str_of};

/// Far longer than any wait below: only presence can end a node this early.
fn options() -> DaemonOptions {
    DaemonOptions {
        approval_timeout_secs: 300,
        ..node_options(120)
    }
}

/// Node `id`'s live conversations; none once it has left the view.
fn live_of(view: &Value, id: &str) -> i64 {
    common::live_of(view, id).unwrap_or(0)
}

#[tokio::test]
async fn a_killed_owner_is_taken_over_long_before_its_lease_ends() {
    let mut cluster = Cluster::start(2, options()).await;
    let a = cluster.node(0);
    let c = a.new_conversation(None).await;
    let (first, _) = a.say_and_wait(&c, "remember pears").await;
    let sid = str_of(&first, "session_id");
    let mut sse = a.events(&c, None).await;
    let running = a.say(&c, "stream 200 100").await;
    let tid = str_of(&running, "turn_id");
    // The first chunk, not just `bound/running`: the agent has the prompt (it keeps it
    // before answering), so the session remembers it after the kill.
    within("the first chunk", async {
        while let Some(ev) = sse.next().await {
            let v = ev.json();
            if v["turn_id"] == tid.as_str() && v["payload"]["type"] == "message_delta" {
                return;
            }
        }
        panic!("the event stream ended early");
    })
    .await;

    cluster.node_mut(0).kill9().await;

    // Within the testkit's 20 s, against a lease of 120 s.
    let b = cluster.node(1);
    let t = b.wait_turn(&sid, &tid).await;
    assert_eq!(t["status"], "interrupted", "{t}");
    // One status line, saying what happened.
    let hist = b
        .get_ok(&format!("/api/v1/conversations/{c}/messages"))
        .await;
    let lines: Vec<&str> = hist
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "status")
        .filter_map(|m| m["text"].as_str())
        .collect();
    assert_eq!(
        lines,
        vec![
            "the tether node running this conversation went away and another took over: the \
             running turn was interrupted. Send a message to continue in the same session, or \
             /new to start over."
        ],
        "{hist}"
    );
    let (o, t) = b.say_and_wait(&c, "after the kill").await;
    assert_eq!(o["session_id"], sid.as_str(), "the same session: {o}");
    assert_eq!(t["status"], "completed", "{t}");
    assert!(
        t["result_text"]
            .as_str()
            .unwrap()
            .contains(r#"remembers 2: ["remember pears","stream 200 100"]"#),
        "{t}"
    );
}

#[tokio::test]
async fn a_paused_owner_keeps_its_conversation_and_its_turn_ends_normally() {
    let cluster = Cluster::start(2, options()).await;
    let a = cluster.node(0);
    let a_id = str_of(&a.get_ok("/api/v1/cluster").await, "node_id");
    let c = a.new_conversation(None).await;
    let running = a.say(&c, "stream 30 100").await;
    let (sid, tid) = (str_of(&running, "session_id"), str_of(&running, "turn_id"));
    a.wait_conversation(&c, "turn running", |v| v["state"] == "bound/running")
        .await;

    a.sigstop();
    // Several sweeps of b (every 500 ms) look at a's lock meanwhile: still held.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let b = cluster.node(1);
    let view = b.get_ok("/api/v1/cluster").await;
    a.sigcont();
    assert_eq!(live_of(&view, &a_id), 1, "a still owns it: {view}");

    let t = b.wait_turn(&sid, &tid).await;
    assert_eq!(t["status"], "completed", "{t}");
}
