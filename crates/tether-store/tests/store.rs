//! Store tests, on both backends (see `support`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tether_proto::*;
use tether_store::*;

#[macro_use]
mod support;
use support::Backend;

async fn open(b: Backend) -> (support::Guard, Store) {
    support::open(b).await
}

async fn conv_with_session(store: &Store) -> (ConversationId, SessionId) {
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
        .start_session(&s, NewSessionReason::Unbound, Some("why"))
        .await
        .unwrap();
    ("c1".into(), "s1".into())
}

/// Issue 26 item 5: two sessions of one agent never carry one agent session id.
async fn one_external_id_one_session(b: Backend) {
    let (_d, store) = open(b).await;
    let (_, s1) = conv_with_session(&store).await;
    let s2 = NewSession {
        id: "s2".into(),
        conversation_id: "c1".into(),
        agent: "fake".into(),
        model: None,
        cwd: "/tmp".into(),
    };
    store
        .conversations()
        .start_session(&s2, NewSessionReason::Explicit, None)
        .await
        .unwrap();
    let live = tether_proto::SessionStatus::Live;
    store
        .conversations()
        .set_session_status(&s1, live, Some("ext-1"), None)
        .await
        .unwrap();
    assert_eq!(
        store
            .conversations()
            .session_with_external_id("fake", "ext-1")
            .await
            .unwrap(),
        Some(s1.clone())
    );
    assert!(
        store
            .conversations()
            .session_with_external_id("other", "ext-1")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .conversations()
            .set_session_status(&"s2".into(), live, Some("ext-1"), None)
            .await
            .is_err(),
        "a second session under one external id"
    );
    // Setting a session's own id again is fine.
    store
        .conversations()
        .set_session_status(&s1, live, Some("ext-1"), None)
        .await
        .unwrap();
}

async fn seq_is_gap_free_and_binding_set(b: Backend) {
    let (_d, store) = open(b).await;
    let (c, s) = conv_with_session(&store).await;
    let conv = store
        .conversations()
        .get_conversation(&c)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(conv.bound_session_id.as_deref(), Some("s1"));
    let deltas: Vec<_> = (0..5)
        .map(|i| EventPayload::MessageDelta {
            text: i.to_string(),
        })
        .collect();
    store
        .events()
        .append_events(&s, None, &deltas)
        .await
        .unwrap();
    let evs = store.events().session_events(&s, 0, 100).await.unwrap();
    let seqs: Vec<i64> = evs.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=7).collect::<Vec<_>>());
    let page = store.events().session_events(&s, 3, 2).await.unwrap();
    assert_eq!(page.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![4, 5]);
    let hist = store.events().history(&c, 0, 10).await.unwrap();
    assert_eq!(hist.len(), 1);
    assert_eq!(hist[0].role, MessageRole::Status);
}

