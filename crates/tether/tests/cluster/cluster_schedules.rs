//! Scheduled turns on a cluster (issue 30): three nodes on one PostgreSQL database; the
//! node that owns the conversation (and would run the turn) is SIGKILLed two seconds
//! before a run is due. Another node claims the run and the conversation, and the run
//! happens once, in the same session.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::{Value, json};
use tether_testkit::{Cluster, within_for};

use crate::common::{node_options, str_of};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_node_is_killed_before_it_is_due_runs_once_on_another_node() {
    let mut cluster = Cluster::start(3, node_options(120)).await;
    let a = cluster.node(0);
    let c = a.new_conversation(None).await;
    let (first, _) = a.say_and_wait(&c, "remember figs").await;
    let sid = str_of(&first, "session_id");
    let (status, s) = a
        .post(
            "/api/v1/schedules",
            json!({"conversation_id": c, "at": tether_testkit::utc_in(4), "time_zone": "UTC",
                   "prompt": "what do you remember?"}),
        )
        .await;
    assert_eq!(status, 201, "{s}");
    let id = str_of(&s, "id");
    tokio::time::sleep(Duration::from_secs(2)).await;
    cluster.node_mut(0).kill9_with_agents().await;

    let b = cluster.node(1);
    let run = within_for("the run on another node", Duration::from_secs(30), async {
        loop {
            let turns = b.all_turns(&sid).await;
            let done: Vec<Value> = turns
                .as_array()
                .unwrap()
                .iter()
                .filter(|t| t["input"] == "what do you remember?")
                .cloned()
                .collect();
            if done.iter().any(|t| t["status"] == "completed") {
                return done;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert_eq!(run.len(), 1, "once: {run:?}");
    assert!(
        run[0]["result_text"]
            .as_str()
            .unwrap()
            .contains("remember figs"),
        "the same session: {run:?}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let turns = b.all_turns(&sid).await;
    let runs = turns
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["input"] == "what do you remember?")
        .count();
    assert_eq!(runs, 1, "still once: {turns}");
    let v = cluster
        .node(2)
        .get_ok(&format!("/api/v1/schedules/{id}"))
        .await;
    assert_eq!(v["state"], "done", "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sent_to_another_node_is_the_senders_schedule() {
    use tether_testkit::people::{Who, person};
    let cluster = Cluster::start(2, node_options(120)).await;
    let (a, b) = (cluster.node(0), cluster.node(1));
    let owner = Who {
        d: a,
        token: a.token.clone(),
    };
    let (_, bob_on_a) = person(&owner, "bob", "member").await;
    let (_, conv) = bob_on_a.post("/api/v1/conversations", json!({})).await;
    let c = str_of(&conv, "id");
    let (_, first) = bob_on_a
        .post(
            &format!("/api/v1/conversations/{c}/messages"),
            json!({"text": "hello"}),
        )
        .await;
    assert!(first["turn_id"].is_string(), "{first}");
    // Bob's token on the other node: the command is forwarded to the owner (node a).
    let bob_on_b = Who {
        d: b,
        token: bob_on_a.token.clone(),
    };
    let (status, r) = bob_on_b
        .post(
            &format!("/api/v1/conversations/{c}/messages"),
            json!({"text": "/every 1h check the build"}),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    let (_, list) = bob_on_b
        .get(&format!("/api/v1/schedules?conversation_id={c}"))
        .await;
    assert_eq!(list["schedules"][0]["owner"], "bob", "{list}");
}
