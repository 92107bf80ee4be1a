//! Delegation rows on a real SQLite file: task creation, versioned turns, the ledger,
//! release and the once-only outcome report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use tether_proto::*;
use tether_store::*;

#[macro_use]
mod support;
use support::Backend;

async fn task_lifecycle_rows(b: Backend) {
    let (_dir, store) = support::open(b).await;
    store
        .conversations()
        .create_conversation(&tether_store::NewConversation {
            id: &"p".into(),
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
        id: "ps".into(),
        conversation_id: "p".into(),
        agent: "fake".into(),
        model: None,
        cwd: "/tmp".into(),
    };
    store
        .conversations()
        .start_session(&s, NewSessionReason::Unbound, None)
        .await
        .unwrap();
    let d = NewDelegation {
        task_id: "t1".into(),
        title: "task".into(),
        parent_conversation_id: Some("p".into()),
        parent_session_id: Some("ps".into()),
        parent_turn_id: Some("pt".into()),
        parent_tool_call_id: None,
        depth: 1,
        agent: "fake".into(),
        cwd: "/tmp".into(),
        task: "do it".into(),
        session_id: "cs".into(),
        turn_id: "ct1".into(),
        owner_id: None,
    };
    let (session, events) = store.delegation().create_delegation(&d).await.unwrap();
    assert_eq!(session.conversation_id, "t1");
    assert!(events.iter().any(
        |e| e.session_id == "ps" && matches!(e.payload, EventPayload::DelegationStarted { .. })
    ));
    let conv = store
        .conversations()
        .get_conversation(&"t1".into())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(conv.kind, ConversationKind::Delegate);
    assert_eq!(conv.parent_conversation_id.as_deref(), Some("p"));
    assert_eq!(conv.bound_session_id.as_deref(), Some("cs"));
    assert_eq!(
        store
            .delegation()
            .running_children(Some(&"p".into()))
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        store
            .delegation()
            .open_turns_started_in(&"pt".into())
            .await
            .unwrap()
            .len(),
        1
    );

    let entry = LedgerEntry {
        scope: "p".into(),
        continuation_id: "c-1".into(),
        task_id: "t1".into(),
        action: "continue".into(),
        message: Some("more".into()),
        result: json!({"task_id": "t1"}),
    };
    let v = store
        .delegation()
        .add_delegation_turn(
            &NewDelegationTurn {
                task_id: "t1".into(),
                session_id: "cs".into(),
                turn_id: "ct2".into(),
                message: "more".into(),
                origin: TurnOrigin::Person,
                parent_turn_id: None,
                max_running_children: Some(4),
            },
            Some(&entry),
        )
        .await
        .unwrap();
    assert_eq!(v, 2);
    let got = store
        .delegation()
        .ledger_entry("p", "c-1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.result["turn_version"], 2);
    let latest = store
        .delegation()
        .latest_delegation_turn(&"t1".into())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (latest.turn_version, latest.origin),
        (2, TurnOrigin::Person)
    );

    // Outcome reports go to the parent's session once.
    let end = TurnEnd {
        status: TurnStatus::Completed,
        result_text: Some("ok".into()),
        stop_reason: Some("end_turn".into()),
        error: None,
        usage: None,
    };
    store
        .conversations()
        .start_turn(&"ct1".into(), None)
        .await
        .unwrap();
    store
        .conversations()
        .finish_turn(&"ct1".into(), &end, &EventPayload::TurnCancelled {}, None)
        .await
        .unwrap();
    let pending = store
        .delegation()
        .unreported_delegation_turns()
        .await
        .unwrap();
    assert_eq!(pending.len(), 1);
    let ev = EventPayload::Status { text: "x".into() };
    assert!(
        store
            .delegation()
            .report_delegation_turn(&"ct1".into(), &ev)
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        store
            .delegation()
            .report_delegation_turn(&"ct1".into(), &ev)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .delegation()
            .unreported_delegation_turns()
            .await
            .unwrap()
            .is_empty()
    );

    let (released, _) = store
        .delegation()
        .release_delegation(&"t1".into(), "closed", None)
        .await
        .unwrap();
    assert!(released);
    let (again, _) = store
        .delegation()
        .release_delegation(&"t1".into(), "closed", None)
        .await
        .unwrap();
    assert!(!again);
    let row = store
        .delegation()
        .get_delegation(&"t1".into())
        .await
        .unwrap()
        .unwrap();
    assert!(row.released_at_ms.is_some());
    let s = store
        .conversations()
        .get_session(&"cs".into())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(s.status, SessionStatus::Closed);
}

contract!(task_lifecycle_rows,);

/// A node whose lease runs for ten more minutes.
fn alive(id: &str) -> NodeRow {
    NodeRow {
        id: id.into(),
        name: "host".into(),
        addr: "127.0.0.1:1".into(),
        started_at_ms: 0,
        heartbeat_at_ms: 0,
        lease_until_ms: now_ms() + 600_000,
        draining_at_ms: None,
        version: String::new(),
    }
}

/// A continuation id is claimed with the ledger read (issue 26 item 2): one request at a
/// time over every node; the ledger entry replaces the claim; a claim given back, of a
/// node whose lease ended, or this node's own from a previous run is free again.
async fn continuation_ids_are_claimed_in_the_store(b: Backend) {
    let (_dir, store) = support::open(b).await;
    store.cluster().register_node(&alive("a")).await.unwrap();
    store.cluster().register_node(&alive("b")).await.unwrap();
    let claim = |node: &'static str, claim: &'static str| {
        let store = store.clone();
        async move {
            store
                .delegation()
                .claim_continuation("p", "k", node, claim)
                .await
                .unwrap()
        }
    };
    assert_eq!(claim("a", "c1").await, ContinuationClaim::Claimed);
    assert_eq!(
        claim("b", "c2").await,
        ContinuationClaim::Held {
            node_id: "a".into()
        }
    );
    // The same node again: its earlier claim is a previous run's (its own requests
    // are serialised in memory).
    assert_eq!(claim("a", "c3").await, ContinuationClaim::Claimed);
    // Given back under an old name: still held; under its own: free.
    store
        .delegation()
        .release_continuation("p", "k", "c1")
        .await
        .unwrap();
    assert!(matches!(
        claim("b", "c4").await,
        ContinuationClaim::Held { .. }
    ));
    store
        .delegation()
        .release_continuation("p", "k", "c3")
        .await
        .unwrap();
    assert_eq!(claim("b", "c4").await, ContinuationClaim::Claimed);
    // A node whose lease ended holds nothing.
    store
        .cluster()
        .register_node(&NodeRow {
            lease_until_ms: now_ms() - 1,
            draining_at_ms: None,
            version: String::new(),
            ..alive("b")
        })
        .await
        .unwrap();
    assert_eq!(claim("a", "c5").await, ContinuationClaim::Claimed);
    // Recording the id replaces the claim: later requests read the entry.
    let entry = LedgerEntry {
        scope: "p".into(),
        continuation_id: "k".into(),
        task_id: "t1".into(),
        action: "close".into(),
        message: None,
        result: json!({"ok": true}),
    };
    store
        .delegation()
        .release_delegation(&"t1".into(), "closed", Some(&entry))
        .await
        .unwrap();
    assert_eq!(claim("b", "c6").await, ContinuationClaim::Recorded(entry));
}

contract!(continuation_ids_are_claimed_in_the_store,);

/// A claim racing the request that records the id (PostgreSQL, read committed): the
/// recording transaction writes the entry and deletes its claim; a claim made meanwhile
/// waits for it and must then read the entry, never take the id. (Read before the claim,
/// the entry was missed and the id taken: a refused close had already ended the task's
/// process, seen as a flaky `cluster_route_tasks` test.)
#[tokio::test]
async fn a_claim_racing_the_recording_of_its_id_reads_the_entry() {
    use sqlx::Connection as _;
    let (guard, store) = support::open(Backend::Postgres).await;
    let support::Guard::Database(db) = &guard else {
        unreachable!("a PostgreSQL guard")
    };
    for n in ["a", "b"] {
        store.cluster().register_node(&alive(n)).await.unwrap();
    }
    let claimed = store
        .delegation()
        .claim_continuation("p", "k", "a", "c1")
        .await
        .unwrap();
    assert_eq!(claimed, ContinuationClaim::Claimed);
    // Node a records the id, as `put_ledger` does, and has not committed yet.
    let mut recording = sqlx::PgConnection::connect(&db.url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut recording).await.unwrap();
    sqlx::query(
        "INSERT INTO continuation_ledger (scope, continuation_id, task_id, action, message, \
         result, created_at) VALUES ('p', 'k', 't1', 'close', NULL, '{\"ok\":true}', 1)",
    )
    .execute(&mut recording)
    .await
    .unwrap();
    sqlx::query("DELETE FROM continuation_claims WHERE scope = 'p' AND continuation_id = 'k'")
        .execute(&mut recording)
        .await
        .unwrap();
    // Node b claims meanwhile: it waits for the recording transaction's row.
    let racing = {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .delegation()
                .claim_continuation("p", "k", "b", "c2")
                .await
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        !racing.is_finished(),
        "the claim waits for the recording transaction"
    );
    sqlx::query("COMMIT").execute(&mut recording).await.unwrap();
    let got = tokio::time::timeout(std::time::Duration::from_secs(10), racing)
        .await
        .expect("the racing claim answers")
        .unwrap()
        .unwrap();
    assert!(
        matches!(&got, ContinuationClaim::Recorded(e) if e.task_id.as_str() == "t1"),
        "the racing claim must read the entry: {got:?}"
    );
    // And it left no claim behind.
    let (claims,): (i64,) = sqlx::query_as("SELECT count(*) FROM continuation_claims")
        .fetch_one(&mut recording)
        .await
        .unwrap();
    assert_eq!(claims, 0);
}
