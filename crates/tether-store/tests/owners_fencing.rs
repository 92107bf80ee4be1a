//! Fencing (issue 12), on both backends: once another node took a conversation over, the
//! old owner's writes on its behalf (events, group commits, turns, history lines, session
//! status) are refused with `Fenced` and store nothing; the new owner's scoped recovery
//! touches its conversation only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tether_proto::*;
use tether_store::*;

#[macro_use]
mod support;
use support::Backend;

fn node(id: &str, now: i64) -> NodeRow {
    NodeRow {
        id: id.into(),
        name: "host".into(),
        addr: "127.0.0.1:1".into(),
        started_at_ms: now,
        heartbeat_at_ms: now,
        lease_until_ms: now + 10_000,
        draining_at_ms: None,
        version: String::new(),
    }
}

async fn conversation(store: &Store, c: &str) -> (ConversationId, SessionId) {
    let (cid, sid): (ConversationId, SessionId) = (c.into(), format!("{c}-s").into());
    store
        .conversations()
        .create_conversation(&tether_store::NewConversation {
            id: &cid,
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
        id: sid.clone(),
        conversation_id: cid.clone(),
        agent: "fake".into(),
        model: None,
        cwd: "/tmp".into(),
    };
    store
        .conversations()
        .start_session(&s, NewSessionReason::Unbound, None)
        .await
        .unwrap();
    (cid, sid)
}

async fn running_turn(store: &Store, c: &ConversationId, s: &SessionId, id: &str) -> TurnId {
    let t = NewTurn {
        id: id.into(),
        session_id: s.clone(),
        conversation_id: c.clone(),
        input: "hi".into(),
        status: TurnStatus::Queued,
    };
    store.conversations().insert_turn(&t, true).await.unwrap();
    store
        .conversations()
        .start_turn(&t.id, None)
        .await
        .unwrap()
        .unwrap();
    t.id
}

fn delta(text: &str) -> Vec<EventPayload> {
    vec![EventPayload::MessageDelta { text: text.into() }]
}

fn fenced<T: std::fmt::Debug>(r: Result<T>) {
    assert!(
        matches!(r, Err(StoreError::Fenced { .. })),
        "expected Fenced, got {r:?}"
    );
}

async fn a_stale_owner_writes_nothing_after_a_take_over(b: Backend) {
    let (guard, a) = support::open(b).await;
    // Two nodes: two stores on one database, each with its own held epochs.
    let bb = support::reopen(&guard).await;
    a.cluster().register_node(&node("a", 1_000)).await.unwrap();
    bb.cluster().register_node(&node("b", 1_000)).await.unwrap();
    let (c, s) = conversation(&a, "c").await;
    let (other, other_s) = conversation(&a, "other").await;
    assert_eq!(
        a.cluster()
            .claim_conversation(&c, "a", 2_000)
            .await
            .unwrap(),
        Claim::Claimed { epoch: 1 }
    );
    a.cluster()
        .claim_conversation(&other, "a", 2_000)
        .await
        .unwrap();

    // The owner writes under its epoch.
    let turn = running_turn(&a, &c, &s, "t1").await;
    let other_turn = running_turn(&a, &other, &other_s, "t2").await;
    a.events()
        .append_events(&s, Some(&turn), &delta("one"))
        .await
        .unwrap();
    let stored = a
        .events()
        .conversation_events(&c, 0, 1000)
        .await
        .unwrap()
        .len();
    let history = a.events().history(&c, 0, 1000).await.unwrap().len();

    // a pauses past its lease; b takes `c` over (compare and set from epoch 1).
    assert_eq!(
        bb.cluster()
            .take_over_conversation(&c, "b", 1, 12_000)
            .await
            .unwrap(),
        Some(2)
    );

    // Every kind of write a makes for `c` is refused, and stores nothing.
    assert_eq!(a.fenced_writes(), 0);
    assert!(!a.cluster().is_fenced(&c));
    fenced(
        a.events()
            .append_events(&s, Some(&turn), &delta("two"))
            .await,
    );
    fenced(
        a.events()
            .append_events(
                &s,
                Some(&turn),
                &[delta("x")[0].clone(), delta("y")[0].clone()],
            )
            .await,
    );
    fenced(
        a.events()
            .add_message(&c, MessageRole::Status, "late", Some(&s), None)
            .await,
    );
    fenced(
        a.events()
            .add_message(&c, MessageRole::Agent, "late", None, None)
            .await,
    );
    fenced(
        a.conversations()
            .set_session_status(&s, SessionStatus::Dormant, None, None)
            .await,
    );
    fenced(
        a.conversations()
            .insert_started_turn(
                &NewTurn {
                    id: "t-late".into(),
                    session_id: s.clone(),
                    conversation_id: c.clone(),
                    input: "late".into(),
                    status: TurnStatus::Running,
                },
                None,
            )
            .await,
    );
    let end = TurnEnd {
        status: TurnStatus::Completed,
        result_text: Some("late".into()),
        stop_reason: None,
        error: None,
        usage: None,
    };
    fenced(
        a.conversations()
            .finish_turn(
                &turn,
                &end,
                &EventPayload::TurnCompleted {
                    stop_reason: None,
                    text: "late".into(),
                },
                None,
            )
            .await,
    );
    let next = NewTurn {
        id: "t3".into(),
        session_id: s.clone(),
        conversation_id: c.clone(),
        input: "more".into(),
        status: TurnStatus::Queued,
    };
    fenced(a.conversations().insert_turn(&next, true).await);
    assert!(a.cluster().is_fenced(&c));
    assert_eq!(a.fenced_writes(), 8);
    let before_group = a.fenced_writes();
    assert_eq!(
        a.events()
            .conversation_events(&c, 0, 1000)
            .await
            .unwrap()
            .len(),
        stored
    );
    assert_eq!(
        a.events().history(&c, 0, 1000).await.unwrap().len(),
        history
    );
    assert_eq!(
        a.conversations()
            .get_turn(&turn)
            .await
            .unwrap()
            .unwrap()
            .status,
        TurnStatus::Running
    );
    assert!(
        a.conversations()
            .get_turn(&"t3".into())
            .await
            .unwrap()
            .is_none()
    );

    // Batches that share a group commit: only the fenced ones are refused (`other` is
    // still a's), whether or not they met in one transaction.
    let mut tasks = Vec::new();
    for i in 0..24 {
        let (store, s, other_s) = (a.clone(), s.clone(), other_s.clone());
        tasks.push(tokio::spawn(async move {
            let (session, text) = if i % 3 == 0 {
                (s, "three")
            } else {
                (other_s, "mine")
            };
            (
                i % 3 == 0,
                store
                    .events()
                    .append_events(&session, None, &delta(text))
                    .await,
            )
        }));
    }
    for t in tasks {
        match t.await.unwrap() {
            (true, r) => fenced(r),
            (false, r) => assert_eq!(r.unwrap().len(), 1),
        }
    }
    assert!(!a.cluster().is_fenced(&other));
    assert_eq!(a.fenced_writes(), before_group + 8);
    let _ = other_turn;

    // The new owner recovers `c` alone, under its epoch: the turn is interrupted once,
    // one status line; `other`'s running turn is untouched.
    // A fenced batch's transaction may still be rolling back on a loaded machine: the
    // recovery's lock wait (500 ms) then gives up, and is tried again (as the sweep does).
    let mut tries = 0;
    let report = loop {
        match bb
            .recovery()
            .recover_conversation(&c, |_| "taken over".to_string())
            .await
        {
            Ok(r) => break r,
            Err(e) if tries < 10 => {
                tries += 1;
                eprintln!("recovery waits ({e}); trying again");
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            Err(e) => panic!("recovery keeps failing: {e}"),
        }
    };
    assert_eq!(report.conversations.len(), 1);
    assert_eq!(report.conversations[0].interrupted_turns, 1);
    assert_eq!(
        bb.conversations()
            .get_turn(&turn)
            .await
            .unwrap()
            .unwrap()
            .status,
        TurnStatus::Interrupted
    );
    assert_eq!(
        bb.conversations()
            .get_turn(&other_turn)
            .await
            .unwrap()
            .unwrap()
            .status,
        TurnStatus::Running
    );
    // The stale node's end of the turn the survivor ended, with its last output: nothing
    // stored, and it learns why (`Fenced`), as its output's own write would have told it.
    let events_now = bb
        .events()
        .conversation_events(&c, 0, 1000)
        .await
        .unwrap()
        .len();
    fenced(
        a.conversations()
            .finish_turn_with_usage(
                &turn,
                &end,
                &EventPayload::TurnCompleted {
                    stop_reason: None,
                    text: "late".into(),
                },
                None,
                None,
                &delta("last words"),
            )
            .await,
    );
    assert_eq!(
        bb.events()
            .conversation_events(&c, 0, 1000)
            .await
            .unwrap()
            .len(),
        events_now
    );
    assert!(bb.cluster().release_conversation(&c, "b", 2).await.unwrap());

    // A node that holds no epoch for `c` (it never claimed it) is not fenced: an answer
    // given on any node is not an owner's write.
    let cc = support::reopen(&guard).await;
    cc.events()
        .add_message(&c, MessageRole::Agent, "from anywhere", None, None)
        .await
        .unwrap();
    // The stale node stays refused until it claims again; then it writes.
    fenced(a.events().append_events(&s, None, &delta("four")).await);
    assert_eq!(
        a.cluster()
            .claim_conversation(&c, "a", 13_000)
            .await
            .unwrap(),
        Claim::Claimed { epoch: 3 }
    );
    assert!(!a.cluster().is_fenced(&c));
    a.events()
        .append_events(&s, None, &delta("five"))
        .await
        .unwrap();
}

contract!(multi_thread; a_stale_owner_writes_nothing_after_a_take_over);
