//! A node's turns under the epoch it holds, on both backends (on PostgreSQL each start
//! and end is one statement with its fence, `sql_turns_fenced.rs`): the owner's turn
//! stores its events gap-free, its history lines and its usage row; once another node
//! took the conversation over, the old owner's start and end (with output and a usage
//! row) are refused and store nothing, not even the usage row.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tether_proto::*;
use tether_store::*;

#[macro_use]
mod support;
use support::{Backend, completed, unreported};

fn node(id: &str) -> NodeRow {
    NodeRow {
        id: id.into(),
        name: "host".into(),
        addr: "127.0.0.1:1".into(),
        started_at_ms: 1_000,
        heartbeat_at_ms: 1_000,
        lease_until_ms: 11_000,
        draining_at_ms: None,
        version: String::new(),
    }
}

fn turn(id: &str) -> NewTurn {
    NewTurn {
        id: id.into(),
        session_id: "s1".into(),
        conversation_id: "c1".into(),
        input: format!("input of {id}"),
        status: TurnStatus::Running,
    }
}

fn deltas(texts: &[&str]) -> Vec<EventPayload> {
    texts
        .iter()
        .map(|t| EventPayload::MessageDelta {
            text: (*t).to_owned(),
        })
        .collect()
}

async fn usage_rows(store: &Store, turn: &str) -> i64 {
    store
        .usage()
        .usage_totals(&UsageScope::Turn(turn.into()), None)
        .await
        .unwrap()
        .reports
}

async fn a_stale_owners_turn_stores_nothing(b: Backend) {
    let (guard, a) = support::open(b).await;
    support::chat_with_session(&a, "c1", "s1").await;
    let c: ConversationId = "c1".into();
    a.cluster().register_node(&node("a")).await.unwrap();
    let claim = a
        .cluster()
        .claim_conversation(&c, "a", 2_000)
        .await
        .unwrap();
    assert_eq!(claim, Claim::Claimed { epoch: 1 });

    // The owner's turn: started with its message, ended with its last output, its line
    // and its usage row; every event in order, no gap.
    let started = a
        .conversations()
        .insert_started_turn(&turn("t1"), None)
        .await
        .unwrap();
    let (end, event) = completed();
    let line = NewMessage {
        role: MessageRole::Agent,
        text: "done".into(),
    };
    let finished = a
        .conversations()
        .finish_turn_with_usage(
            &"t1".into(),
            &end,
            &event,
            Some(&line),
            Some(&unreported("t1", "r1")),
            &deltas(&["a", "b", "c"]),
        )
        .await
        .unwrap();
    let ended = finished.event.expect("the turn ended");
    assert!(finished.usage_stored);
    assert_eq!(finished.streamed.len(), 3);
    let seqs: Vec<i64> = std::iter::once(started.event.seq)
        .chain(finished.streamed.iter().map(|e| e.seq))
        .chain(std::iter::once(ended.seq))
        .collect();
    let first = seqs[0];
    assert_eq!(seqs, (first..first + 5).collect::<Vec<_>>());
    let stored = a.events().conversation_events(&c, 0, 1000).await.unwrap();
    let tail: Vec<(i64, i64)> = stored
        .iter()
        .rev()
        .take(5)
        .rev()
        .map(|e| (e.id, e.seq))
        .collect();
    let returned: Vec<(i64, i64)> = std::iter::once(&started.event)
        .chain(finished.streamed.iter())
        .chain(std::iter::once(&ended))
        .map(|e| (e.id, e.seq))
        .collect();
    assert_eq!(tail, returned, "the envelopes are the stored rows");
    assert!(matches!(
        stored.last().map(|e| &e.payload),
        Some(EventPayload::TurnCompleted { .. })
    ));
    let history = a.events().history(&c, 0, 1000).await.unwrap();
    assert_eq!(
        history.len(),
        2,
        "the person's message and the agent's line"
    );
    assert_eq!(usage_rows(&a, "t1").await, 1);

    // A second turn is running when b takes the conversation over.
    a.conversations()
        .insert_started_turn(&turn("t2"), None)
        .await
        .unwrap();
    let bb = support::reopen(&guard).await;
    bb.cluster().register_node(&node("b")).await.unwrap();
    assert_eq!(
        bb.cluster()
            .take_over_conversation(&c, "b", 1, 12_000)
            .await
            .unwrap(),
        Some(2)
    );
    let events_before = bb.events().conversation_events(&c, 0, 1000).await.unwrap();
    let history_before = bb.events().history(&c, 0, 1000).await.unwrap().len();

    let late = a
        .conversations()
        .finish_turn_with_usage(
            &"t2".into(),
            &end,
            &event,
            Some(&line),
            Some(&unreported("t2", "r2")),
            &deltas(&["late"]),
        )
        .await;
    assert!(
        matches!(late, Err(StoreError::Fenced { ref conversation_id, epoch: 1 }) if *conversation_id == c),
        "expected Fenced under epoch 1, got {late:?}"
    );
    let late_start = a
        .conversations()
        .insert_started_turn(&turn("t3"), None)
        .await;
    assert!(
        matches!(late_start, Err(StoreError::Fenced { .. })),
        "expected Fenced, got {late_start:?}"
    );
    assert_eq!(a.fenced_writes(), 2);
    assert!(a.cluster().is_fenced(&c));

    // Nothing of either was stored: no event, no line, no turn, no usage row.
    let events_after = bb.events().conversation_events(&c, 0, 1000).await.unwrap();
    assert_eq!(events_after.len(), events_before.len());
    assert_eq!(
        bb.events().history(&c, 0, 1000).await.unwrap().len(),
        history_before
    );
    assert_eq!(usage_rows(&bb, "t2").await, 0);
    assert!(
        bb.conversations()
            .get_turn(&"t3".into())
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        bb.conversations()
            .get_turn(&"t2".into())
            .await
            .unwrap()
            .unwrap()
            .status,
        TurnStatus::Running
    );

    // The new owner ends it (as its recovery would) on its own epoch.
    let by_b = bb
        .conversations()
        .finish_turn_with_usage(&"t2".into(), &end, &event, None, None, &deltas(&["b"]))
        .await
        .unwrap();
    let by_b_end = by_b.event.expect("the new owner ends the turn");
    assert_eq!(by_b.streamed.len(), 1);
    let last = events_before.last().map(|e| e.seq).unwrap();
    assert_eq!((by_b.streamed[0].seq, by_b_end.seq), (last + 1, last + 2));
}

