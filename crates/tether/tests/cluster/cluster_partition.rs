//! End to end, issue 33 item 7: a real network partition. Three `tether serve` nodes, each
//! in a network namespace of its own (iproute2 `ip netns` and veth; skipped, saying why,
//! only where the kernel or the user may not make them), reach PostgreSQL over veth
//! links. Node a is cut off the database — and so off the other nodes, which meet only
//! there — with its sockets open, in the middle of a streaming turn: its lease runs out,
//! b takes its conversations over (the turn interrupted once, the next message resumes
//! the same session on b), a answers `store_unavailable` meanwhile and, when the cut
//! heals, writes nothing of what its agent did in between (fencing), ends its stale
//! agent and rejoins the cluster, serving the conversations again. Nothing lost,
//! nothing doubled: every turn of both conversations ended exactly once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;
use tether_testkit::netns::Lab;
use tether_testkit::postgres::{PgServer, TestDatabase};
use tether_testkit::{Daemon, DaemonOptions, within};

use crate::common::{node_options, str_of};

async fn session_events(d: &Daemon, sid: &str) -> Vec<Value> {
    d.get_ok(&format!("/api/v1/sessions/{sid}/events?limit=5000"))
        .await["events"]
        .as_array()
        .unwrap()
        .clone()
}

async fn turn_status(d: &Daemon, sid: &str, tid: &str) -> String {
    let turns = d.all_turns(sid).await;
    turns
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == tid)
        .map(|t| t["status"].as_str().unwrap().to_owned())
        .unwrap_or_default()
}

/// Every turn of the session started once and ended once: turn id → its end.
fn ends_once(events: &[Value]) -> HashMap<String, String> {
    let mut started: HashMap<String, usize> = HashMap::new();
    let mut ended: HashMap<String, Vec<String>> = HashMap::new();
    for e in events {
        let kind = e["payload"]["type"].as_str().unwrap_or_default();
        let Some(tid) = e["turn_id"].as_str().or(e["payload"]["turn_id"].as_str()) else {
            continue;
        };
        match kind {
            "turn_started" => *started.entry(tid.to_owned()).or_default() += 1,
            "turn_completed" | "turn_failed" | "turn_cancelled" | "turn_interrupted" => ended
                .entry(tid.to_owned())
                .or_default()
                .push(kind.to_owned()),
            _ => {}
        }
    }
    for (tid, n) in &started {
        assert_eq!(*n, 1, "turn {tid} started {n} times");
        let ends = ended.get(tid).cloned().unwrap_or_default();
        assert_eq!(ends.len(), 1, "turn {tid} ended {ends:?}");
    }
    ended
        .into_iter()
        .map(|(t, mut k)| (t, k.pop().unwrap()))
        .collect()
}

async fn alive_in_view(d: &Daemon, id: &str) -> Option<bool> {
    let view = d.get_ok("/api/v1/cluster").await;
    view["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == id)
        .map(|n| n["alive"] == true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cut_off_the_network_is_taken_over_writes_nothing_and_rejoins() {
    let lab = match Lab::create(3) {
        Ok(lab) => lab,
        Err(why) => {
            eprintln!("SKIPPED: this machine makes no network namespaces here: {why}");
            return;
        }
    };
    let pg = tokio::task::spawn_blocking(PgServer::start_reachable)
        .await
        .unwrap()
        .expect("a PostgreSQL reachable from the namespaces");
    let db = within("the database", TestDatabase::create_on(&pg.url()))
        .await
        .unwrap();
    let shared = tempfile::tempdir().unwrap();
    let (agents, work) = (shared.path().join("agents"), shared.path().join("work"));
    let mut nodes = Vec::new();
    for k in 0..3 {
        let net = lab.node(k).clone();
        let url = db.url.replacen("127.0.0.1", &net.db_ip, 1);
        let opts = node_options(2);
        let extra_config = format!(
            "{}\n[server]\nallowed_hosts = [{:?}]\n",
            opts.extra_config, net.api_ip
        );
        nodes.push(
            Daemon::start(DaemonOptions {
                extra_config,
                database_url: Some(url),
                fake_state_dir: Some(agents.clone()),
                work_dir: Some(work.clone()),
                netns: Some(net),
                ..opts
            })
            .await,
        );
    }
    let (a, b) = (&nodes[0], &nodes[1]);
    let a_id = str_of(&a.get_ok("/api/v1/cluster").await, "node_id");

    // Two conversations owned by a: one idle after a turn, one streaming when the cut
    // comes (100 deltas, 100 ms apart).
    let idle = a.new_conversation(None).await;
    let (first, _) = a.say_and_wait(&idle, "before the cut").await;
    let idle_sid = str_of(&first, "session_id");
    let busy = a.new_conversation(None).await;
    let o = a.say(&busy, "stream 100 100").await;
    let (busy_sid, busy_tid) = (str_of(&o, "session_id"), str_of(&o, "turn_id"));
    a.wait_conversation(&busy, "turn running", |v| v["state"] == "bound/running")
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    lab.cut(0);
    // a says it cannot serve; a message to it fails fast, retryable.
    within("a is not ready", async {
        loop {
            let r = a.client.get(a.url("/api/v1/ready")).send().await.unwrap();
            if r.status() == 503 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    let (status, body) = a
        .post(
            &format!("/api/v1/conversations/{idle}/messages"),
            serde_json::json!({"text": "to the cut node"}),
        )
        .await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "store_unavailable", "{body}");

    // a's lease runs out; b takes the conversations over.
    within("a's lease ends", async {
        while alive_in_view(b, &a_id).await != Some(false) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    within("the running turn is interrupted", async {
        while turn_status(b, &busy_sid, &busy_tid).await != "interrupted" {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let (again, done) = b.say_and_wait(&idle, "during the cut").await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(again["session_id"], idle_sid, "the same session, on b");
    let (next, done) = b.say_and_wait(&busy, "after the interruption").await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(next["session_id"], busy_sid, "the same session, on b");

    // a's agent streamed on meanwhile; the cut heals after its stream ended.
    tokio::time::sleep(Duration::from_secs(6)).await;
    lab.heal(0);
    let figures = within("a's writes are refused and its actors end", async {
        loop {
            if let Ok(r) = a
                .client
                .get(a.url("/api/v1/runtime"))
                .bearer_auth(&a.token)
                .send()
                .await
                && r.status() == 200
            {
                let f: Value = r.json().await.unwrap();
                if f["fenced_writes"].as_u64().unwrap_or(0) > 0 && f["actors"] == 0 {
                    return f;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    assert!(figures["fenced_writes"].as_u64().unwrap() >= 1, "{figures}");
    within("a rejoins", async {
        while alive_in_view(b, &a_id).await != Some(true) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    // a serves both conversations again, in their sessions.
    let (last, done) = a.say_and_wait(&busy, "after the heal").await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(last["session_id"], busy_sid);
    let (last, done) = a.say_and_wait(&idle, "after the heal").await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(last["session_id"], idle_sid);

    // Nothing lost, nothing doubled.
    let busy_ends = ends_once(&session_events(b, &busy_sid).await);
    assert_eq!(busy_ends[&busy_tid], "turn_interrupted", "{busy_ends:?}");
    assert_eq!(busy_ends.len(), 3, "{busy_ends:?}");
    let idle_ends = ends_once(&session_events(b, &idle_sid).await);
    assert_eq!(idle_ends.len(), 3, "{idle_ends:?}");
    assert!(
        idle_ends.values().all(|k| k == "turn_completed"),
        "{idle_ends:?}"
    );
    drop(nodes);
    drop(pg);
}
