//! Group commit: appends of many sessions at once share transactions (see
//! `tether-store/src/append.rs`) with the same result as one by one: every batch atomic,
//! gap-free `seq` per session in the order each session appended, envelopes equal to what
//! is stored, published once each in commit order; a batch for a missing session fails
//! alone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::time::Duration;

use tether_proto::*;
use tether_store::*;

#[macro_use]
mod support;
use support::Backend;

const SESSIONS: usize = 40;
const ROUNDS: usize = 25;

fn sid(i: usize) -> SessionId {
    format!("s{i}").into()
}

fn cid(i: usize) -> ConversationId {
    format!("c{i}").into()
}

async fn store_with_sessions(b: Backend, n: usize) -> (support::Guard, Store) {
    let (dir, store) = support::open(b).await;
    for i in 0..n {
        let c = cid(i);
        store
            .conversations()
            .create_conversation(&tether_store::NewConversation {
                id: &c,
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
            id: sid(i),
            conversation_id: c,
            agent: "fake".into(),
            model: None,
            cwd: "/tmp".into(),
        };
        store
            .conversations()
            .start_session(&s, NewSessionReason::Unbound, None)
            .await
            .unwrap();
    }
    (dir, store)
}

fn deltas(session: usize, round: usize, n: usize) -> Vec<EventPayload> {
    (0..n)
        .map(|k| EventPayload::MessageDelta {
            text: format!("s{session} r{round} k{k}"),
        })
        .collect()
}

async fn within<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .expect("timed out")
}

async fn concurrent_sessions_append_as_if_one_by_one(b: Backend) {
    let (_d, store) = store_with_sessions(b, SESSIONS).await;
    // One follower per conversation, from the start.
    let mut followers = Vec::new();
    for i in 0..SESSIONS {
        followers.push(
            store
                .events()
                .follow(Scope::Conversation(cid(i)), 0)
                .await
                .unwrap(),
        );
    }
    let tasks: Vec<_> = (0..SESSIONS)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut returned = Vec::new();
                for round in 0..ROUNDS {
                    // Sizes 1..=5: single events and batches mix in one group.
                    let n = 1 + (i + round) % 5;
                    let evs = store
                        .events()
                        .append_events(&sid(i), Some(&"t".into()), &deltas(i, round, n))
                        .await
                        .unwrap();
                    assert_eq!(evs.len(), n);
                    returned.extend(evs);
                }
                returned
            })
        })
        .collect();
    let mut all_returned = HashMap::new();
    for (i, t) in tasks.into_iter().enumerate() {
        all_returned.insert(i, within(t).await.unwrap());
    }
    let stats = store.append_stats();
    assert_eq!(stats.batches, (SESSIONS * ROUNDS) as u64);
    assert!(
        stats.commits < stats.batches / 2,
        "concurrent appends share commits: {stats:?}"
    );
    for i in 0..SESSIONS {
        let returned = &all_returned[&i];
        let stored = store
            .events()
            .session_events(&sid(i), 0, 10_000)
            .await
            .unwrap();
        let sid = sid(i);
        // seq 1 is session_started.
        assert_eq!(&stored[1..], &returned[..], "{sid}: returned = stored");
        assert_eq!(
            stored.iter().map(|e| e.seq).collect::<Vec<_>>(),
            (1..=stored.len() as i64).collect::<Vec<_>>(),
            "{sid}: gap-free"
        );
        assert!(
            stored.windows(2).all(|w| w[0].id < w[1].id),
            "{sid}: ids follow seq"
        );
        let texts: Vec<String> = returned
            .iter()
            .map(|e| match &e.payload {
                EventPayload::MessageDelta { text } => text.clone(),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        let expected: Vec<String> = (0..ROUNDS)
            .flat_map(|round| {
                let n = 1 + (i + round) % 5;
                (0..n).map(move |k| format!("s{i} r{round} k{k}"))
            })
            .collect();
        assert_eq!(texts, expected, "{sid}: in the order appended");
        assert!(returned.iter().all(|e| e.conversation_id == cid(i)));
    }
    // Each follower got its conversation's events exactly once, in order.
    for (i, f) in followers.iter_mut().enumerate() {
        let want = store
            .events()
            .session_events(&sid(i), 0, 10_000)
            .await
            .unwrap();
        let mut got = Vec::new();
        while got.len() < want.len() {
            let batch = within(f.next()).await.unwrap();
            got.extend(batch.events().iter().cloned());
        }
        assert_eq!(got, want, "follower of c{i}");
    }
    assert!(store.integrity_check().await.unwrap());
}

async fn a_missing_session_in_a_group_fails_alone(b: Backend) {
    let (_d, store) = store_with_sessions(b, 8).await;
    let mut tasks = Vec::new();
    for round in 0..20 {
        for i in 0..8 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                store
                    .events()
                    .append_events(&sid(i), None, &deltas(i, round, 2))
                    .await
                    .map(|evs| evs.len())
            }));
        }
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            store
                .events()
                .append_events(&"gone".into(), None, &deltas(99, round, 3))
                .await
                .map(|evs| evs.len())
        }));
    }
    let mut ok = 0;
    let mut failed = 0;
    for t in tasks {
        match within(t).await.unwrap() {
            Ok(2) => ok += 1,
            Ok(n) => panic!("stored {n} events of a batch of 2"),
            Err(_) => failed += 1,
        }
    }
    assert_eq!((ok, failed), (160, 20));
    for i in 0..8 {
        let seqs: Vec<i64> = store
            .events()
            .session_events(&sid(i), 0, 1000)
            .await
            .unwrap()
            .iter()
            .map(|e| e.seq)
            .collect();
        assert_eq!(seqs, (1..=41).collect::<Vec<_>>(), "s{i}");
    }
    assert!(
        store
            .events()
            .session_events(&"gone".into(), 0, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

/// A caller that goes away while its append waits or leads a group commit does not take
/// the other callers' batches with it: every caller that stays gets its events stored.
async fn callers_that_go_away_do_not_lose_the_others_batches(b: Backend) {
    const N: usize = 8;
    let (_d, store) = store_with_sessions(b, N).await;
    let mut kept = [0usize; N];
    for round in 0..40 {
        let tasks: Vec<_> = (0..N)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move {
                    store
                        .events()
                        .append_events(&sid(i), None, &deltas(i, round, 3))
                        .await
                })
            })
            .collect();
        tokio::task::yield_now().await;
        for (i, t) in tasks.into_iter().enumerate() {
            if i % 2 == 0 {
                t.abort();
                // Aborted before or after storing: either way its batch is whole or absent.
                let _ = within(t).await;
            } else {
                let evs = within(t)
                    .await
                    .unwrap()
                    .expect("a caller that stayed is stored");
                assert_eq!(evs.len(), 3);
                kept[i] += 3;
            }
        }
    }
    for (i, kept) in kept.iter().enumerate() {
        let evs = store
            .events()
            .session_events(&sid(i), 0, 10_000)
            .await
            .unwrap();
        // session_started, then whole batches of 3, gap-free.
        assert_eq!((evs.len() - 1) % 3, 0, "s{i}: a batch was cut");
        assert_eq!(
            evs.iter().map(|e| e.seq).collect::<Vec<_>>(),
            (1..=evs.len() as i64).collect::<Vec<_>>()
        );
        if i % 2 == 1 {
            assert_eq!(evs.len() - 1, *kept, "s{i}");
        }
    }
}

contract!(
    multi_thread;
    concurrent_sessions_append_as_if_one_by_one,
    a_missing_session_in_a_group_fails_alone,
    callers_that_go_away_do_not_lose_the_others_batches,
);
