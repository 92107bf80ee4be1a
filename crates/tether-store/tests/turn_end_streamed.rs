//! A turn's last streamed events stored with its end (`finish_turn_with_usage`'s
//! `streamed`), on both backends: before the end in `seq`, in one commit with it and
//! published with it; a retried end stores none of them twice; a turn that had already
//! ended gets none after its end; more than the one-query bound take the general path.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tether_proto::*;
use tether_store::*;

#[macro_use]
mod support;
use support::{Backend, completed, unreported};

async fn running(store: &Store, turn: &str) -> EventEnvelope {
    let t = NewTurn {
        id: turn.into(),
        session_id: "s1".into(),
        conversation_id: "c1".into(),
        input: "hi".into(),
        status: TurnStatus::Running,
    };
    store
        .conversations()
        .insert_started_turn(&t, None)
        .await
        .unwrap()
        .event
}

fn delta(text: &str) -> EventPayload {
    EventPayload::MessageDelta { text: text.into() }
}

async fn turn_events(store: &Store, turn: &str) -> Vec<EventEnvelope> {
    let all = store
        .events()
        .conversation_events(&"c1".into(), 0, 1000)
        .await
        .unwrap();
    all.into_iter()
        .filter(|e| e.turn_id.as_ref().is_some_and(|t| t.as_str() == turn))
        .collect()
}

/// Each event's `seq` is one more than the one before it.
fn in_order(events: &[EventEnvelope]) {
    for w in events.windows(2) {
        assert_eq!(w[1].seq, w[0].seq + 1, "{events:#?}");
        assert!(w[1].id > w[0].id);
    }
}

async fn a_turns_last_output_commits_with_its_end(b: Backend) {
    let (_d, store) = support::open(b).await;
    support::chat_with_session(&store, "c1", "s1").await;
    let (end, event) = completed();
    let line = NewMessage {
        role: MessageRole::Agent,
        text: "done".into(),
    };
    running(&store, "t1").await;
    store
        .events()
        .append_events(&"s1".into(), Some(&"t1".into()), &[delta("first ")])
        .await
        .unwrap();
    let mut follower = store
        .events()
        .follow_from_now(Scope::Conversation("c1".into()))
        .await
        .unwrap();

    // Three events (padded to four rows) with a usage row: parameters after its.
    let tool = EventPayload::ToolCall {
        tool_call_id: "call-1".into(),
        title: "ls".into(),
        kind: None,
        status: None,
        detail: None,
    };
    let streamed = vec![delta("a"), delta("b"), tool];
    let f = store
        .conversations()
        .finish_turn_with_usage(
            &"t1".into(),
            &end,
            &event,
            Some(&line),
            Some(&unreported("t1", "r1")),
            &streamed,
        )
        .await
        .unwrap();
    let ev = f.event.expect("the turn ended");
    assert!(f.usage_stored);
    assert_eq!(
        f.streamed
            .iter()
            .map(|e| e.payload.clone())
            .collect::<Vec<_>>(),
        streamed
    );
    let stored = turn_events(&store, "t1").await;
    let kinds: Vec<&str> = stored.iter().map(|e| e.payload.kind()).collect();
    assert_eq!(
        kinds,
        [
            "turn_started",
            "message_delta",
            "message_delta",
            "message_delta",
            "tool_call",
            "turn_completed"
        ]
    );
    in_order(&stored);
    assert_eq!(stored[2..5], f.streamed[..]);
    assert_eq!(stored.last(), Some(&ev));
    // Published together, in order, once committed.
    let mut seen = Vec::new();
    while seen.last() != Some(&ev) {
        let batch = tokio::time::timeout(Duration::from_secs(10), follower.next())
            .await
            .expect("the end reaches a follower")
            .unwrap();
        seen.extend(batch.events().iter().cloned());
    }
    assert_eq!(seen, stored[2..]);

    // The same end again (a retry after a lost answer): nothing stored twice.
    let again = store
        .conversations()
        .finish_turn_with_usage(&"t1".into(), &end, &event, Some(&line), None, &streamed)
        .await
        .unwrap();
    assert!(again.event.is_none());
    assert!(again.streamed.is_empty());
    assert_eq!(turn_events(&store, "t1").await, stored);

    // One event without a usage row: its parameters follow the end's.
    running(&store, "t2").await;
    let f = store
        .conversations()
        .finish_turn_with_usage(&"t2".into(), &end, &event, None, None, &[delta("x")])
        .await
        .unwrap();
    assert!(f.event.is_some());
    assert_eq!(f.streamed.len(), 1);
    let t2 = turn_events(&store, "t2").await;
    assert_eq!(t2.len(), 3);
    in_order(&t2);
    assert_eq!(t2[1].payload, delta("x"));
    // `seq` goes on across turns of the session.
    assert_eq!(t2[0].seq, stored.last().unwrap().seq + 1);
}

async fn more_than_the_bound_still_go_before_the_end_in_order(b: Backend) {
    let (_d, store) = support::open(b).await;
    support::chat_with_session(&store, "c1", "s1").await;
    let (end, event) = completed();
    running(&store, "t1").await;
    let streamed: Vec<EventPayload> = (0..70).map(|i| delta(&format!("d{i} "))).collect();
    let f = store
        .conversations()
        .finish_turn_with_usage(&"t1".into(), &end, &event, None, None, &streamed)
        .await
        .unwrap();
    assert!(f.event.is_some());
    assert_eq!(f.streamed.len(), 70);
    let stored = turn_events(&store, "t1").await;
    assert_eq!(stored.len(), 72);
    in_order(&stored);
    assert_eq!(
        stored[1..71]
            .iter()
            .map(|e| e.payload.clone())
            .collect::<Vec<_>>(),
        streamed
    );
}

async fn a_turn_already_ended_gets_no_output_after_its_end(b: Backend) {
    let (_d, store) = support::open(b).await;
    support::chat_with_session(&store, "c1", "s1").await;
    let (end, event) = completed();
    running(&store, "t1").await;
    let cancelled = TurnEnd {
        status: TurnStatus::Cancelled,
        result_text: None,
        stop_reason: None,
        error: None,
        usage: None,
    };
    store
        .conversations()
        .finish_turn(
            &"t1".into(),
            &cancelled,
            &EventPayload::TurnCancelled {},
            None,
        )
        .await
        .unwrap()
        .expect("cancelled");
    let before = turn_events(&store, "t1").await;
    for n in [1, 3, 70] {
        let streamed: Vec<EventPayload> = (0..n).map(|i| delta(&format!("late {i}"))).collect();
        let f = store
            .conversations()
            .finish_turn_with_usage(
                &"t1".into(),
                &end,
                &event,
                None,
                Some(&unreported("t1", &format!("r{n}"))),
                &streamed,
            )
            .await
            .unwrap();
        assert!(f.event.is_none());
        assert!(f.streamed.is_empty());
        // The usage row is stored even so (as without streamed events).
        assert!(f.usage_stored);
    }
    assert_eq!(turn_events(&store, "t1").await, before);
}

contract!(a_turns_last_output_commits_with_its_end);
contract!(more_than_the_bound_still_go_before_the_end_in_order);
contract!(a_turn_already_ended_gets_no_output_after_its_end);
