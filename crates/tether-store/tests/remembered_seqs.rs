//! SQLite stores a group of events with the `seq`s it remembers from its own commits
//! (`events/numbers.rs`): one `INSERT`, no read. Those must never be trusted past the
//! database: another writer of the same file (a second store on it) moves a session on,
//! and the next group still gets the next `seq`s, gap-free, with envelopes equal to the
//! stored rows; and several sessions in one group each continue their own numbering.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tether_proto::*;
use tether_store::*;

// SQLite only (the memory is SQLite's): `contract!` is not used here.
#[allow(unused_macros)]
mod support;
use support::{Backend, chat_with_session};

fn deltas(tag: &str, n: usize) -> Vec<EventPayload> {
    (0..n)
        .map(|i| EventPayload::MessageDelta {
            text: format!("{tag}{i}"),
        })
        .collect()
}

async fn append(store: &Store, session: &str, events: &[EventPayload]) -> Vec<EventEnvelope> {
    tokio::time::timeout(
        Duration::from_secs(10),
        store
            .events()
            .append_events(&session.into(), Some(&"t1".into()), events),
    )
    .await
    .expect("append timed out")
    .unwrap()
}

/// Every stored event of `session` equals what the appends returned, `seq` 1..=n.
async fn check(store: &Store, session: &str, returned: &[EventEnvelope]) {
    let stored = store
        .events()
        .session_events(&session.into(), 0, 10_000)
        .await
        .unwrap();
    assert_eq!(
        stored.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=stored.len() as i64).collect::<Vec<_>>(),
        "gap-free seqs"
    );
    for ev in returned {
        let row = stored
            .iter()
            .find(|s| s.id == ev.id)
            .expect("returned event stored");
        assert_eq!(row, ev);
    }
}

#[tokio::test]
async fn another_writer_of_the_file_never_makes_a_remembered_seq_stick() {
    let (guard, a) = support::open(Backend::Sqlite).await;
    chat_with_session(&a, "c1", "s1").await;
    let mut returned = append(&a, "s1", &deltas("a", 64)).await;
    // Remembered by `a` now: s1's last seq is 65. `b` writes 5 more behind its back.
    let b = support::reopen(&guard).await;
    returned.extend(append(&b, "s1", &deltas("b", 5)).await);
    returned.extend(append(&b, "s1", &deltas("b1", 1)).await);
    // `a` trusts 65 first, is refused by the unique index, and reads the seq instead.
    let again = append(&a, "s1", &deltas("c", 64)).await;
    assert_eq!(again.first().map(|e| e.seq), Some(72));
    returned.extend(again);
    // Remembered right again: the next group goes on from 135.
    let next = append(&a, "s1", &deltas("d", 3)).await;
    assert_eq!(
        next.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [136, 137, 138]
    );
    returned.extend(next);
    check(&a, "s1", &returned).await;
    b.close().await;
    a.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sessions_sharing_group_commits_keep_their_own_numbering() {
    let (_guard, store) = support::open(Backend::Sqlite).await;
    let names: Vec<String> = (0..6).map(|i| format!("s{i}")).collect();
    for (i, s) in names.iter().enumerate() {
        chat_with_session(&store, &format!("c{i}"), s).await;
    }
    // Six writers at once, each many small batches: their batches share group commits.
    let mut tasks = Vec::new();
    for s in names.clone() {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            for round in 0..40 {
                got.extend(
                    append(&store, &s, &deltas(&format!("{s}-{round}-"), 1 + round % 5)).await,
                );
            }
            got
        }));
    }
    for (s, task) in names.iter().zip(tasks) {
        let got = tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("writer timed out")
            .unwrap();
        assert_eq!(got.len(), (0..40).map(|r| 1 + r % 5).sum::<usize>());
        check(&store, s, &got).await;
    }
    store.close().await;
}
