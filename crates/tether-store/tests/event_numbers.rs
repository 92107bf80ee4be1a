//! The event table's redesign (issue 33 item 1, SQLite migration 0030, PostgreSQL 0022)
//! converts a store of the schema before: every event keeps its id, session, conversation
//! and `seq`; appends go on gap-free after them with larger ids; new conversations and
//! sessions get numbers of their own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::borrow::Cow;
use std::path::Path;

use sqlx::Connection;
use sqlx::migrate::Migrator;
use tether_proto::{EventPayload, SessionId};

#[macro_use]
mod support;
use support::{Backend, Guard};

contract!(a_store_of_the_schema_before_is_converted);

/// The migrations before the redesign, from the source tree.
async fn before(dir: &str, last: i64) -> Migrator {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut m = Migrator::new(path.as_path()).await.unwrap();
    let kept: Vec<_> = m
        .migrations
        .iter()
        .filter(|m| m.version <= last)
        .cloned()
        .collect();
    m.migrations = Cow::Owned(kept);
    m
}

/// Rows of the schema before: two conversations, three sessions, events interleaved
/// across them (ids 1..=7), each session's `last_seq` counter at its last event.
const OLD_ROWS: &[&str] = &[
    "INSERT INTO conversations (id, kind, title, agent, cwd, created_at, updated_at) \
     VALUES ('c1', 'chat', 'one', 'fake', '/w', 1, 1), ('c2', 'chat', 'two', 'fake', '/w', 2, 2)",
    "INSERT INTO sessions (id, conversation_id, agent, cwd, status, last_seq, created_at, updated_at) \
     VALUES ('s1', 'c1', 'fake', '/w', 'dormant', 3, 1, 1), \
     ('s2', 'c2', 'fake', '/w', 'dormant', 2, 2, 2), \
     ('s3', 'c1', 'fake', '/w', 'dormant', 2, 3, 3)",
    "INSERT INTO events (id, session_id, conversation_id, seq, turn_id, at, kind, payload) VALUES \
     (1, 's1', 'c1', 1, NULL, 10, 'status', '{\"type\":\"status\",\"text\":\"a\"}'), \
     (2, 's2', 'c2', 1, NULL, 11, 'status', '{\"type\":\"status\",\"text\":\"b\"}'), \
     (3, 's1', 'c1', 2, 't1', 12, 'status', '{\"type\":\"status\",\"text\":\"c\"}'), \
     (4, 's3', 'c1', 1, NULL, 13, 'status', '{\"type\":\"status\",\"text\":\"d\"}'), \
     (5, 's2', 'c2', 2, NULL, 14, 'status', '{\"type\":\"status\",\"text\":\"e\"}'), \
     (6, 's1', 'c1', 3, 't1', 15, 'status', '{\"type\":\"status\",\"text\":\"f\"}'), \
     (7, 's3', 'c1', 2, NULL, 16, 'status', '{\"type\":\"status\",\"text\":\"g\"}')",
];

