//! Work that runs once per cluster (issue 12), on both backends: leader leases (claimed,
//! held, taken over once the leader's node lease ends, released) and outbox claims (two
//! senders never get the same row, lane order holds, a dead sender's claim ends with its
//! lease, a claim ends at its deadline and when the row is marked).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use tether_store::*;

#[macro_use]
mod support;
use support::Backend;

const TELEGRAM: &str = "channel:telegram";

fn node(id: &str, lease_until_ms: i64) -> NodeRow {
    NodeRow {
        id: id.into(),
        name: "host".into(),
        addr: "127.0.0.1:1".into(),
        started_at_ms: 0,
        heartbeat_at_ms: 0,
        lease_until_ms,
        draining_at_ms: None,
        version: String::new(),
    }
}

async fn leader_leases_are_claimed_held_taken_over_and_released(b: Backend) {
    let (_d, store) = support::open(b).await;
    store
        .cluster()
        .register_node(&node("a", 11_000))
        .await
        .unwrap();
    store
        .cluster()
        .register_node(&node("bb", 11_000))
        .await
        .unwrap();
    assert!(store.cluster().leaders().await.unwrap().is_empty());

    assert_eq!(
        store
            .cluster()
            .claim_leader(TELEGRAM, "a", 2_000)
            .await
            .unwrap(),
        LeaderClaim::Claimed { epoch: 1 }
    );
    assert_eq!(
        store
            .cluster()
            .claim_leader(TELEGRAM, "a", 2_500)
            .await
            .unwrap(),
        LeaderClaim::Held { epoch: 1 }
    );
    // Another name is another lease.
    assert_eq!(
        store
            .cluster()
            .claim_leader("sweeps", "bb", 2_500)
            .await
            .unwrap(),
        LeaderClaim::Claimed { epoch: 1 }
    );
    let LeaderClaim::Led(row) = store
        .cluster()
        .claim_leader(TELEGRAM, "bb", 3_000)
        .await
        .unwrap()
    else {
        panic!("a live leader keeps its lease");
    };
    assert_eq!((row.node_id.as_str(), row.epoch), ("a", 1));
    assert!(row.alive(3_000) && !row.alive(11_000));

    // a's node lease ends: bb (still heart-beating) takes over under a higher epoch, and
    // a, back, is told who leads.
    store
        .cluster()
        .renew_node_lease("bb", 10_000, 30_000)
        .await
        .unwrap();
    assert_eq!(
        store
            .cluster()
            .claim_leader(TELEGRAM, "bb", 12_000)
            .await
            .unwrap(),
        LeaderClaim::Claimed { epoch: 2 }
    );
    let LeaderClaim::Led(row) = store
        .cluster()
        .claim_leader(TELEGRAM, "a", 12_500)
        .await
        .unwrap()
    else {
        panic!("bb leads now");
    };
    assert_eq!((row.node_id.as_str(), row.epoch), ("bb", 2));
    let all = store.cluster().leaders().await.unwrap();
    let names: Vec<_> = all
        .iter()
        .map(|l| (l.name.as_str(), l.node_id.as_str()))
        .collect();
    assert_eq!(names, vec![(TELEGRAM, "bb"), ("sweeps", "bb")]);
    assert_eq!(all[0].lease_until_ms, Some(30_000));

    // Only the holder under its epoch releases; a released lease is claimed at once and
    // its epoch still rises.
    assert!(
        !store
            .cluster()
            .release_leader(TELEGRAM, "bb", 1)
            .await
            .unwrap()
    );
    assert!(
        !store
            .cluster()
            .release_leader(TELEGRAM, "a", 2)
            .await
            .unwrap()
    );
    assert!(
        store
            .cluster()
            .release_leader(TELEGRAM, "bb", 2)
            .await
            .unwrap()
    );
    assert!(!store.cluster().leaders().await.unwrap()[0].alive(12_600));
    store
        .cluster()
        .renew_node_lease("a", 12_000, 30_000)
        .await
        .unwrap();
    assert_eq!(
        store
            .cluster()
            .claim_leader(TELEGRAM, "a", 13_000)
            .await
            .unwrap(),
        LeaderClaim::Claimed { epoch: 3 }
    );

    // A leader whose node row is gone (it stopped) is replaced at once.
    store.cluster().remove_node("a").await.unwrap();
    assert_eq!(
        store
            .cluster()
            .claim_leader(TELEGRAM, "bb", 13_500)
            .await
            .unwrap(),
        LeaderClaim::Claimed { epoch: 4 }
    );
}

fn item(lane: &str, key: &str) -> NewOutbox {
    NewOutbox {
        channel: "telegram".into(),
        chat_key: lane.into(),
        dedupe_key: key.into(),
        op: "send".into(),
        target_key: None,
        address: "{}".into(),
        body: format!("body of {key}"),
        replace: false,
        traceparent: None,
    }
}

