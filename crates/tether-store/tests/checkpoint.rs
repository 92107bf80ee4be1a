//! The WAL is copied into the database file by the background checkpointer (commits do
//! not checkpoint), a WAL grown past its limit is emptied, and nothing is lost across
//! close and reopen.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use tether_proto::*;
use tether_store::*;

fn size(p: &std::path::Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

async fn with_a_session(dir: &std::path::Path) -> Store {
    let store = Store::open(dir).await.unwrap();
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
    store
}

#[tokio::test]
async fn the_wal_reaches_the_database_file_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let store = with_a_session(dir.path()).await;
    let db = dir.path().join("tether.db");
    let before = size(&db);
    let text = "x".repeat(1000);
    for _ in 0..40 {
        let batch: Vec<EventPayload> = (0..64)
            .map(|_| EventPayload::MessageDelta { text: text.clone() })
            .collect();
        store
            .events()
            .append_events(&"s1".into(), None, &batch)
            .await
            .unwrap();
    }
    // About 2.5 MB of events: they reach the database file within a few checkpoints.
    let deadline = Instant::now() + Duration::from_secs(15);
    while size(&db) < before + 2_000_000 {
        assert!(
            Instant::now() < deadline,
            "the WAL was not checkpointed: db file {} bytes (was {before})",
            size(&db)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    store.close().await;
    let store = Store::open(dir.path()).await.unwrap();
    let events = store
        .events()
        .session_events(&"s1".into(), 0, 5000)
        .await
        .unwrap();
    assert_eq!(events.len(), 1 + 40 * 64);
    assert!(store.integrity_check().await.unwrap());
}

/// A passive checkpoint copies the WAL but never shortens it (only a writer that finds it
/// all copied, with no reader in it, starts it over, which overlapping readers or a
/// daemon killed every second can put off for ever: the soak met a WAL of 9.5 GB). Past
/// 64 MiB the checkpointer empties it.
#[tokio::test]
async fn a_wal_grown_past_its_limit_is_emptied() {
    let dir = tempfile::tempdir().unwrap();
    let store = with_a_session(dir.path()).await;
    let wal = dir.path().join("tether.db-wal");
    let text = "y".repeat(10_000);
    // About 80 MB of events in 125 commits, faster than the checkpointer empties them.
    for _ in 0..125 {
        let batch: Vec<EventPayload> = (0..64)
            .map(|_| EventPayload::MessageDelta { text: text.clone() })
            .collect();
        store
            .events()
            .append_events(&"s1".into(), None, &batch)
            .await
            .unwrap();
    }
    let grown = size(&wal);
    let deadline = Instant::now() + Duration::from_secs(20);
    while size(&wal) > 1_000_000 {
        assert!(
            Instant::now() < deadline,
            "the WAL stayed at {} bytes (it grew to {grown})",
            size(&wal)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        store
            .events()
            .session_events(&"s1".into(), 0, 10_000)
            .await
            .unwrap()
            .len(),
        1 + 125 * 64
    );
    store.close().await;
}

/// While a truncating checkpoint waits for a reader, it holds the write lock; writers
/// wait for it (their transactions begin `IMMEDIATE`, with the busy handler) and never
/// fail. Deferred, a writer holding a read snapshot was refused at once with
/// `SQLITE_BUSY` ("database is locked"): the bench's store-only ingest failed on it and
/// the daemon's turns held their events as in an outage.
#[tokio::test]
async fn writers_wait_for_a_truncating_checkpoint_and_never_fail() {
    use sqlx::{ConnectOptions as _, Connection as _};
    let dir = tempfile::tempdir().unwrap();
    let store = with_a_session(dir.path()).await;
    let text = "z".repeat(10_000);
    let batch: Vec<EventPayload> = (0..64)
        .map(|_| EventPayload::MessageDelta { text: text.clone() })
        .collect();
    // Past the limit (about 80 MB), so every tick tries to empty the WAL.
    for _ in 0..125 {
        store
            .events()
            .append_events(&"s1".into(), None, &batch)
            .await
            .unwrap();
    }
    // A reader keeps a snapshot open for 3 s: each truncating checkpoint waits its
    // 250 ms for it, holding the write lock, and gives up.
    let mut reader = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(dir.path().join("tether.db"))
        .read_only(true)
        .connect()
        .await
        .unwrap();
    let mut snapshot = reader.begin().await.unwrap();
    let _: (i64,) = sqlx::query_as("SELECT count(*) FROM events")
        .fetch_one(&mut *snapshot)
        .await
        .unwrap();
    let small: Vec<EventPayload> = (0..8)
        .map(|_| EventPayload::MessageDelta { text: "w".into() })
        .collect();
    let until = Instant::now() + Duration::from_secs(3);
    let mut appended = 0;
    while Instant::now() < until {
        tokio::time::timeout(
            Duration::from_secs(10),
            store.events().append_events(&"s1".into(), None, &small),
        )
        .await
        .expect("an append answers")
        .unwrap_or_else(|e| panic!("append {appended} failed: {e}"));
        appended += 1;
    }
    snapshot.rollback().await.unwrap();
    reader.close().await.unwrap();
    assert!(appended > 10, "only {appended} appends in 3 s");
    store.close().await;
}
