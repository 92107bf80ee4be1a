//! The cluster in process (issue 27 item 2): two runtimes, nodes `a` and `b`, on one
//! PostgreSQL database, each with a scripted agent and one clock the test moves. A
//! message sent to the node that does not own its conversation runs on the owner (its
//! agent, its session); when the owner's lease runs out on the clock, the other node takes
//! the conversation over, resumes the same agent session strictly, and the old owner's
//! writes are fenced. No daemon, no sleeps waiting for leases: the clock decides.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use support::*;
use tether_runtime::{Runtime, Seams};
use tether_store::{NodeRow, Store};
use tether_testkit::postgres::TestDatabase;
use tether_testkit::within;

const LEASE: Duration = Duration::from_secs(10);

struct Node {
    rt: Runtime,
    agent: Agent,
}

/// A node `id` on the database at `url`; its working folder is `work` (shared by both).
async fn node(
    id: &str,
    url: &str,
    dir: &std::path::Path,
    work: &std::path::Path,
    clock: Arc<ManualClock>,
) -> Node {
    let agent = Agent::scripted();
    let mut config = config(&dir.join(id));
    config.workspace_roots = vec![work.to_path_buf()];
    config.default_cwd = work.to_path_buf();
    config.cluster.node_id = id.into();
    config.cluster.lease_ttl = LEASE;
    let store = within("connect", Store::connect(url)).await.unwrap();
    let seams = Seams {
        drivers: Some(agent.drivers()),
        clock,
    };
    let rt = within(
        "start the runtime",
        Runtime::start_with(config, store, seams),
    )
    .await
    .unwrap();
    Node { rt, agent }
}

/// Registers node `id` with a lease that ends `lease_ms` after the clock's now and is
/// never renewed (a node that died without a goodbye, as the registry sees it).
async fn register_once(url: &str, id: &str, now: i64, lease_ms: i64) {
    let store = Store::connect(url).await.unwrap();
    let row = NodeRow {
        id: id.into(),
        name: "test".to_owned(),
        addr: "127.0.0.1:1".to_owned(),
        started_at_ms: now,
        heartbeat_at_ms: now,
        lease_until_ms: now + lease_ms,
        draining_at_ms: None,
        version: String::new(),
    };
    within("register", store.cluster().register_node(&row))
        .await
        .unwrap();
}

async fn two_nodes() -> (
    TestDatabase,
    tempfile::TempDir,
    Arc<ManualClock>,
    Node,
    Node,
) {
    let db = within("create a database", TestDatabase::create())
        .await
        .unwrap();
    let (tmp, dir) = temp();
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let clock = ManualClock::new(tether_store::now_ms());
    let a = node("a", &db.url, &dir, &work, clock.clone()).await;
    let b = node("b", &db.url, &dir, &work, clock.clone()).await;
    (db, tmp, clock, a, b)
}

#[tokio::test]
async fn a_message_sent_to_the_other_node_runs_on_the_owner() {
    let (db, _tmp, clock, mut a, mut b) = two_nodes().await;
    let _ma = within("join a", a.rt.join_cluster("127.0.0.1:1".into()))
        .await
        .unwrap();
    let _mb = within("join b", b.rt.join_cluster("127.0.0.1:2".into()))
        .await
        .unwrap();
    let _ = (&db, &clock);

    let conv = conversation(&a.rt).await;
    within("send on a", a.rt.send_message(&conv, msg("one"), "test"))
        .await
        .unwrap();
    a.agent.start().await.ok("thread-1");
    a.agent.prompt().await.complete("first");
    turns_ended(&a.rt, &conv, 1).await;

    // Sent to b, run by a: a's agent gets the prompt in the same session.
    within("send on b", b.rt.send_message(&conv, msg("two"), "test"))
        .await
        .unwrap();
    let p = a.agent.prompt().await;
    assert_eq!(
        (p.text.as_str(), p.external_id.as_str()),
        ("two", "thread-1")
    );
    p.complete("second");
    let evs = turns_ended(&b.rt, &conv, 2).await;
    assert_eq!(count(&evs, "turn_completed"), 2, "{:?}", kinds(&evs));
    assert!(
        b.agent.start_now().is_none(),
        "b started an agent of its own"
    );
    assert!(
        b.agent.prompt_now().is_none(),
        "b prompted an agent of its own"
    );

    let view = within("cluster view", b.rt.cluster_view()).await.unwrap();
    let live: Vec<_> = view
        .nodes
        .iter()
        .map(|n| (n.id.as_str(), n.alive, n.live_conversations))
        .collect();
    assert_eq!(view.node_id, "b");
    assert!(live.contains(&("a", true, 1)), "{live:?}");
    assert!(live.contains(&("b", true, 0)), "{live:?}");
}

/// What a test keeps while it runs: b's membership and a's presence lock.
type Kept = (tether_runtime::Membership, tether_store::Presence);

/// a registered once with a lease of 1 s that it never renews, b joined (its lease, 10 s,
/// renewed by its heartbeat on the clock, holds throughout, so a's own sweep never sees
/// b gone), and a turn on a's conversation running, its first delta stored: the
/// conversation and the running prompt. a's presence lock is held by the test, so only
/// a's lease on the clock (never the real time b's presence looks take) decides when b
/// takes a's conversation over.
async fn a_turn_running_on_a_whose_lease_ends(
    db: &TestDatabase,
    clock: &ManualClock,
    a: &mut Node,
    b: &Node,
) -> (tether_proto::ConversationId, PromptCall, Kept) {
    register_once(&db.url, "a", tether_runtime::Clock::now_ms(clock), 1_000).await;
    let store = within("connect", Store::connect(&db.url)).await.unwrap();
    let presence = within("a's presence", store.cluster().hold_presence("a"))
        .await
        .unwrap()
        .expect("PostgreSQL has presence locks");
    let mb = within("join b", b.rt.join_cluster("127.0.0.1:2".into()))
        .await
        .unwrap();
    let conv = conversation(&a.rt).await;
    within("send on a", a.rt.send_message(&conv, msg("one"), "test"))
        .await
        .unwrap();
    a.agent.start().await.ok("thread-1");
    let running = a.agent.prompt().await;
    running.delta("before ");
    events_until(&a.rt, &conv, "the first delta", |evs| {
        deltas(evs) == "before "
    })
    .await;
    (conv, running, (mb, presence))
}

