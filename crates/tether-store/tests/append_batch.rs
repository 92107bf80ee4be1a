//! `append_events` with batches of every size: one counter update and multi-row inserts
//! per batch, with the same result as appending one by one (gap-free `seq`, ids in
//! order, envelopes equal to what is stored).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tether_proto::*;
use tether_store::*;

#[macro_use]
mod support;
use support::Backend;

async fn store_with_session(b: Backend) -> (support::Guard, Store) {
    let (dir, store) = support::open(b).await;
    store
        .conversations()
        .create_conversation(&tether_store::NewConversation {
            id: &"c1".into(),
            kind: ConversationKind::Chat,
            title: "t",
            agent: "fake",
            model: None,
            cwd: "/tmp",
            parent_conversation_id: None,
            owner_id: None,
            visibility: tether_proto::Visibility::Private,
        })
        .await
        .unwrap();
    let s = NewSession {
        id: "s1".into(),
        conversation_id: "c1".into(),
        agent: "fake".into(),
        model: None,
        cwd: "/tmp".into(),
    };
    store
        .conversations()
        .start_session(&s, NewSessionReason::Unbound, None)
        .await
        .unwrap();
    (dir, store)
}

fn deltas(from: usize, n: usize) -> Vec<EventPayload> {
    (from..from + n)
        .map(|i| EventPayload::MessageDelta {
            text: format!("d{i}"),
        })
        .collect()
}

async fn batches_of_any_size_keep_seq_gap_free_and_order(b: Backend) {
    let (_d, store) = store_with_session(b).await;
    let mut sent = 0;
    let mut returned = Vec::new();
    // 0, 1, 2, 3 (2+1), 127, 128, 129 (128+1), 300 (128+128+32+8+4): every chunking path.
    for n in [0, 1, 2, 3, 127, 128, 129, 300] {
        let evs = store
            .events()
            .append_events(&"s1".into(), Some(&"t1".into()), &deltas(sent, n))
            .await
            .unwrap();
        assert_eq!(evs.len(), n);
        sent += n;
        returned.extend(evs);
    }
    let stored = store
        .events()
        .session_events(&"s1".into(), 0, 10_000)
        .await
        .unwrap();
    // seq 1 is session_started.
    assert_eq!(stored.len(), sent + 1);
    assert_eq!(
        stored.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=sent as i64 + 1).collect::<Vec<_>>()
    );
    assert!(
        stored.windows(2).all(|w| w[0].id < w[1].id),
        "ids follow seq"
    );
    assert_eq!(
        &stored[1..],
        &returned[..],
        "returned envelopes are what is stored"
    );
    for (i, e) in returned.iter().enumerate() {
        assert_eq!(
            e.payload,
            EventPayload::MessageDelta {
                text: format!("d{i}")
            }
        );
        assert_eq!(e.turn_id.as_deref(), Some("t1"));
        assert_eq!(e.conversation_id, "c1");
    }
    // A later single append continues the counter.
    let next = store
        .events()
        .append_events(&"s1".into(), None, &deltas(0, 1))
        .await
        .unwrap();
    assert_eq!(next[0].seq, sent as i64 + 2);
    assert!(store.integrity_check().await.unwrap());
}

async fn a_batch_for_an_unknown_session_fails_and_stores_nothing(b: Backend) {
    let (_d, store) = store_with_session(b).await;
    assert!(
        store
            .events()
            .append_events(&"nope".into(), None, &deltas(0, 5))
            .await
            .is_err()
    );
    assert_eq!(
        store
            .events()
            .session_events(&"nope".into(), 0, 10)
            .await
            .unwrap()
            .len(),
        0
    );
}

async fn a_single_event_for_an_unknown_session_fails_and_stores_nothing(b: Backend) {
    let (_d, store) = store_with_session(b).await;
    assert!(
        store
            .events()
            .append_events(&"nope".into(), None, &deltas(0, 1))
            .await
            .is_err()
    );
    assert_eq!(
        store
            .events()
            .session_events(&"nope".into(), 0, 10)
            .await
            .unwrap()
            .len(),
        0
    );
    // The real session's counter is untouched.
    let evs = store
        .events()
        .append_events(&"s1".into(), None, &deltas(0, 1))
        .await
        .unwrap();
    assert_eq!(evs[0].seq, 2);
}

async fn a_history_entry_touches_its_conversation(b: Backend) {
    let (_d, store) = store_with_session(b).await;
    let before = store
        .conversations()
        .get_conversation(&"c1".into())
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let ev = store
        .events()
        .add_message(
            &"c1".into(),
            MessageRole::Status,
            "note",
            Some(&"s1".into()),
            None,
        )
        .await
        .unwrap()
        .expect("a status event");
    assert_eq!(ev.seq, 2);
    let after = store
        .conversations()
        .get_conversation(&"c1".into())
        .await
        .unwrap()
        .unwrap();
    assert!(after.updated_at_ms > before.updated_at_ms);
    let hist = store.events().history(&"c1".into(), 0, 10).await.unwrap();
    assert_eq!(hist.len(), 1);
    assert_eq!(hist[0].text, "note");
}

async fn single_batched_and_in_transaction_appends_interleave_gap_free(b: Backend) {
    let (_d, store) = store_with_session(b).await;
    for round in 0..3 {
        store
            .events()
            .append_events(&"s1".into(), None, &deltas(round, 1))
            .await
            .unwrap();
        store
            .events()
            .append_events(&"s1".into(), None, &deltas(round, 3))
            .await
            .unwrap();
        // An append inside a larger transaction (history entry + status event).
        store
            .events()
            .add_message(
                &"c1".into(),
                MessageRole::Status,
                "note",
                Some(&"s1".into()),
                None,
            )
            .await
            .unwrap();
    }
    let seqs: Vec<i64> = store
        .events()
        .session_events(&"s1".into(), 0, 100)
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(seqs, (1..=16).collect::<Vec<_>>());
    let next = store
        .events()
        .append_events(&"s1".into(), None, &deltas(0, 1))
        .await
        .unwrap();
    assert_eq!(next[0].seq, 17);
}

contract!(
    batches_of_any_size_keep_seq_gap_free_and_order,
    a_batch_for_an_unknown_session_fails_and_stores_nothing,
    a_single_event_for_an_unknown_session_fails_and_stores_nothing,
    a_history_entry_touches_its_conversation,
    single_batched_and_in_transaction_appends_interleave_gap_free,
);
