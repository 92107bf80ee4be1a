//! A message's turn stored already running (`insert_started_turn`), on both backends:
//! the turn, the person's message and its `turn_started` event in one commit, published
//! like a start; a session that is not the conversation's, or a turn id taken already,
//! stores nothing; files claimed for the turn's id before are reported with the start.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tether_proto::*;
use tether_store::*;

#[macro_use]
mod support;
use support::Backend;

fn turn(id: &str, session: &str, input: &str) -> NewTurn {
    NewTurn {
        id: id.into(),
        session_id: session.into(),
        conversation_id: "c1".into(),
        input: input.into(),
        status: TurnStatus::Running,
    }
}

async fn a_message_turn_is_stored_running_with_its_start(b: Backend) {
    let (_d, store) = support::open(b).await;
    support::chat_with_session(&store, "c1", "s1").await;
    let mut follower = store
        .events()
        .follow(Scope::Conversation("c1".into()), 0)
        .await
        .unwrap();
    let before = store
        .events()
        .conversation_events(&"c1".into(), 0, 100)
        .await
        .unwrap();
    let last_seq = before.iter().map(|e| e.seq).max().unwrap_or(0);

    let started = store
        .conversations()
        .insert_started_turn(&turn("t1", "s1", "hello"), Some("00-trace-01"))
        .await
        .unwrap();
    assert!(!started.has_attachments);
    let ev = &started.event;
    assert_eq!(ev.seq, last_seq + 1);
    assert_eq!(ev.turn_id, Some("t1".into()));
    assert_eq!(
        ev.payload,
        EventPayload::TurnStarted {
            input: "hello".into(),
            traceparent: Some("00-trace-01".into()),
        }
    );
    // Stored as returned, and published to followers once committed.
    let stored = store
        .events()
        .conversation_events(&"c1".into(), 0, 100)
        .await
        .unwrap();
    assert_eq!(stored.last(), Some(ev));
    let mut seen = Vec::new();
    while seen.last() != Some(ev) {
        let batch = tokio::time::timeout(Duration::from_secs(10), follower.next())
            .await
            .expect("the start reaches a follower")
            .unwrap();
        seen.extend(batch.events().iter().cloned());
    }
    let t = store
        .conversations()
        .get_turn(&"t1".into())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(t.status, TurnStatus::Running);
    assert_eq!(t.input, "hello");
    assert!(t.started_at_ms.is_some());
    let history = store.events().history(&"c1".into(), 0, 10).await.unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].role, MessageRole::User);
    assert_eq!(history[0].text, "hello");
    assert_eq!(history[0].turn_id, Some("t1".into()));

    // A start of it finds it running: nothing to do.
    assert!(
        store
            .conversations()
            .start_turn(&"t1".into(), None)
            .await
            .unwrap()
            .is_none()
    );
    // Without a trace context the payload has none; `seq` goes on.
    let second = store
        .conversations()
        .insert_started_turn(&turn("t2", "s1", "again"), None)
        .await
        .unwrap();
    assert_eq!(second.event.seq, ev.seq + 1);
    assert_eq!(
        second.event.payload,
        EventPayload::TurnStarted {
            input: "again".into(),
            traceparent: None,
        }
    );
    assert!(!second.has_attachments);

    // Files claimed for the turn's id before it is stored are reported with its start.
    let file = Attachment {
        id: AttachmentId::from("f1"),
        conversation_id: "c1".into(),
        name: "f1.txt".into(),
        mime: "text/plain".into(),
        kind: AttachmentKind::File,
        size: 1,
        sha256: "00".repeat(32),
        turn_id: None,
        created_at_ms: 0,
    };
    store
        .attachments()
        .insert_attachments(std::slice::from_ref(&file))
        .await
        .unwrap();
    // A claim for a turn that was never stored (a crash between the claim and the
    // turn) does not keep the file from the message sent again.
    let claimed = store
        .attachments()
        .claim_attachments(&"c1".into(), &[&AttachmentId::from("f1")], &"lost".into())
        .await
        .unwrap();
    assert_eq!(claimed, 1);
    let claimed = store
        .attachments()
        .claim_attachments(&"c1".into(), &[&AttachmentId::from("f1")], &"t3".into())
        .await
        .unwrap();
    assert_eq!(claimed, 1, "claimed again from a turn never stored");
    let third = store
        .conversations()
        .insert_started_turn(&turn("t3", "s1", "with a file"), None)
        .await
        .unwrap();
    assert!(third.has_attachments, "the start says the turn has files");
    // Once its turn is stored, a file is sent: no other turn claims it.
    let claimed = store
        .attachments()
        .claim_attachments(&"c1".into(), &[&AttachmentId::from("f1")], &"t4".into())
        .await
        .unwrap();
    assert_eq!(
        claimed, 0,
        "a file sent with a stored turn is not claimed again"
    );
    assert!(store.attachments().sent_with(&"t3".into()).await.unwrap());
    assert!(!store.attachments().sent_with(&"lost".into()).await.unwrap());

    // A channel's message replayed after a crash keeps its turn id and fetches its
    // files again: the earlier try's claim is let go, so the turn gets each file once.
    let again = |id: &str| Attachment {
        id: AttachmentId::from(id),
        ..file.clone()
    };
    store
        .attachments()
        .insert_attachments(&[again("f2"), again("f3")])
        .await
        .unwrap();
    for f in ["f2", "f3"] {
        let claimed = store
            .attachments()
            .claim_attachments(&"c1".into(), &[&AttachmentId::from(f)], &"t5".into())
            .await
            .unwrap();
        assert_eq!(claimed, 1);
    }
    store
        .conversations()
        .insert_started_turn(&turn("t5", "s1", "replayed"), None)
        .await
        .unwrap();
    let files = store
        .attachments()
        .turn_attachments(&"t5".into())
        .await
        .unwrap();
    let ids: Vec<&str> = files.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(ids, ["f3"], "the replay's files only");
}