async fn a_store_of_the_schema_before_is_converted(b: Backend) {
    let (guard, store) = support::open(b).await;
    store.close().await;
    // The same place, emptied and migrated to the schema before, with its rows.
    match &guard {
        Guard::Dir(dir) => {
            for f in ["tether.db", "tether.db-wal", "tether.db-shm"] {
                let _ = std::fs::remove_file(dir.path().join(f));
            }
            let url = format!(
                "sqlite://{}?mode=rwc",
                dir.path().join("tether.db").display()
            );
            let mut c = sqlx::SqliteConnection::connect(&url).await.unwrap();
            before("migrations", 29).await.run(&mut c).await.unwrap();
            for sql in OLD_ROWS {
                sqlx::query(sql).execute(&mut c).await.unwrap();
            }
            c.close().await.unwrap();
        }
        Guard::Database(db) => {
            let mut c = sqlx::PgConnection::connect(&db.url).await.unwrap();
            for sql in ["DROP SCHEMA public CASCADE", "CREATE SCHEMA public"] {
                sqlx::query(sql).execute(&mut c).await.unwrap();
            }
            before("migrations/postgres", 21)
                .await
                .run(&mut c)
                .await
                .unwrap();
            for sql in OLD_ROWS {
                sqlx::query(sql).execute(&mut c).await.unwrap();
            }
            // PostgreSQL's identity was not moved by explicit ids.
            sqlx::query("SELECT setval(pg_get_serial_sequence('events', 'id'), 7)")
                .execute(&mut c)
                .await
                .unwrap();
            c.close().await.unwrap();
        }
    }
    let store = support::reopen(&guard).await;
    let events = store.events();

    // Every event where it was, read by conversation and by session.
    let c1 = events
        .conversation_events(&"c1".into(), 0, 100)
        .await
        .unwrap();
    let got: Vec<(i64, &str, i64)> = c1
        .iter()
        .map(|e| (e.id, e.session_id.as_str(), e.seq))
        .collect();
    assert_eq!(
        got,
        [
            (1, "s1", 1),
            (3, "s1", 2),
            (4, "s3", 1),
            (6, "s1", 3),
            (7, "s3", 2)
        ]
    );
    assert!(c1.iter().all(|e| e.conversation_id.as_str() == "c1"));
    assert_eq!(c1[1].turn_id.as_ref().map(|t| t.as_str()), Some("t1"));
    assert!(matches!(&c1[3].payload, EventPayload::Status { text } if text == "f"));
    let s2 = events.session_events(&"s2".into(), 0, 100).await.unwrap();
    let got: Vec<(i64, i64, &str)> = s2
        .iter()
        .map(|e| (e.id, e.seq, e.conversation_id.as_str()))
        .collect();
    assert_eq!(got, [(2, 1, "c2"), (5, 2, "c2")]);

    // Appends go on after them: one on its own, a batch, each gap-free.
    let status = |t: &str| EventPayload::Status { text: t.into() };
    let one = events
        .append_events(&SessionId::from("s1"), None, &[status("h")])
        .await
        .unwrap();
    assert_eq!((one[0].seq, one[0].conversation_id.as_str()), (4, "c1"));
    assert!(one[0].id > 7);
    let batch = events
        .append_events(&SessionId::from("s3"), None, &[status("i"), status("j")])
        .await
        .unwrap();
    assert_eq!(
        batch.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [3, 4],
        "{batch:?}"
    );
    assert!(batch[0].id > one[0].id);
    let c1 = events
        .conversation_events(&"c1".into(), 7, 100)
        .await
        .unwrap();
    assert_eq!(c1.len(), 3);

    // A conversation and session made now get numbers of their own: their events are
    // theirs alone.
    let (c3, s4) = support_session(&store, "c3", "s4").await;
    let own = events.session_events(&s4, 0, 100).await.unwrap();
    assert!(!own.is_empty());
    assert!(
        own.iter()
            .all(|e| e.conversation_id == c3 && e.session_id == s4)
    );
    let c1_after = events
        .conversation_events(&"c1".into(), 0, 100)
        .await
        .unwrap();
    assert_eq!(c1_after.len(), 8);
    store.close().await;
}

/// A conversation with a started session, made through the store.
async fn support_session(
    store: &tether_store::Store,
    conversation: &str,
    session: &str,
) -> (tether_proto::ConversationId, SessionId) {
    let c = tether_proto::ConversationId::from(conversation);
    store
        .conversations()
        .create_conversation(&tether_store::NewConversation {
            id: &c,
            kind: tether_proto::ConversationKind::Chat,
            title: "three",
            agent: "fake",
            model: None,
            cwd: "/w",
            parent_conversation_id: None,
            owner_id: None,
            visibility: tether_proto::Visibility::Private,
        })
        .await
        .unwrap();
    let s = SessionId::from(session);
    store
        .conversations()
        .start_session(
            &tether_store::NewSession {
                id: s.clone(),
                conversation_id: c.clone(),
                agent: "fake".into(),
                model: None,
                cwd: "/w".into(),
            },
            tether_proto::NewSessionReason::Unbound,
            None,
        )
        .await
        .unwrap();
    (c, s)
}
