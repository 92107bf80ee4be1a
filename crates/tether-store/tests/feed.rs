//! The event feed (`Events::follow`): commit order per conversation, scopes, resume
//! points, recovery after lagging, and topics that go with their last follower.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tether_proto::*;
use tether_store::*;

#[macro_use]
mod support;
use support::Backend;

async fn open(b: Backend) -> (support::Guard, Store) {
    support::open(b).await
}

async fn conversation(store: &Store, id: &str) {
    store
        .conversations()
        .create_conversation(&tether_store::NewConversation {
            id: &id.into(),
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
}

async fn session(store: &Store, conv: &str, id: &str) {
    let s = NewSession {
        id: id.into(),
        conversation_id: conv.into(),
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

fn delta(text: &str) -> EventPayload {
    EventPayload::MessageDelta { text: text.into() }
}

/// Reads from `f` until it has delivered `n` events (failing after 10 s).
async fn take(f: &mut Follower, n: usize) -> Vec<EventEnvelope> {
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), async {
        while out.len() < n {
            out.extend(f.next().await.unwrap().events().iter().cloned());
        }
    })
    .await
    .expect("the follower delivered too few events");
    out
}

/// Nothing more arrives within a short while.
async fn quiet(f: &mut Follower) {
    let more = tokio::time::timeout(Duration::from_millis(200), f.next()).await;
    assert!(more.is_err(), "unexpected events: {more:?}");
}

/// Every stored event of the conversation, by id.
async fn stored(store: &Store, conv: &str) -> Vec<EventEnvelope> {
    store
        .events()
        .conversation_events(&conv.into(), 0, 100_000)
        .await
        .unwrap()
}

async fn two_sessions_of_one_conversation_arrive_in_commit_order(b: Backend) {
    let (_d, store) = open(b).await;
    conversation(&store, "c").await;
    session(&store, "c", "s1").await;
    session(&store, "c", "s2").await;
    // Two writers at once, one per session, interleaving their commits.
    let writers = ["s1", "s2"].map(|sid| {
        let store = store.clone();
        tokio::spawn(async move {
            for i in 0..50 {
                let n = 1 + i % 3;
                let batch: Vec<_> = (0..n).map(|k| delta(&format!("{sid}-{i}-{k}"))).collect();
                store
                    .events()
                    .append_events(&sid.into(), None, &batch)
                    .await
                    .unwrap();
            }
        })
    });
    for w in writers {
        w.await.unwrap();
    }
    // A follower from now on sees none of that…
    let mut now = store
        .events()
        .follow_from_now(Scope::Conversation("c".into()))
        .await
        .unwrap();
    quiet(&mut now).await;

    let mut f = store
        .events()
        .follow(Scope::Conversation("c".into()), 0)
        .await
        .unwrap();
    let all = stored(&store, "c").await;
    let got = take(&mut f, all.len()).await;
    assert_eq!(got, all, "replay is the stored order");

    // Live: commits of both sessions, delivered in commit (id) order.
    let writers = ["s1", "s2"].map(|sid| {
        let store = store.clone();
        tokio::spawn(async move {
            let mut ids = Vec::new();
            for i in 0..100 {
                let evs = store
                    .events()
                    .append_events(&sid.into(), None, &[delta(&format!("{i}")), delta("x")])
                    .await
                    .unwrap();
                ids.extend(evs.iter().map(|e| e.id));
            }
            ids
        })
    });
    let live = take(&mut f, 400).await;
    let mut written = Vec::new();
    for w in writers {
        written.extend(w.await.unwrap());
    }
    let ids: Vec<i64> = live.iter().map(|e| e.id).collect();
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    assert_eq!(ids, sorted, "delivered in commit order");
    written.sort_unstable();
    assert_eq!(ids, written, "every event, once");
    assert!(live.iter().any(|e| e.session_id == "s1") && live.iter().any(|e| e.session_id == "s2"));
    quiet(&mut f).await;
    // …but all of this, the same way.
    assert_eq!(take(&mut now, 400).await, live);
}

async fn a_session_scope_delivers_only_that_sessions_events(b: Backend) {
    let (_d, store) = open(b).await;
    conversation(&store, "c").await;
    session(&store, "c", "s1").await;
    session(&store, "c", "s2").await;
    let before = store
        .events()
        .append_events(&"s1".into(), None, &[delta("a")])
        .await
        .unwrap();
    store
        .events()
        .append_events(&"s2".into(), None, &[delta("b")])
        .await
        .unwrap();
    let mut f = store
        .events()
        .follow(Scope::Session("s1".into()), 0)
        .await
        .unwrap();
    store
        .events()
        .append_events(&"s2".into(), None, &[delta("c"), delta("d")])
        .await
        .unwrap();
    let after = store
        .events()
        .append_events(&"s1".into(), None, &[delta("e"), delta("f")])
        .await
        .unwrap();
    let got = take(&mut f, 4).await;
    let stored_s1: Vec<_> = stored(&store, "c")
        .await
        .into_iter()
        .filter(|e| e.session_id == "s1")
        .collect();
    assert_eq!(got, stored_s1);
    assert!(got.iter().all(|e| e.session_id == "s1"));
    assert_eq!(got.last().unwrap().id, after[1].id);
    assert!(got.contains(&before[0]));
    quiet(&mut f).await;

    let unknown = store
        .events()
        .follow(Scope::Session("nope".into()), 0)
        .await;
    assert!(unknown.is_err(), "an unknown session cannot be followed");
}

async fn resuming_after_an_event_replays_exactly_the_rest(b: Backend) {
    let (_d, store) = open(b).await;
    conversation(&store, "c").await;
    conversation(&store, "other").await;
    session(&store, "c", "s1").await;
    session(&store, "other", "o1").await;
    for i in 0..700 {
        store
            .events()
            .append_events(&"s1".into(), None, &[delta(&format!("{i}"))])
            .await
            .unwrap();
        if i % 7 == 0 {
            store
                .events()
                .append_events(&"o1".into(), None, &[delta("o")])
                .await
                .unwrap();
        }
    }
    let all = stored(&store, "c").await;
    let cut = all[345].id;
    let mut f = store
        .events()
        .follow(Scope::Conversation("c".into()), cut)
        .await
        .unwrap();
    let rest = take(&mut f, all.len() - 346).await;
    assert_eq!(
        rest,
        all[346..].to_vec(),
        "after the resume point, in order, each once"
    );
    assert_eq!(f.last_id(), all.last().unwrap().id);
    let next = store
        .events()
        .append_events(&"s1".into(), None, &[delta("live")])
        .await
        .unwrap();
    assert_eq!(take(&mut f, 1).await, next);
    quiet(&mut f).await;
}

async fn a_lagging_follower_recovers_from_the_store_without_gaps_or_duplicates(b: Backend) {
    let (_d, store) = open(b).await;
    conversation(&store, "c").await;
    session(&store, "c", "s1").await;
    let mut slow = store
        .events()
        .follow(Scope::Conversation("c".into()), 0)
        .await
        .unwrap();
    let mut fast = store
        .events()
        .follow(Scope::Conversation("c".into()), 0)
        .await
        .unwrap();
    // Far more commits than a topic buffers, while `slow` reads nothing.
    let mut delivered_fast = Vec::new();
    for i in 0..1500 {
        store
            .events()
            .append_events(&"s1".into(), None, &[delta(&format!("{i}"))])
            .await
            .unwrap();
        if i % 100 == 99 {
            delivered_fast.extend(take(&mut fast, 1 + i - delivered_fast.len()).await);
        }
    }
    let all = stored(&store, "c").await;
    let fast_rest = all.len() - delivered_fast.len();
    delivered_fast.extend(take(&mut fast, fast_rest).await);
    assert_eq!(delivered_fast, all);
    let got = take(&mut slow, all.len()).await;
    assert_eq!(got, all, "no gap, no duplicate after lagging");
    let next = store
        .events()
        .append_events(&"s1".into(), None, &[delta("live")])
        .await
        .unwrap();
    assert_eq!(
        take(&mut slow, 1).await,
        next,
        "live again after recovering"
    );
    quiet(&mut slow).await;
}

async fn a_conversations_topic_goes_with_its_last_follower(b: Backend) {
    let (_d, store) = open(b).await;
    conversation(&store, "c").await;
    conversation(&store, "d").await;
    session(&store, "c", "s1").await;
    assert_eq!(store.events().followed_conversations(), 0);
    // Commits nobody follows leave nothing behind.
    store
        .events()
        .append_events(&"s1".into(), None, &[delta("a")])
        .await
        .unwrap();
    assert_eq!(store.events().followed_conversations(), 0);

    let a = store
        .events()
        .follow(Scope::Conversation("c".into()), 0)
        .await
        .unwrap();
    let b = store
        .events()
        .follow(Scope::Session("s1".into()), 0)
        .await
        .unwrap();
    let d = store
        .events()
        .follow(Scope::Conversation("d".into()), 0)
        .await
        .unwrap();
    assert_eq!(
        store.events().followed_conversations(),
        2,
        "one topic per conversation"
    );
    drop(a);
    assert_eq!(
        store.events().followed_conversations(),
        2,
        "c still has a follower"
    );
    drop(b);
    assert_eq!(
        store.events().followed_conversations(),
        1,
        "c's topic went with its last follower"
    );
    drop(d);
    assert_eq!(store.events().followed_conversations(), 0);

    // A new follower after that starts a fresh topic and misses nothing.
    let mut again = store
        .events()
        .follow(Scope::Conversation("c".into()), 0)
        .await
        .unwrap();
    store
        .events()
        .append_events(&"s1".into(), None, &[delta("b")])
        .await
        .unwrap();
    let all = stored(&store, "c").await;
    assert_eq!(take(&mut again, all.len()).await, all);
}

async fn one_batch_is_shared_by_every_follower(b: Backend) {
    let (_d, store) = open(b).await;
    conversation(&store, "c").await;
    session(&store, "c", "s1").await;
    let mut followers = Vec::new();
    for _ in 0..3 {
        let mut f = store
            .events()
            .follow(Scope::Conversation("c".into()), 0)
            .await
            .unwrap();
        let n = stored(&store, "c").await.len();
        take(&mut f, n).await; // the replay
        followers.push(f);
    }
    store
        .events()
        .append_events(&"s1".into(), None, &[delta("a"), delta("b")])
        .await
        .unwrap();
    let mut batches = Vec::new();
    for f in &mut followers {
        batches.push(f.next().await.unwrap());
    }
    // Encoded once: the later followers get the first one's bytes.
    let first = batches[0].encoded(|evs| bytes::Bytes::from(format!("{}", evs.len())));
    for b in &batches[1..] {
        assert!(
            std::sync::Arc::ptr_eq(b, &batches[0]),
            "the same batch, not a copy"
        );
        assert_eq!(b.encoded(|_| bytes::Bytes::from_static(b"other")), first);
    }
}

/// A follower that fell behind takes what already waits without waiting
/// (`Follower::try_next`, what lets a slow SSE stream write several batches at once), in
/// order, and nothing when nothing waits.
async fn batches_waiting_are_taken_without_waiting(b: Backend) {
    let (_d, store) = open(b).await;
    conversation(&store, "c").await;
    session(&store, "c", "s1").await;
    let mut f = store
        .events()
        .follow_from_now(Scope::Conversation("c".into()))
        .await
        .unwrap();
    assert!(f.try_next().is_none(), "nothing waits yet");
    for i in 0..3 {
        store
            .events()
            .append_events(&"s1".into(), None, &[delta(&format!("d{i}"))])
            .await
            .unwrap();
    }
    let mut got = take(&mut f, 1).await;
    while let Some(batch) = f.try_next() {
        got.extend(batch.events().iter().cloned());
    }
    let texts: Vec<String> = got
        .iter()
        .map(|e| match &e.payload {
            EventPayload::MessageDelta { text } => text.clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(texts, ["d0", "d1", "d2"]);
    assert!(f.try_next().is_none());
    quiet(&mut f).await;
}

contract!(
    batches_waiting_are_taken_without_waiting,
    two_sessions_of_one_conversation_arrive_in_commit_order,
    a_session_scope_delivers_only_that_sessions_events,
    resuming_after_an_event_replays_exactly_the_rest,
    a_lagging_follower_recovers_from_the_store_without_gaps_or_duplicates,
    a_conversations_topic_goes_with_its_last_follower,
    one_batch_is_shared_by_every_follower,
);
