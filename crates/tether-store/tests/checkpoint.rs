//! The WAL is copied into the database file by the background checkpointer (commits do
//! not checkpoint), and nothing is lost across close and reopen.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use tether_proto::*;
use tether_store::*;

fn size(p: &std::path::Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

#[tokio::test]
async fn the_wal_reaches_the_database_file_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).await.unwrap();
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