async fn a_turn_that_cannot_be_stored_leaves_nothing(b: Backend) {
    let (_d, store) = support::open(b).await;
    support::chat_with_session(&store, "c1", "s1").await;
    support::chat_with_session(&store, "c2", "s2").await;
    let events = |store: Store| async move {
        store
            .events()
            .conversation_events(&"c1".into(), 0, 100)
            .await
            .unwrap()
            .len()
    };
    let before = events(store.clone()).await;

    // Another conversation's session.
    let err = store
        .conversations()
        .insert_started_turn(&turn("t1", "s2", "hello"), None)
        .await;
    assert!(err.is_err(), "{err:?}");
    // No such session.
    let err = store
        .conversations()
        .insert_started_turn(&turn("t1", "nope", "hello"), None)
        .await;
    assert!(err.is_err(), "{err:?}");
    assert!(
        store
            .conversations()
            .get_turn(&"t1".into())
            .await
            .unwrap()
            .is_none()
    );

    // A turn id taken already.
    store
        .conversations()
        .insert_started_turn(&turn("t1", "s1", "hello"), None)
        .await
        .unwrap();
    let after_one = events(store.clone()).await;
    assert_eq!(after_one, before + 1);
    let err = store
        .conversations()
        .insert_started_turn(&turn("t1", "s1", "twice"), None)
        .await;
    assert!(err.is_err(), "{err:?}");
    assert_eq!(events(store.clone()).await, after_one);
    let history = store.events().history(&"c1".into(), 0, 10).await.unwrap();
    assert_eq!(history.len(), 1);
    // The turn's id decides between the router and the actor when the router stopped
    // waiting (`router_hand`): whichever stores it second is refused.
    let queued = NewTurn {
        status: TurnStatus::Queued,
        ..turn("t9", "s1", "late")
    };
    store
        .conversations()
        .insert_turn(&queued, true)
        .await
        .unwrap();
    let err = store
        .conversations()
        .insert_started_turn(&turn("t9", "s1", "late"), None)
        .await;
    assert!(err.is_err(), "{err:?}");
    store
        .conversations()
        .insert_started_turn(&turn("t8", "s1", "first"), None)
        .await
        .unwrap();
    let queued = NewTurn {
        status: TurnStatus::Queued,
        ..turn("t8", "s1", "first")
    };
    let err = store.conversations().insert_turn(&queued, true).await;
    assert!(err.is_err(), "{err:?}");
    let t8 = store
        .conversations()
        .get_turn(&"t8".into())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(t8.status, TurnStatus::Running);
    let t9 = store
        .conversations()
        .get_turn(&"t9".into())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(t9.status, TurnStatus::Queued);

    // The store still writes after the failed ones.
    store
        .conversations()
        .insert_started_turn(&turn("t2", "s1", "next"), None)
        .await
        .unwrap();
    assert_eq!(events(store.clone()).await, after_one + 2);
}

contract!(a_message_turn_is_stored_running_with_its_start);
contract!(a_turn_that_cannot_be_stored_leaves_nothing);