async fn approval_first_answer_wins_and_recovery_expires(b: Backend) {
    let (_d, store) = open(b).await;
    let (c, s) = conv_with_session(&store).await;
    let t = NewTurn {
        id: "t1".into(),
        session_id: s.clone(),
        conversation_id: c.clone(),
        input: "hi".into(),
        status: TurnStatus::Queued,
    };
    store.conversations().insert_turn(&t, true).await.unwrap();
    store
        .conversations()
        .start_turn(&"t1".into(), None)
        .await
        .unwrap();
    for id in ["a1", "a2"] {
        store
            .requests()
            .create_approval(&NewApproval {
                id: id.into(),
                conversation_id: c.clone(),
                session_id: s.clone(),
                turn_id: "t1".into(),
                title: "run ls".into(),
                kind: None,
                detail: None,
                options: vec![Decision::Allow, Decision::Deny],
                deadline_ms: now_ms() + 1000,
            })
            .await
            .unwrap();
    }
    assert_eq!(
        store
            .conversations()
            .get_turn(&"t1".into())
            .await
            .unwrap()
            .unwrap()
            .status,
        TurnStatus::WaitingApproval
    );
    let first = store
        .requests()
        .resolve_approval(&"a1".into(), ApprovalStatus::Allowed, Some("me"))
        .await
        .unwrap();
    assert!(first.is_some());
    let second = store
        .requests()
        .resolve_approval(&"a1".into(), ApprovalStatus::Denied, Some("you"))
        .await
        .unwrap();
    assert!(second.is_none());

    let report = store
        .recovery()
        .recover(|rc| format!("restarted {}", rc.interrupted_turns))
        .await
        .unwrap();
    assert_eq!(report.conversations.len(), 1);
    assert_eq!(report.conversations[0].interrupted_turns, 1);
    assert_eq!(report.conversations[0].expired_approvals, 1);
    assert_eq!(
        store
            .conversations()
            .get_turn(&"t1".into())
            .await
            .unwrap()
            .unwrap()
            .status,
        TurnStatus::Interrupted
    );
    assert_eq!(
        store
            .requests()
            .get_approval(&"a2".into())
            .await
            .unwrap()
            .unwrap()
            .status,
        ApprovalStatus::Expired
    );
    assert_eq!(
        store
            .requests()
            .get_approval(&"a1".into())
            .await
            .unwrap()
            .unwrap()
            .status,
        ApprovalStatus::Allowed
    );
    let conv = store
        .conversations()
        .get_conversation(&c)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(conv.bound_session_id.as_deref(), Some("s1"));
    // A finished turn is immutable.
    let end = TurnEnd {
        status: TurnStatus::Completed,
        result_text: Some("x".into()),
        stop_reason: None,
        error: None,
        usage: None,
    };
    let again = store
        .conversations()
        .finish_turn(
            &"t1".into(),
            &end,
            &EventPayload::TurnCompleted {
                stop_reason: None,
                text: "x".into(),
            },
            None,
        )
        .await
        .unwrap();
    assert!(again.is_none());
    assert!(store.integrity_check().await.unwrap());
    // Second recovery finds nothing.
    let report = store.recovery().recover(|_| String::new()).await.unwrap();
    assert!(report.conversations.is_empty());
}

