//! A turn's usage row stored with its end (`finish_turn_with_usage`), on both backends:
//! the turn's end and its "unreported" row commit together; a row a budget counts is
//! left to `record_usage` (which counts it); a retried end stores the row once; a turn
//! that had already ended still gets its row.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tether_proto::*;
use tether_store::*;

#[macro_use]
mod support;
use support::{Backend, completed, unreported};

async fn started_turn(store: &Store, turn: &str) {
    let t = NewTurn {
        id: turn.into(),
        session_id: "s1".into(),
        conversation_id: "c1".into(),
        input: "hi".into(),
        status: TurnStatus::Queued,
    };
    store.conversations().insert_turn(&t, true).await.unwrap();
    store
        .conversations()
        .start_turn(&turn.into(), None)
        .await
        .unwrap()
        .expect("started");
}

async fn reports_of(store: &Store, turn: &str) -> (i64, i64) {
    let t = store
        .usage()
        .usage_totals(&UsageScope::Turn(turn.into()), None)
        .await
        .unwrap();
    (t.reports, t.unreported)
}

async fn a_turns_usage_row_commits_with_its_end(b: Backend) {
    let (_d, store) = support::open(b).await;
    support::chat_with_session(&store, "c1", "s1").await;
    let (end, event) = completed();
    let line = NewMessage {
        role: MessageRole::Agent,
        text: "done".into(),
    };

    started_turn(&store, "t1").await;
    let row = unreported("t1", "r1");
    let f = store
        .conversations()
        .finish_turn_with_usage(&"t1".into(), &end, &event, Some(&line), Some(&row), &[])
        .await
        .unwrap();
    let ev = f.event.expect("the turn ended");
    assert!(matches!(ev.payload, EventPayload::TurnCompleted { .. }));
    assert!(f.usage_stored);
    assert_eq!(reports_of(&store, "t1").await, (1, 1));
    let turn = store
        .conversations()
        .get_turn(&"t1".into())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(turn.status, TurnStatus::Completed);

    // The same end again (a retry after a lost answer): nothing changes, the row is
    // not stored twice.
    let again = store
        .conversations()
        .finish_turn_with_usage(&"t1".into(), &end, &event, Some(&line), Some(&row), &[])
        .await
        .unwrap();
    assert!(again.event.is_none());
    assert!(!again.usage_stored);
    assert_eq!(reports_of(&store, "t1").await, (1, 1));

    // A turn that had already ended still gets a new row.
    let late = store
        .conversations()
        .finish_turn_with_usage(
            &"t1".into(),
            &end,
            &event,
            None,
            Some(&unreported("t1", "r2")),
            &[],
        )
        .await
        .unwrap();
    assert!(late.event.is_none());
    assert!(late.usage_stored);
    assert_eq!(reports_of(&store, "t1").await, (2, 2));

    // Without a row, the end is the end alone.
    started_turn(&store, "t2").await;
    let plain = store
        .conversations()
        .finish_turn_with_usage(&"t2".into(), &end, &event, Some(&line), None, &[])
        .await
        .unwrap();
    assert!(plain.event.is_some());
    assert!(!plain.usage_stored);
    assert_eq!(reports_of(&store, "t2").await, (0, 0));

    // A budget counts the row: the turn ends, the row is left to `record_usage`, which
    // counts it.
    store
        .usage()
        .create_budget(&Budget {
            id: "b-team".to_owned(),
            scope: BudgetScope::Team,
            unit: tether_core::budget::Unit::Tokens,
            cap: 100,
            warn_percent: None,
            period: tether_core::budget::Period::Total,
            created_by: None,
            created_at_ms: now_ms(),
        })
        .await
        .unwrap();
    started_turn(&store, "t3").await;
    let row3 = unreported("t3", "r3");
    let counted = store
        .conversations()
        .finish_turn_with_usage(&"t3".into(), &end, &event, Some(&line), Some(&row3), &[])
        .await
        .unwrap();
    assert!(counted.event.is_some());
    assert!(!counted.usage_stored);
    assert_eq!(reports_of(&store, "t3").await, (0, 0));
    let recorded = store.usage().record_usage(&row3).await.unwrap();
    assert!(recorded.inserted);
    assert_eq!(reports_of(&store, "t3").await, (1, 1));
}

contract!(a_turns_usage_row_commits_with_its_end);