contract!(a_stale_owners_turn_stores_nothing);

/// A claim racing another node's first claim of the same conversation (PostgreSQL, read
/// committed): the other node's row is not committed when this claim's statement takes
/// its snapshot; its upsert waits for it, then claims nothing (the owner is alive), and
/// the claim must answer with that owner, read after the statement, never fail.
#[tokio::test]
async fn a_claim_racing_another_nodes_first_claim_answers_with_that_owner() {
    use sqlx::Connection as _;
    let (guard, store) = support::open(Backend::Postgres).await;
    let support::Guard::Database(db) = &guard else {
        unreachable!("a PostgreSQL guard")
    };
    support::chat_with_session(&store, "c1", "s1").await;
    for n in ["a", "b"] {
        store.cluster().register_node(&node(n)).await.unwrap();
    }
    // Node a claims first, and has not committed yet.
    let mut first = sqlx::PgConnection::connect(&db.url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut first).await.unwrap();
    sqlx::query(
        "INSERT INTO owners (conversation_id, node_id, epoch, claimed_at) \
         VALUES ('c1', 'a', 1, 2000)",
    )
    .execute(&mut first)
    .await
    .unwrap();
    let racing = {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .cluster()
                .claim_conversation(&"c1".into(), "b", 3_000)
                .await
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!racing.is_finished(), "the claim waits for the first one");
    sqlx::query("COMMIT").execute(&mut first).await.unwrap();
    let got = tokio::time::timeout(std::time::Duration::from_secs(10), racing)
        .await
        .expect("the racing claim answers")
        .unwrap()
        .unwrap();
    assert!(
        matches!(&got, Claim::Owned(row) if row.node_id.as_str() == "a" && row.epoch == 1),
        "the racing claim must name the first owner: {got:?}"
    );
}