fn keys(rows: &[OutboxRow]) -> Vec<&str> {
    rows.iter().map(|r| r.dedupe_key.as_str()).collect()
}

/// Two stores on one database: two nodes draining the same channel.
async fn outbox_claims_give_each_row_to_one_sender_in_lane_order(b: Backend) {
    let (guard, a) = support::open(b).await;
    let bb = support::reopen(&guard).await;
    // Rows are enqueued at the wall clock's now: claim after it.
    let t = now_ms() + 1_000;
    let until = t + 100_000;
    a.cluster()
        .register_node(&node("a", t + 1_000_000_000))
        .await
        .unwrap();
    a.cluster()
        .register_node(&node("b", t + 5_000))
        .await
        .unwrap();
    a.channels()
        .enqueue_outbox(&[
            item("x", "k1"),
            item("x", "k2"),
            item("x", "k3"),
            item("y", "k4"),
        ])
        .await
        .unwrap();

    let first = a
        .channels()
        .claim_outbox("telegram", "a", t, until, 10)
        .await
        .unwrap();
    assert_eq!(
        keys(&first),
        vec!["k1", "k4"],
        "lane heads only, oldest first"
    );
    assert!(
        bb.channels()
            .claim_outbox("telegram", "b", t, until, 10)
            .await
            .unwrap()
            .is_empty()
    );
    // A claimed head is due again when its claim runs out, at the latest.
    assert_eq!(
        bb.channels().next_outbox_due("telegram").await.unwrap(),
        Some(until)
    );

    // Marked sent: the claim ends with it, and the next row of the lane is the other
    // sender's; the first cannot get it too.
    a.channels()
        .mark_outbox_sent(first[0].id, first[0].version, Some("m1"))
        .await
        .unwrap();
    let second = bb
        .channels()
        .claim_outbox("telegram", "b", t, until, 10)
        .await
        .unwrap();
    assert_eq!(keys(&second), vec!["k2"]);
    assert!(
        a.channels()
            .claim_outbox("telegram", "a", t, until, 10)
            .await
            .unwrap()
            .is_empty()
    );

    // b's node lease ends (it crashed mid-send): its claim ends with it.
    let later = t + 5_001;
    let taken = a
        .channels()
        .claim_outbox("telegram", "a", later, until, 10)
        .await
        .unwrap();
    assert_eq!(keys(&taken), vec!["k2"]);

    // A live sender's claim ends at its deadline.
    let past = until + 1;
    let expired = bb
        .channels()
        .claim_outbox("telegram", "b", past, past + 100_000, 10)
        .await
        .unwrap();
    assert_eq!(keys(&expired), vec!["k2", "k4"]);

    // A sender starting again drops the claims of its previous life.
    assert_eq!(
        bb.channels()
            .release_outbox_claims("telegram", "b")
            .await
            .unwrap(),
        2
    );
    let again = a
        .channels()
        .claim_outbox("telegram", "a", past, past + 100_000, 1)
        .await
        .unwrap();
    assert_eq!(keys(&again), vec!["k2"], "the limit holds");

    // A retry and a give-up end the claim too.
    a.channels()
        .mark_outbox_retry(again[0].id, past, "429")
        .await
        .unwrap();
    let retried = bb
        .channels()
        .claim_outbox("telegram", "b", past, past + 100_000, 10)
        .await
        .unwrap();
    assert_eq!(keys(&retried), vec!["k2", "k4"]);
    bb.channels()
        .mark_outbox_done(retried[1].id, OutboxStatus::Failed, "gone")
        .await
        .unwrap();

    // A body replaced while it was being sent stays pending, unclaimed, for the new body.
    let k2 = &retried[0];
    a.channels()
        .enqueue_outbox(&[NewOutbox {
            replace: true,
            traceparent: None,
            body: "newer".into(),
            ..item("x", "k2")
        }])
        .await
        .unwrap();
    bb.channels()
        .mark_outbox_sent(k2.id, k2.version, Some("m2"))
        .await
        .unwrap();
    let newer = a
        .channels()
        .claim_outbox("telegram", "a", past, past + 100_000, 10)
        .await
        .unwrap();
    assert_eq!(keys(&newer), vec!["k2"]);
    assert_eq!(newer[0].body, "newer");
    assert_eq!(newer[0].status, OutboxStatus::Pending);
}

