//! Pending requests (approvals and questions, one family in the store) and the store's
//! clock, on both backends (see `support`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use tether_core::clock::{Clock, Wait};
use tether_proto::*;
use tether_store::*;

#[macro_use]
mod support;
use support::Backend;

/// A clock that says what the test sets.
struct FixedClock(AtomicI64);

impl Clock for FixedClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }

    fn sleep_until(&self, _at_ms: i64) -> Wait {
        Box::pin(std::future::ready(()))
    }
}

/// A conversation `c1` with session `s1` and running turn `t1`.
async fn running_turn(store: &Store) {
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
    let t = NewTurn {
        id: "t1".into(),
        session_id: "s1".into(),
        conversation_id: "c1".into(),
        input: "hi".into(),
        status: TurnStatus::Queued,
    };
    store.conversations().insert_turn(&t, true).await.unwrap();
    store
        .conversations()
        .start_turn(&"t1".into(), None)
        .await
        .unwrap();
}

fn question(id: &str) -> NewQuestion {
    NewQuestion {
        id: id.into(),
        conversation_id: "c1".into(),
        session_id: "s1".into(),
        turn_id: "t1".into(),
        prompt: "which file?".into(),
        deadline_ms: now_ms() + 60_000,
    }
}

async fn turn_status(store: &Store) -> TurnStatus {
    store
        .conversations()
        .get_turn(&"t1".into())
        .await
        .unwrap()
        .unwrap()
        .status
}

