//! The tail of other nodes' commits (issue 12, PostgreSQL only): two stores on one
//! database are two nodes; what one commits reaches the other's followers complete, in
//! order and once, by notice or by polling alone, and a claim hands over what the
//! previous owner committed before this node's own commits.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tether_proto::*;
use tether_store::*;

// PostgreSQL only: the contract macro (one test per backend) is not used here.
#[allow(unused_macros)]
mod support;
use support::Backend;

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
    let s = NewSession {
        id: format!("{id}-s").into(),
        conversation_id: id.into(),
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

async fn append(store: &Store, conv: &str, texts: &[&str]) {
    let batch: Vec<EventPayload> = texts.iter().map(|t| delta(t)).collect();
    store
        .events()
        .append_events(&format!("{conv}-s").into(), None, &batch)
        .await
        .unwrap();
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

async fn quiet(f: &mut Follower) {
    let more = tokio::time::timeout(Duration::from_millis(700), f.next()).await;
    assert!(more.is_err(), "unexpected events: {more:?}");
}

fn texts(events: &[EventEnvelope]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::MessageDelta { text } => Some(text.clone()),
            _ => None,
        })
        .collect()
}

async fn two_nodes(
    notify: bool,
    poll: Duration,
) -> (support::Guard, Store, Store, [TailHandle; 2]) {
    let (guard, a) = support::open(Backend::Postgres).await;
    let b = support::reopen(&guard).await;
    let options = TailOptions { poll, notify };
    let ta = a.start_tail(options.clone()).await.unwrap().unwrap();
    let tb = b.start_tail(options).await.unwrap().unwrap();
    (guard, a, b, [ta, tb])
}

async fn events_of_one_node_reach_the_other(notify: bool) {
    let (_g, a, b, _tails) = two_nodes(notify, Duration::from_millis(200)).await;
    conversation(&a, "c").await;
    append(&a, "c", &["1", "2"]).await;
    // Resumes after the first event stored: the rest, then what A commits live.
    // (The conversation's first event is the session's start, then "1".)
    let first = a
        .events()
        .conversation_events(&"c".into(), 0, 2)
        .await
        .unwrap()[1]
        .id;
    let mut f = b
        .events()
        .follow(Scope::Conversation("c".into()), first)
        .await
        .unwrap();
    let mut mine = b
        .events()
        .follow(Scope::Conversation("c".into()), 0)
        .await
        .unwrap();
    // What is stored already comes from B's own reads of the store...
    assert_eq!(texts(&take(&mut f, 1).await), ["2"]);
    assert_eq!(texts(&take(&mut mine, 3).await), ["1", "2"]);
    // ...what A commits from now on through B's tail.
    for i in 3..=40 {
        append(&a, "c", &[&i.to_string()]).await;
    }
    let want: Vec<String> = (3..=40).map(|i| i.to_string()).collect();
    let got = take(&mut f, want.len()).await;
    assert_eq!(texts(&got), want);
    assert!(got.windows(2).all(|w| w[0].id < w[1].id), "in id order");
    quiet(&mut f).await;
    assert_eq!(texts(&take(&mut mine, want.len()).await), want);
    quiet(&mut mine).await;
    let stats = b.tail_stats();
    assert!(stats.events_tailed >= 38, "{stats:?}");
    if notify {
        assert!(stats.notices_received > 0, "{stats:?}");
    } else {
        assert_eq!(stats.notices_received, 0, "{stats:?}");
        assert!(stats.polls > 0, "{stats:?}");
    }
}

#[tokio::test]
async fn events_committed_on_one_node_reach_the_others_followers_by_notice() {
    events_of_one_node_reach_the_other(true).await;
}

#[tokio::test]
async fn events_committed_on_one_node_reach_the_others_followers_by_polling_alone() {
    events_of_one_node_reach_the_other(false).await;
}

#[tokio::test]
async fn a_claim_hands_over_the_previous_owners_events_before_this_nodes_own() {
    // A poll that never comes within the test, no notices: only the claim can sync.
    let (_g, a, b, _tails) = two_nodes(false, Duration::from_secs(3600)).await;
    conversation(&a, "c").await;
    let mut f = b
        .events()
        .follow(Scope::Conversation("c".into()), 0)
        .await
        .unwrap();
    append(&a, "c", &["a1"]).await;
    // The session's start, then a1.
    assert_eq!(texts(&take(&mut f, 2).await), ["a1"]);
    append(&a, "c", &["a2", "a3"]).await;
    assert!(matches!(
        b.cluster()
            .claim_conversation(&"c".into(), "node-b", now_ms())
            .await
            .unwrap(),
        Claim::Claimed { .. }
    ));
    append(&b, "c", &["b1"]).await;
    assert_eq!(texts(&take(&mut f, 3).await), ["a2", "a3", "b1"]);
}

#[tokio::test]
async fn a_list_change_on_one_node_reaches_the_others_list_followers() {
    for notify in [true, false] {
        let (_g, a, b, _tails) = two_nodes(notify, Duration::from_millis(200)).await;
        conversation(&a, "c").await;
        let mut changes = b.conversations().conversation_changes();
        a.conversations()
            .update_conversation(&"c".into(), Some("renamed"), None)
            .await
            .unwrap();
        let got = tokio::time::timeout(Duration::from_secs(10), changes.recv())
            .await
            .expect("no list change arrived")
            .unwrap();
        assert_eq!(got.as_str(), "c", "notify {notify}");
    }
}