#[tokio::test]
async fn when_the_owners_lease_runs_out_on_the_clock_the_other_node_takes_over() {
    let (db, _tmp, clock, mut a, mut b) = two_nodes().await;
    // a's lease ends when the clock passes it; b's holds.
    let (conv, running, _kept) =
        a_turn_running_on_a_whose_lease_ends(&db, &clock, &mut a, &b).await;

    // Past a's lease: b's sweep takes the conversation over, recovers it (the running
    // turn interrupted, one status line) and releases it at once, so b owns it only for
    // an instant: the recovery's events are what the test waits for, not b's count.
    clock.advance(2_000);
    events_until(&b.rt, &conv, "b takes over and recovers", |evs| {
        count(evs, "turn_interrupted") == 1 && count(evs, "status") >= 1
    })
    .await;
    // The release follows the recovery's commit: wait for it, not only for the events.
    within("released after the take-over", async {
        loop {
            let view = b.rt.cluster_view().await.unwrap();
            if view.nodes.iter().all(|n| n.live_conversations == 0) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;

    // a's actor still runs the turn; what it writes now is refused, and nothing lands.
    running.delta("after the take-over");
    running.complete("late");
    within("a's write is fenced", async {
        while a.rt.figures().fenced_writes == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let evs = events(&b.rt, &conv).await;
    assert_eq!(deltas(&evs), "before ", "{:?}", kinds(&evs));
    assert_eq!(count(&evs, "turn_completed"), 0, "{:?}", kinds(&evs));

    // The next message runs on b, resuming the same agent session strictly.
    within("send on b", b.rt.send_message(&conv, msg("two"), "test"))
        .await
        .unwrap();
    let start = b.agent.start().await;
    assert_eq!(
        start.req.resume.as_deref(),
        Some("thread-1"),
        "not a strict resume"
    );
    start.ok("thread-1");
    let p = b.agent.prompt().await;
    assert_eq!(p.text, "two");
    p.complete("second");
    let evs = events_until(&b.rt, &conv, "the second turn", |evs| {
        count(evs, "turn_completed") == 1
    })
    .await;
    assert_eq!(deltas(&evs), "before ", "{:?}", kinds(&evs));
    assert!(a.agent.start_now().is_none(), "a started again");
}

/// A take-over whose recovery waits (a lock held on the dead owner's running turn, as a
/// paused node's write would) keeps the conversation's gate on the survivor until the
/// recovery is done: a message the survivor routes meanwhile waits, then claims the
/// released conversation anew and runs. Before, the claim took the take-over's epoch,
/// the release gave it up under the routed turn, and that turn's writes were fenced (or
/// the recovery interrupted it).
#[tokio::test]
async fn a_message_routed_while_a_take_over_recovers_waits_for_the_release_and_runs() {
    use sqlx::Connection;
    let (db, _tmp, clock, mut a, mut b) = two_nodes().await;
    let (conv, _running, _kept) =
        a_turn_running_on_a_whose_lease_ends(&db, &clock, &mut a, &b).await;

    // The running turn's row locked: b's recovery fails on its lock timeout and waits.
    let mut lock = within("connect", sqlx::PgConnection::connect(&db.url))
        .await
        .unwrap();
    within("lock", sqlx::query("BEGIN").execute(&mut lock))
        .await
        .unwrap();
    within(
        "lock the turn",
        sqlx::query("SELECT id FROM turns WHERE conversation_id = $1 FOR UPDATE")
            .bind(conv.as_str())
            .fetch_all(&mut lock),
    )
    .await
    .unwrap();
    clock.advance(2_000);
    let store = within("connect", Store::connect(&db.url)).await.unwrap();
    within("b takes the conversation over", async {
        loop {
            let row = store.cluster().conversation_owner(&conv).await.unwrap();
            if row.is_some_and(|r| r.node_id == "b") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;

    // Routed on b while the recovery waits: it waits too (no agent starts on b).
    let rt = b.rt.clone();
    let c = conv.clone();
    let send = tokio::spawn(async move { rt.send_message(&c, msg("two"), "test").await });
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(b.agent.start_now().is_none(), "ran before the recovery");
    assert!(!send.is_finished(), "routed before the recovery");
    within("unlock", sqlx::query("ROLLBACK").execute(&mut lock))
        .await
        .unwrap();

    // Recovered (the first turn interrupted once), released, claimed anew: the message
    // resumes the same agent session strictly and completes; nothing of b's is fenced.
    let start = b.agent.start().await;
    assert_eq!(start.req.resume.as_deref(), Some("thread-1"));
    start.ok("thread-1");
    let p = b.agent.prompt().await;
    assert_eq!(p.text, "two");
    p.complete("second");
    within("the send answers", send).await.unwrap().unwrap();
    let evs = events_until(&b.rt, &conv, "the second turn", |evs| {
        count(evs, "turn_completed") == 1
    })
    .await;
    assert_eq!(count(&evs, "turn_interrupted"), 1, "{:?}", kinds(&evs));
    assert_eq!(b.rt.figures().fenced_writes, 0);
}