async fn view_parts_reads_only_the_conversations_asked_for(b: Backend) {
    let (_d, store) = open(b).await;
    let (c, s) = conv_with_session(&store).await;
    store
        .conversations()
        .create_conversation(&tether_store::NewConversation {
            id: &"c2".into(),
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
    let t = NewTurn {
        id: "t1".into(),
        session_id: s.clone(),
        conversation_id: c.clone(),
        input: "hi".into(),
        status: TurnStatus::Queued,
    };
    store.conversations().insert_turn(&t, true).await.unwrap();
    store
        .conversations()
        .start_turn(&"t1".into(), None)
        .await
        .unwrap();
    store
        .requests()
        .create_approval(&NewApproval {
            id: "a1".into(),
            conversation_id: c.clone(),
            session_id: s.clone(),
            turn_id: "t1".into(),
            title: "run ls".into(),
            kind: None,
            detail: None,
            options: vec![Decision::Allow, Decision::Deny],
            deadline_ms: now_ms() + 60_000,
        })
        .await
        .unwrap();

    let c2 = ConversationId::from("c2");
    let both = store
        .conversations()
        .view_parts(&[&c, &c2], &[&s])
        .await
        .unwrap();
    assert_eq!(both.sessions.len(), 1);
    assert_eq!(both.open_turns.len(), 1);
    assert_eq!(both.open_turns[0].status, TurnStatus::WaitingApproval);
    assert_eq!(both.pending_approvals.len(), 1);
    assert!(both.pending_questions.is_empty());

    let other = store.conversations().view_parts(&[&c2], &[]).await.unwrap();
    assert!(other.sessions.is_empty() && other.open_turns.is_empty());
    assert!(other.pending_approvals.is_empty());
    let none = store.conversations().view_parts(&[], &[]).await.unwrap();
    assert!(none.open_turns.is_empty());
}

/// A person's message makes its turn and history line in one round trip: stored
/// together, and a second message with the same turn id stores neither again (refused,
/// the connection and the write lock free for the next write).
async fn a_turn_and_its_message_are_stored_together_or_not_at_all(b: Backend) {
    let (_d, store) = open(b).await;
    let (c, s) = conv_with_session(&store).await;
    let t = NewTurn {
        id: "t1".into(),
        session_id: s.clone(),
        conversation_id: c.clone(),
        input: "hi".into(),
        status: TurnStatus::Queued,
    };
    let before = store
        .conversations()
        .get_conversation(&c)
        .await
        .unwrap()
        .unwrap();
    let turn = store.conversations().insert_turn(&t, true).await.unwrap();
    assert_eq!((turn.id.as_str(), turn.status), ("t1", TurnStatus::Queued));
    let hist = store.events().history(&c, 0, 10).await.unwrap();
    let lines: Vec<(MessageRole, &str, Option<&str>)> = hist
        .iter()
        .map(|m| {
            (
                m.role,
                m.text.as_str(),
                m.turn_id.as_ref().map(|t| t.as_str()),
            )
        })
        .collect();
    // (The status line is the session's binding, see `conv_with_session`.)
    assert_eq!(
        lines,
        [
            (MessageRole::Status, "why", None),
            (MessageRole::User, "hi", Some("t1"))
        ]
    );
    let after = store
        .conversations()
        .get_conversation(&c)
        .await
        .unwrap()
        .unwrap();
    assert!(after.updated_at_ms >= before.updated_at_ms);
    // The same id again: refused, nothing of it stored.
    let again = NewTurn {
        input: "hi again".into(),
        ..t.clone()
    };
    assert!(
        store
            .conversations()
            .insert_turn(&again, true)
            .await
            .is_err()
    );
    assert_eq!(store.events().history(&c, 0, 10).await.unwrap().len(), 2);
    // The writer goes on at once.
    let next = NewTurn {
        id: "t2".into(),
        input: "next".into(),
        ..t
    };
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        store.conversations().insert_turn(&next, true),
    )
    .await
    .unwrap()
    .unwrap();
    let texts: Vec<String> = store
        .events()
        .history(&c, 0, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.text)
        .collect();
    assert_eq!(texts, ["why", "hi", "next"]);
}

/// A turn's start (its row and `turn_started`) and its end (its row, its terminal event
/// at the next `seq` and its history line with the conversation's `updated_at`),
/// together, once (on SQLite one query each, see `conversations/sql_turns_at_once.rs`);
/// without a line, only the row and the event.
async fn a_turns_end_is_stored_together_once(b: Backend) {
    let (_d, store) = open(b).await;
    let (c, s) = conv_with_session(&store).await;
    for (id, line) in [("t1", true), ("t2", false)] {
        let t = NewTurn {
            id: id.into(),
            session_id: s.clone(),
            conversation_id: c.clone(),
            input: format!("do {id}"),
            status: TurnStatus::Queued,
        };
        store.conversations().insert_turn(&t, true).await.unwrap();
        // The start (with a trace context or without) as stored and as returned.
        let trace = line.then_some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        let started = store
            .conversations()
            .start_turn(&id.into(), trace)
            .await
            .unwrap()
            .unwrap();
        assert!(!started.has_attachments);
        assert_eq!(
            started.event.payload,
            EventPayload::TurnStarted {
                input: format!("do {id}"),
                traceparent: trace.map(str::to_owned),
            }
        );
        let read = store.events().session_events(&s, 0, 100).await.unwrap();
        assert_eq!(read.last(), Some(&started.event));
        assert_eq!(
            store
                .conversations()
                .get_turn(&id.into())
                .await
                .unwrap()
                .unwrap()
                .status,
            TurnStatus::Running
        );
        assert!(
            store
                .conversations()
                .start_turn(&id.into(), None)
                .await
                .unwrap()
                .is_none(),
            "a turn starts once"
        );
        let before = store
            .conversations()
            .get_conversation(&c)
            .await
            .unwrap()
            .unwrap()
            .updated_at_ms;
        let lines = store.events().history(&c, 0, 100).await.unwrap().len();
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
        let end = TurnEnd {
            status: TurnStatus::Completed,
            result_text: Some(format!("done {id}")),
            stop_reason: Some("end_turn".into()),
            error: None,
            usage: Some(serde_json::json!({"output_tokens": 3})),
        };
        let payload = EventPayload::TurnCompleted {
            stop_reason: Some("end_turn".into()),
            text: format!("done {id}"),
        };
        let message = NewMessage {
            role: MessageRole::Agent,
            text: format!("done {id}"),
        };
        let ev = store
            .conversations()
            .finish_turn(&id.into(), &end, &payload, line.then_some(&message))
            .await
            .unwrap()
            .expect("the turn ends");
        assert_eq!(ev.seq, started.event.seq + 1, "{ev:?}");
        assert_eq!(ev.session_id, s);
        assert_eq!(ev.conversation_id, c);
        assert_eq!(ev.turn_id.as_ref().map(TurnId::as_str), Some(id));
        let stored = store.events().session_events(&s, 0, 100).await.unwrap();
        let last = stored.last().unwrap();
        assert_eq!((last.id, last.seq), (ev.id, ev.seq));
        assert_eq!(last.payload, payload);
        let turn = store
            .conversations()
            .get_turn(&id.into())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(turn.status, TurnStatus::Completed);
        assert_eq!(
            turn.result_text.as_deref(),
            Some(format!("done {id}").as_str())
        );
        assert_eq!(turn.stop_reason.as_deref(), Some("end_turn"));
        assert!(turn.ended_at_ms.is_some());
        let history = store.events().history(&c, 0, 100).await.unwrap();
        let after = store
            .conversations()
            .get_conversation(&c)
            .await
            .unwrap()
            .unwrap()
            .updated_at_ms;
        if line {
            assert_eq!(history.len(), lines + 1);
            let m = history.last().unwrap();
            assert_eq!((m.role, m.text.as_str()), (MessageRole::Agent, "done t1"));
            assert_eq!(m.turn_id.as_ref().map(TurnId::as_str), Some(id));
            assert!(after > before, "{after} > {before}");
        } else {
            assert_eq!(history.len(), lines);
            assert_eq!(after, before);
        }
        // Once: a second end (of any status) changes nothing.
        let cancelled = TurnEnd {
            status: TurnStatus::Cancelled,
            result_text: None,
            stop_reason: None,
            error: None,
            usage: None,
        };
        let again = store
            .conversations()
            .finish_turn(
                &id.into(),
                &cancelled,
                &EventPayload::TurnCancelled {},
                Some(&message),
            )
            .await
            .unwrap();
        assert!(again.is_none());
        assert_eq!(
            store
                .events()
                .session_events(&s, 0, 100)
                .await
                .unwrap()
                .len(),
            stored.len()
        );
        assert_eq!(
            store.events().history(&c, 0, 100).await.unwrap().len(),
            history.len()
        );
    }
    // A turn given files before it starts says so at its start.
    let file = tether_proto::Attachment {
        id: AttachmentId::from("f1"),
        conversation_id: c.clone(),
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
        .insert_attachments(&[file])
        .await
        .unwrap();
    let t3 = NewTurn {
        id: "t3".into(),
        session_id: s.clone(),
        conversation_id: c.clone(),
        input: "with a file".into(),
        status: TurnStatus::Queued,
    };
    let claimed = store
        .attachments()
        .claim_attachments(&c, &[&AttachmentId::from("f1")], &"t3".into())
        .await
        .unwrap();
    assert_eq!(claimed, 1);
    store.conversations().insert_turn(&t3, true).await.unwrap();
    let started = store
        .conversations()
        .start_turn(&"t3".into(), None)
        .await
        .unwrap()
        .unwrap();
    assert!(started.has_attachments, "the start says the turn has files");
    // A turn that is not there ends nothing; the store goes on.
    let none = TurnEnd {
        status: TurnStatus::Failed,
        result_text: None,
        stop_reason: None,
        error: Some((ErrorCode::AgentCrashed, "gone".into())),
        usage: None,
    };
    let payload = EventPayload::TurnCancelled {};
    assert!(
        store
            .conversations()
            .finish_turn(&"nope".into(), &none, &payload, None)
            .await
            .unwrap()
            .is_none()
    );
    assert!(store.integrity_check().await.unwrap());
}

contract!(
    a_turns_end_is_stored_together_once,
    a_turn_and_its_message_are_stored_together_or_not_at_all,
    one_external_id_one_session,
    seq_is_gap_free_and_binding_set,
    approval_first_answer_wins_and_recovery_expires,
    view_parts_reads_only_the_conversations_asked_for,
);