/// A question waits for the person, the first answer wins, and the turn runs again once
/// no request is pending; an approval waiting beside it comes first.
async fn a_question_is_answered_once_and_its_turn_runs_on(b: Backend) {
    let (_d, store) = support::open(b).await;
    running_turn(&store).await;
    let asked = store
        .requests()
        .create_question(&question("q1"))
        .await
        .unwrap();
    assert!(matches!(
        asked.payload,
        EventPayload::QuestionAsked { ref question_id, .. } if question_id.as_str() == "q1"
    ));
    assert_eq!(turn_status(&store).await, TurnStatus::WaitingUser);
    store
        .requests()
        .create_approval(&NewApproval {
            id: "a1".into(),
            conversation_id: "c1".into(),
            session_id: "s1".into(),
            turn_id: "t1".into(),
            title: "run ls".into(),
            kind: Some("execute".into()),
            detail: Some(serde_json::json!({"command": "ls"})),
            options: vec![Decision::Allow, Decision::Deny],
            deadline_ms: now_ms() + 60_000,
        })
        .await
        .unwrap();
    assert_eq!(turn_status(&store).await, TurnStatus::WaitingApproval);
    let approval = store
        .requests()
        .get_approval(&"a1".into())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(approval.kind.as_deref(), Some("execute"));
    assert_eq!(approval.detail, Some(serde_json::json!({"command": "ls"})));
    assert_eq!(approval.options, vec![Decision::Allow, Decision::Deny]);
    store
        .requests()
        .resolve_approval(&"a1".into(), ApprovalStatus::Allowed, Some("me"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(turn_status(&store).await, TurnStatus::WaitingUser);

    let (answered, ev) = store
        .requests()
        .resolve_question(
            &"q1".into(),
            QuestionStatus::Answered,
            Some("main.rs"),
            Some("me"),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(answered.answer.as_deref(), Some("main.rs"));
    assert_eq!(answered.status, QuestionStatus::Answered);
    assert!(matches!(
        ev.payload,
        EventPayload::QuestionResolved { ref answer, .. } if answer.as_deref() == Some("main.rs")
    ));
    assert_eq!(turn_status(&store).await, TurnStatus::Running);
    let again = store
        .requests()
        .resolve_question(&"q1".into(), QuestionStatus::Answered, Some("lib.rs"), None)
        .await
        .unwrap();
    assert!(again.is_none(), "a second answer must not win");
    let stored = store
        .requests()
        .get_question(&"q1".into())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.answer.as_deref(), Some("main.rs"));

    store
        .requests()
        .create_question(&question("q2"))
        .await
        .unwrap();
    let pending = store
        .requests()
        .list_questions(Some(QuestionStatus::Pending), Some(&"c1".into()))
        .await
        .unwrap();
    assert_eq!(
        pending.iter().map(|q| q.id.as_str()).collect::<Vec<_>>(),
        ["q2"]
    );
    assert_eq!(
        store
            .requests()
            .list_questions(None, None)
            .await
            .unwrap()
            .len(),
        2
    );
    let elsewhere = store
        .requests()
        .list_questions(None, Some(&"other".into()))
        .await
        .unwrap();
    assert!(elsewhere.is_empty());
    let allowed = store
        .requests()
        .list_approvals(Some(ApprovalStatus::Allowed), None)
        .await
        .unwrap();
    assert_eq!(allowed.len(), 1);
    assert!(
        store
            .requests()
            .get_question(&"nope".into())
            .await
            .unwrap()
            .is_none()
    );
}

/// What the store writes carries the time of the clock it was given, not the system's.
async fn writes_take_their_time_from_the_store_clock(b: Backend) {
    let (_d, store) = support::open(b).await;
    let clock = Arc::new(FixedClock(AtomicI64::new(1_000_000)));
    store.set_clock(clock.clone());
    running_turn(&store).await;
    let conv = store
        .conversations()
        .get_conversation(&"c1".into())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(conv.created_at_ms, 1_000_000);
    let turn = store
        .conversations()
        .get_turn(&"t1".into())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(turn.created_at_ms, 1_000_000);
    assert_eq!(turn.started_at_ms, Some(1_000_000));

    clock.0.store(2_000_000, Ordering::SeqCst);
    let asked = store
        .requests()
        .create_question(&question("q1"))
        .await
        .unwrap();
    assert_eq!(asked.at_ms, 2_000_000);
    let q = store
        .requests()
        .get_question(&"q1".into())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(q.created_at_ms, 2_000_000);
    let history = store.events().history(&"c1".into(), 0, 100).await.unwrap();
    assert!(!history.is_empty());
    assert!(history.iter().all(|m| m.at_ms == 1_000_000), "{history:?}");
}

/// Questions (and approvals: the same family) in pages: newest first, ties in the same
/// millisecond by id, each once whatever the page size; the place after the last one
/// gives an empty page.
async fn requests_come_in_pages_newest_first_ties_by_id(b: Backend) {
    let (_d, store) = support::open(b).await;
    running_turn(&store).await;
    let clock = Arc::new(FixedClock(AtomicI64::new(now_ms())));
    store.set_clock(clock.clone());
    for id in ["q3", "q1", "q2"] {
        store
            .requests()
            .create_question(&question(id))
            .await
            .unwrap();
    }
    clock.0.fetch_add(5, Ordering::SeqCst);
    for id in ["q5", "q4"] {
        store
            .requests()
            .create_question(&question(id))
            .await
            .unwrap();
    }
    let want = ["q4", "q5", "q1", "q2", "q3"];
    for limit in [1_u32, 2, 3, 5, 100] {
        let mut seen = Vec::new();
        let mut after: Option<RequestPlace> = None;
        loop {
            let page = store
                .requests()
                .questions_page(None, after.as_ref(), limit)
                .await
                .unwrap();
            seen.extend(page.iter().map(|q| q.id.as_str().to_owned()));
            let Some(last) = page.last() else { break };
            after = Some(RequestPlace {
                created_at_ms: last.created_at_ms,
                id: last.id.as_str().to_owned(),
            });
        }
        assert_eq!(seen, want, "pages of {limit}");
    }
    let pending = store
        .requests()
        .questions_page(Some(QuestionStatus::Pending), None, 100)
        .await
        .unwrap();
    assert_eq!(pending.len(), 5);
    let none = store
        .requests()
        .approvals_page(None, None, 100)
        .await
        .unwrap();
    assert!(none.is_empty());
}

/// The conversation's read for a message brings its bound session and says whether that
/// session waits for an answer: only a pending question of that session counts.
async fn a_conversation_read_for_a_message_says_whether_a_question_waits(b: Backend) {
    let (_d, store) = support::open(b).await;
    running_turn(&store).await;
    let read = |store: Store| async move {
        store
            .conversations()
            .conversation_for_message(&"c1".into())
            .await
            .unwrap()
            .expect("the conversation")
    };
    let t = read(store.clone()).await;
    assert_eq!(t.conversation.id.as_str(), "c1");
    assert_eq!(t.conversation.bound_session_id, Some("s1".into()));
    let s1 = store
        .conversations()
        .get_session(&"s1".into())
        .await
        .unwrap()
        .unwrap();
    // Every field, as the session's own read gives it.
    let bound = t.bound.as_ref().expect("the bound session");
    assert_eq!(
        serde_json::to_value(bound).unwrap(),
        serde_json::to_value(&s1).unwrap()
    );
    assert!(!t.asking);
    assert!(
        store
            .conversations()
            .conversation_for_message(&"nope".into())
            .await
            .unwrap()
            .is_none()
    );

    store
        .requests()
        .create_question(&question("q1"))
        .await
        .unwrap();
    assert!(read(store.clone()).await.asking);
    store
        .requests()
        .resolve_question(
            &"q1".into(),
            QuestionStatus::Answered,
            Some("a.rs"),
            Some("me"),
        )
        .await
        .unwrap()
        .unwrap();
    assert!(!read(store.clone()).await.asking);

    // A pending question of a session no longer bound (after `/new`) does not count.
    store
        .requests()
        .create_question(&question("q2"))
        .await
        .unwrap();
    assert!(read(store.clone()).await.asking);
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
    let t = read(store.clone()).await;
    assert_eq!(t.conversation.bound_session_id, Some("s2".into()));
    assert_eq!(t.bound.map(|s| s.id), Some("s2".into()));
    assert!(!t.asking);

    // Unbound: no session.
    store
        .conversations()
        .unbind(&"c1".into(), "detached", None)
        .await
        .unwrap();
    let t = read(store.clone()).await;
    assert!(t.conversation.bound_session_id.is_none());
    assert!(t.bound.is_none());
    assert!(!t.asking);
}

/// A page's access filter reads its conversations in one call: those that exist, each
/// once, whatever the list's length (padded to a power of two) and repeats.
async fn conversations_among_reads_those_that_exist(b: Backend) {
    let (_d, store) = support::open(b).await;
    for (c, s) in [("c1", "s1"), ("c2", "s2"), ("c3", "s3")] {
        support::chat_with_session(&store, c, s).await;
    }
    let among = |ids: &[&str]| {
        let ids: Vec<ConversationId> = ids.iter().map(|i| ConversationId::from(*i)).collect();
        let store = store.clone();
        async move {
            let mut got: Vec<String> = store
                .conversations()
                .conversations_among(&ids)
                .await
                .unwrap()
                .into_iter()
                .map(|r| r.id.to_string())
                .collect();
            got.sort();
            got
        }
    };
    assert!(among(&[]).await.is_empty());
    assert_eq!(among(&["c2"]).await, ["c2"]);
    assert_eq!(among(&["c3", "nope", "c1"]).await, ["c1", "c3"]);
    assert_eq!(
        among(&["c1", "c2", "c3", "c1", "x"]).await,
        ["c1", "c2", "c3"]
    );
}

contract!(
    a_conversation_read_for_a_message_says_whether_a_question_waits,
    a_question_is_answered_once_and_its_turn_runs_on,
    writes_take_their_time_from_the_store_clock,
    requests_come_in_pages_newest_first_ties_by_id,
    conversations_among_reads_those_that_exist,
);