/// Two senders draining one channel at the same time, each claiming, "sending" and
/// marking: every row is sent exactly once.
async fn two_senders_draining_together_send_every_row_once(b: Backend) {
    let (guard, a) = support::open(b).await;
    let bb = support::reopen(&guard).await;
    let far = now_ms() + 3_600_000;
    a.cluster().register_node(&node("a", far)).await.unwrap();
    a.cluster().register_node(&node("b", far)).await.unwrap();
    let rows: Vec<NewOutbox> = (0..60)
        .map(|i| item(&format!("lane{}", i % 12), &format!("k{i}")))
        .collect();
    a.channels().enqueue_outbox(&rows).await.unwrap();

    let drain = |store: Store, me: &'static str| async move {
        let mut sent = Vec::new();
        let mut idle = 0;
        while idle < 20 {
            let now = now_ms() + 1_000;
            let got = store
                .channels()
                .claim_outbox("telegram", me, now, now + 600_000, 3)
                .await
                .unwrap();
            if got.is_empty() {
                idle += 1;
                tokio::task::yield_now().await;
                continue;
            }
            idle = 0;
            for r in got {
                sent.push(r.dedupe_key.clone());
                store
                    .channels()
                    .mark_outbox_sent(r.id, r.version, Some(me))
                    .await
                    .unwrap();
            }
        }
        sent
    };
    let (one, two) = tokio::join!(
        tokio::spawn(drain(a.clone(), "a")),
        tokio::spawn(drain(bb.clone(), "b"))
    );
    let (one, two) = (one.unwrap(), two.unwrap());
    let mut all: Vec<String> = one.iter().chain(two.iter()).cloned().collect();
    let total = all.len();
    all.sort();
    all.dedup();
    assert_eq!(total, all.len(), "a row was sent twice: {one:?} / {two:?}");
    let expected: BTreeSet<String> = (0..60).map(|i| format!("k{i}")).collect();
    assert_eq!(all.into_iter().collect::<BTreeSet<_>>(), expected);
    let left = a.channels().list_outbox("telegram").await.unwrap();
    assert!(left.iter().all(|r| r.status == OutboxStatus::Sent));
}

/// Right before a row goes out its sender confirms its claim (issue 33 item 6): still
/// pending, still its claim, its node's lease live past the margin. A sender whose lease
/// lapsed (it stalled) lets the row go, and the other node's claim takes it; a row the
/// other node has claimed or sent is not the stale sender's to send.
async fn a_sender_confirms_its_claim_before_each_send(b: Backend) {
    let (guard, a) = support::open(b).await;
    let bb = support::reopen(&guard).await;
    let t = now_ms() + 1_000;
    let until = t + 100_000;
    a.cluster()
        .register_node(&node("a", t + 5_000))
        .await
        .unwrap();
    a.cluster()
        .register_node(&node("b", t + 1_000_000_000))
        .await
        .unwrap();
    a.channels()
        .enqueue_outbox(&[item("x", "k1"), item("y", "k2")])
        .await
        .unwrap();
    let batch = a
        .channels()
        .claim_outbox("telegram", "a", t, until, 10)
        .await
        .unwrap();
    assert_eq!(keys(&batch), vec!["k1", "k2"]);
    // Live: a's lease holds past the margin.
    assert!(
        a.channels()
            .confirm_outbox_claim(batch[0].id, "a", t + 500)
            .await
            .unwrap()
    );
    a.channels()
        .mark_outbox_sent(batch[0].id, batch[0].version, Some("m1"))
        .await
        .unwrap();
    // Sent: no longer anyone's to send.
    assert!(
        !a.channels()
            .confirm_outbox_claim(batch[0].id, "a", t + 500)
            .await
            .unwrap()
    );
    // a stalls: its lease would lapse within the margin, so k2 does not go out from a,
    // and its claim is let go at once...
    assert!(
        !a.channels()
            .confirm_outbox_claim(batch[1].id, "a", t + 5_000)
            .await
            .unwrap()
    );
    // ...for b's next claim (a's lease still runs: without the release, b waited for it).
    let taken = bb
        .channels()
        .claim_outbox("telegram", "b", t, until, 10)
        .await
        .unwrap();
    assert_eq!(keys(&taken), vec!["k2"]);
    assert!(
        bb.channels()
            .confirm_outbox_claim(taken[0].id, "b", t + 500)
            .await
            .unwrap()
    );
    // a, awake again: the row is b's.
    assert!(
        !a.channels()
            .confirm_outbox_claim(taken[0].id, "a", t + 500)
            .await
            .unwrap()
    );
    assert!(
        bb.channels()
            .confirm_outbox_claim(taken[0].id, "b", t + 500)
            .await
            .unwrap()
    );
    // An unknown node (no lease at all) confirms nothing.
    assert!(
        !bb.channels()
            .confirm_outbox_claim(taken[0].id, "nobody", t)
            .await
            .unwrap()
    );
    assert!(
        bb.channels()
            .confirm_outbox_claim(taken[0].id, "b", t + 500)
            .await
            .unwrap()
    );
}

contract!(
    a_sender_confirms_its_claim_before_each_send,
    leader_leases_are_claimed_held_taken_over_and_released,
    outbox_claims_give_each_row_to_one_sender_in_lane_order
);
contract!(multi_thread; two_senders_draining_together_send_every_row_once);
