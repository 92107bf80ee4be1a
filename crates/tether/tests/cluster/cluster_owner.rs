//! End to end, issue 12 (ownership, fencing, failover): real `tether serve` nodes on one
//! PostgreSQL database with the fake agent, leases of 2 s. A conversation's owner dies
//! mid-turn → a survivor takes it over (the turn `interrupted` once, its pending approval
//! `expired`, one status line) and the next message, sent to another node, resumes the
//! same agent session with its history (shared agent home) or fails `resume_unavailable`
//! (no shared home); a second node starting leaves the first's running turn alone; a
//! stale owner (paused past its lease) writes nothing after the take-over.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::common::{self, database, node_options, str_of};
use serde_json::Value;
use tether_testkit::{Cluster, Daemon, DaemonOptions, within};

fn options() -> DaemonOptions {
    DaemonOptions {
        // Long enough that only recovery ends the approval of the killed node.
        approval_timeout_secs: 300,
        ..node_options(2)
    }
}

async fn turn(d: &Daemon, sid: &str, tid: &str) -> Value {
    let turns = d.all_turns(sid).await;
    turns
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == tid)
        .cloned()
        .unwrap_or_else(|| panic!("no turn {tid} in {turns}"))
}

async fn wait_turn_status(d: &Daemon, sid: &str, tid: &str, status: &str) -> Value {
    within(&format!("turn {tid} becomes {status}"), async {
        loop {
            let t = turn(d, sid, tid).await;
            if t["status"] == status {
                return t;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

async fn session_events(d: &Daemon, sid: &str) -> Vec<Value> {
    d.get_ok(&format!("/api/v1/sessions/{sid}/events?limit=1000"))
        .await["events"]
        .as_array()
        .unwrap()
        .clone()
}

fn kinds<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["payload"]["type"] == kind)
        .collect()
}

async fn status_lines(d: &Daemon, conv: &str, containing: &str) -> usize {
    let hist = d
        .get_ok(&format!("/api/v1/conversations/{conv}/messages"))
        .await;
    hist.as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "status" && m["text"].as_str().unwrap().contains(containing))
        .count()
}

/// `live_conversations` of node `id` in `view` (`GET /api/v1/cluster`).
/// Node `id`'s live conversations; the node must be in the view.
fn live_of(view: &Value, id: &str) -> i64 {
    common::live_of(view, id).unwrap_or_else(|| panic!("no node {id} in {view}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_owner_mid_turn_is_taken_over_and_another_node_resumes_the_session() {
    let mut cluster = Cluster::start(3, options()).await;
    let a_id = str_of(&cluster.node(0).get_ok("/api/v1/cluster").await, "node_id");
    let a = cluster.node(0);
    let c = a.new_conversation(None).await;
    let (o1, _) = a.say_and_wait(&c, "remember apples").await;
    let sid = str_of(&o1, "session_id");
    // A second conversation waits for an approval when its owner dies.
    let d = a.new_conversation(None).await;
    let od = a.say(&d, "approve dangerous").await;
    let sd = str_of(&od, "session_id");
    a.wait_conversation(&d, "approval pending", |v| {
        v["state"] == "bound/waiting_approval"
    })
    .await;
    let approval = a.pending_approval(&d).await;
    let approval_id = str_of(&approval, "id");
    let running = a.say(&c, "stream 100 100").await;
    let tid = str_of(&running, "turn_id");
    a.wait_conversation(&c, "turn running", |v| v["state"] == "bound/running")
        .await;
    // The agent has the prompt (it streams): `running` is stored before the prompt goes
    // out, and a kill between the two leaves the agent without it (a cold CI run did).
    within("the agent streams", async {
        loop {
            let events = session_events(a, &sid).await;
            if kinds(&events, "message_delta")
                .iter()
                .any(|e| e["turn_id"] == tid.as_str())
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    // Both live sessions run on their owner, a: the cluster view says so.
    let view = cluster.node(1).get_ok("/api/v1/cluster").await;
    assert_eq!(live_of(&view, &a_id), 2, "{view}");

    cluster.node_mut(0).kill9().await;

    // A survivor takes both over once a's lease ends.
    let b = cluster.node(1);
    let t = wait_turn_status(b, &sid, &tid, "interrupted").await;
    assert_eq!(t["error_code"], "interrupted", "{t}");
    let td = wait_turn_status(b, &sd, &str_of(&od, "turn_id"), "interrupted").await;
    assert_eq!(td["status"], "interrupted");
    let approvals = b.get_ok("/api/v1/approvals").await;
    let ap = approvals
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["id"] == approval_id.as_str())
        .unwrap();
    assert_eq!(ap["status"], "expired", "{ap}");
    // Recovered and released: no node owns them now.
    let view = within("the conversations are released", async {
        loop {
            let view = b.get_ok("/api/v1/cluster").await;
            if live_of(&view, &a_id) == 0 {
                return view;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(
        view["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["live_conversations"] == 0),
        "{view}"
    );
    let cv = b.get_ok(&format!("/api/v1/conversations/{c}")).await;
    assert_eq!(
        cv["binding"]["session_id"],
        sid.as_str(),
        "the binding stays"
    );
    assert_eq!(cv["binding"]["status"], "dormant");
    // Interrupted once, one status line.
    let events = session_events(b, &sid).await;
    let interrupted: Vec<_> = kinds(&events, "turn_interrupted")
        .into_iter()
        .filter(|e| e["turn_id"] == tid.as_str())
        .collect();
    assert_eq!(interrupted.len(), 1, "{events:?}");
    assert_eq!(status_lines(b, &c, "interrupted").await, 1);
    assert_eq!(status_lines(b, &d, "expired").await, 1);

    // The next message, sent to a third node, resumes the same session with its history
    // (the agent home is shared).
    let third = cluster.node(2);
    let (o, t) = third.say_and_wait(&c, "after failover").await;
    assert_eq!(o["session_id"], sid.as_str(), "{o}");
    assert!(o["new_session"].is_null(), "{o}");
    assert_eq!(t["status"], "completed", "{t}");
    assert!(
        t["result_text"]
            .as_str()
            .unwrap()
            .contains(r#"remembers 2: ["remember apples","stream 100 100"]"#),
        "{t}"
    );
    // It runs there: the third node owns the conversation now.
    let third_id = str_of(&third.get_ok("/api/v1/cluster").await, "node_id");
    let view = b.get_ok("/api/v1/cluster").await;
    assert_eq!(live_of(&view, &third_id), 1, "{view}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_shared_agent_home_the_next_message_fails_resume_unavailable_and_the_binding_stays()
 {
    let db = database().await;
    // Each node with an agent home of its own; the workspace is shared.
    let work = tempfile::tempdir().unwrap();
    let node = || DaemonOptions {
        database_url: Some(db.url.clone()),
        work_dir: Some(work.path().to_path_buf()),
        ..options()
    };
    let mut a = Daemon::start(node()).await;
    let b = Daemon::start(node()).await;
    let c = a.new_conversation(None).await;
    let (o1, _) = a.say_and_wait(&c, "hello").await;
    let sid = str_of(&o1, "session_id");
    a.kill9().await;
    // Taken over by b: the session is dormant there.
    b.wait_conversation(&c, "the session is recovered dormant", |v| {
        v["binding"]["status"] == "dormant"
    })
    .await;
    let (o2, t2) = b.say_and_wait(&c, "are you there?").await;
    assert_eq!(o2["session_id"], sid.as_str(), "no silent new session");
    assert_eq!(t2["status"], "failed", "{t2}");
    assert_eq!(t2["error_code"], "resume_unavailable", "{t2}");
    let cv = b.get_ok(&format!("/api/v1/conversations/{c}")).await;
    assert_eq!(cv["binding"]["session_id"], sid.as_str(), "binding stays");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_node_starting_does_not_touch_the_first_nodes_running_turn() {
    let db = database().await;
    let node = || DaemonOptions {
        database_url: Some(db.url.clone()),
        ..options()
    };
    let a = Daemon::start(node()).await;
    let c = a.new_conversation(None).await;
    let o = a.say(&c, "stream 20 100").await;
    let (sid, tid) = (str_of(&o, "session_id"), str_of(&o, "turn_id"));
    a.wait_conversation(&c, "turn running", |v| v["state"] == "bound/running")
        .await;
    // A second node starts (its start-up recovery runs) while a's turn runs.
    let b = Daemon::start(node()).await;
    let t = a.wait_turn(&sid, &tid).await;
    assert_eq!(t["status"], "completed", "{t}");
    let events = session_events(&b, &sid).await;
    assert!(kinds(&events, "turn_interrupted").is_empty(), "{events:?}");
    assert_eq!(status_lines(&b, &c, "restarted").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_owner_paused_past_its_lease_writes_nothing_after_the_take_over() {
    let cluster = Cluster::start(3, options()).await;
    let a = cluster.node(0);
    let c = a.new_conversation(None).await;
    let o = a.say(&c, "stream 100 100").await;
    let (sid, tid) = (str_of(&o, "session_id"), str_of(&o, "turn_id"));
    a.wait_conversation(&c, "turn running", |v| v["state"] == "bound/running")
        .await;
    let before = a.get_ok("/api/v1/runtime").await;
    assert_eq!(before["fenced_writes"], 0, "{before}");
    // Past its lease: the agent keeps streaming into its pipe meanwhile.
    a.sigstop();
    let b = cluster.node(1);
    // b sees a's lease end, and a sweep runs. (If a was paused inside a transaction, its
    // row locks hold the survivor's take-over or recovery until a resumes.)
    within("a's lease ends", async {
        loop {
            let view = b.get_ok("/api/v1/cluster").await;
            if view["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n["alive"] == false)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    a.sigcont();
    wait_turn_status(b, &sid, &tid, "interrupted").await;
    // The stale node tries to store what its agent streamed: refused.
    let figures = within("a's writes are refused", async {
        loop {
            let f = a.get_ok("/api/v1/runtime").await;
            if f["fenced_writes"].as_u64().unwrap() > 0 && f["actors"] == 0 {
                return f;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(figures["fenced_writes"].as_u64().unwrap() >= 1, "{figures}");
    // Its agent is ended and nothing of it was stored after the take-over: the
    // survivor's recovery (the turn interrupted, then one status line) is the end.
    let pool = a.get_ok("/api/v1/pool").await;
    assert_eq!(pool["live"], 0, "{pool}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after = session_events(b, &sid).await;
    let n = after.len();
    assert!(n >= 2, "{after:?}");
    assert_eq!(
        after[n - 1]["payload"]["type"],
        "status",
        "{:?}",
        &after[n - 3..]
    );
    assert_eq!(
        after[n - 2]["payload"]["type"],
        "turn_interrupted",
        "{:?}",
        &after[n - 3..]
    );
    assert_eq!(kinds(&after, "turn_interrupted").len(), 1);
    let t = turn(b, &sid, &tid).await;
    assert_eq!(t["status"], "interrupted", "{t}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_gone_dormant_releases_its_conversation_and_the_next_node_claims_it() {
    let mut dormant = options();
    dormant
        .extra_config
        .push_str("\n[pool]\nidle_ttl_secs = 1\n");
    let cluster = Cluster::start(2, dormant).await;
    let (a, b) = (cluster.node(0), cluster.node(1));
    let a_id = str_of(&a.get_ok("/api/v1/cluster").await, "node_id");
    let b_id = str_of(&b.get_ok("/api/v1/cluster").await, "node_id");
    let c = a.new_conversation(None).await;
    let (o1, _) = a.say_and_wait(&c, "remember pears").await;
    // Live and idle in a's pool: a owns it.
    assert_eq!(live_of(&a.get_ok("/api/v1/cluster").await, &a_id), 1);
    // Evicted after its idle time, the session goes dormant and a lets it go.
    within("a releases the conversation", async {
        loop {
            let view = b.get_ok("/api/v1/cluster").await;
            if live_of(&view, &a_id) == 0 && a.get_ok("/api/v1/runtime").await["actors"] == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    // The next message, to b, is claimed and run by b, in the same session.
    let (o2, t2) = b.say_and_wait(&c, "what now?").await;
    assert_eq!(o2["session_id"], o1["session_id"], "{o2}");
    assert!(
        t2["result_text"]
            .as_str()
            .unwrap()
            .contains(r#"remembers 1: ["remember pears"]"#),
        "{t2}"
    );
    let view = a.get_ok("/api/v1/cluster").await;
    assert_eq!(live_of(&view, &b_id), 1, "{view}");
    assert_eq!(live_of(&view, &a_id), 0, "{view}");
    assert_eq!(b.get_ok("/api/v1/pool").await["live"], 1);
    assert_eq!(a.get_ok("/api/v1/pool").await["live"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_stale_owner_resumes_strictly_instead_of_reusing_its_old_process() {
    let cluster = Cluster::start(2, options()).await;
    let (a, b) = (cluster.node(0), cluster.node(1));
    let c = a.new_conversation(None).await;
    let (o1, _) = a.say_and_wait(&c, "remember figs").await;
    // a pauses past its lease with the session live and idle; b takes it over.
    a.sigstop();
    b.wait_conversation(&c, "b recovers the session dormant", |v| {
        v["binding"]["status"] == "dormant"
    })
    .await;
    // A turn runs on b meanwhile; its agent ends (so b lets the conversation go).
    let (_, crashed) = b.say_and_wait(&c, "crash").await;
    assert_eq!(crashed["error_code"], "agent_crashed", "{crashed}");
    let b_id = str_of(&b.get_ok("/api/v1/cluster").await, "node_id");
    within("b releases the conversation", async {
        while live_of(&b.get_ok("/api/v1/cluster").await, &b_id) != 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    a.sigcont();
    // a's old process never saw b's turn: the message must resume from the shared home.
    let (o2, t2) = a.say_and_wait(&c, "and now?").await;
    assert_eq!(o2["session_id"], o1["session_id"], "{o2}");
    assert_eq!(t2["status"], "completed", "{t2}");
    assert!(
        t2["result_text"]
            .as_str()
            .unwrap()
            .contains(r#"remembers 2: ["remember figs","crash"]"#),
        "{t2}"
    );
}
