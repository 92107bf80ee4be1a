//! The store contract runs on both backends: every test is written once, as an `async fn`
//! taking the [`Backend`], and [`contract!`] makes one test per backend of it
//! (`<name>::sqlite`, `<name>::postgres`). PostgreSQL tests get a database of their own
//! (`tether_testkit::postgres`).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use tether_store::Store;
pub use tether_testkit::postgres::Backend;
use tether_testkit::postgres::TestDatabase;

/// What keeps a test's store alive: its SQLite directory or its PostgreSQL database.
#[derive(Debug)]
pub enum Guard {
    Dir(tempfile::TempDir),
    Database(TestDatabase),
}

/// A fresh, empty store on `backend`.
pub async fn open(backend: Backend) -> (Guard, Store) {
    let guard = match backend {
        Backend::Sqlite => Guard::Dir(tempfile::tempdir().unwrap()),
        Backend::Postgres => Guard::Database(
            tokio::time::timeout(std::time::Duration::from_secs(120), TestDatabase::create())
                .await
                .expect("timed out creating a test database")
                .unwrap_or_else(|e| panic!("test database: {e:#}")),
        ),
    };
    let store = reopen(&guard).await;
    (guard, store)
}

/// Opens the same store again (as a restarted daemon does).
pub async fn reopen(guard: &Guard) -> Store {
    match guard {
        Guard::Dir(dir) => Store::open(dir.path()).await.unwrap(),
        Guard::Database(db) => Store::connect(&db.url).await.unwrap(),
    }
}

/// A private chat conversation `conv` on the fake agent with a bound session `session`.
pub async fn chat_with_session(store: &Store, conv: &str, session: &str) {
    use tether_proto::{ConversationKind, NewSessionReason, Visibility};
    store
        .conversations()
        .create_conversation(&tether_store::NewConversation {
            id: &conv.into(),
            kind: ConversationKind::Chat,
            title: "t",
            agent: "fake",
            model: None,
            cwd: "/tmp",
            parent_conversation_id: None,
            owner_id: None,
            visibility: Visibility::Private,
        })
        .await
        .unwrap();
    let s = tether_store::NewSession {
        id: session.into(),
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

/// `contract!(name, …)` (or `contract!(multi_thread; name, …)`): one test per backend of
/// each `async fn name(backend: Backend)`.
macro_rules! contract {
    (multi_thread; $($name:ident),* $(,)?) => {
        $(mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn sqlite() {
                super::$name(super::support::Backend::Sqlite).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn postgres() {
                super::$name(super::support::Backend::Postgres).await
            }
        })*
    };
    ($($name:ident),* $(,)?) => {
        $(mod $name {
            #[tokio::test]
            async fn sqlite() {
                super::$name(super::support::Backend::Sqlite).await
            }
            #[tokio::test]
            async fn postgres() {
                super::$name(super::support::Backend::Postgres).await
            }
        })*
    };
}

/// The "unreported" usage row of turn `turn` in `c1`/`s1` (a turn whose agent reported
/// nothing), with report id `report_id`.
pub fn unreported(turn: &str, report_id: &str) -> tether_store::NewUsage {
    tether_store::NewUsage {
        report_id: report_id.to_owned(),
        unreported: true,
        conversation_id: "c1".into(),
        root_conversation_id: "c1".into(),
        session_id: Some("s1".into()),
        turn_id: Some(turn.into()),
        person_id: None,
        agent: "fake".to_owned(),
        model: None,
        account: None,
        input: 0,
        cached_input: 0,
        cache_write: 0,
        output: 0,
        reasoning: 0,
        cost_nanos: None,
        price_version: "tether-defaults-1".to_owned(),
    }
}

/// A turn's end as completed ("done"), and its terminal event.
pub fn completed() -> (tether_store::TurnEnd, tether_proto::EventPayload) {
    (
        tether_store::TurnEnd {
            status: tether_proto::TurnStatus::Completed,
            result_text: Some("done".into()),
            stop_reason: Some("end_turn".into()),
            error: None,
            usage: None,
        },
        tether_proto::EventPayload::TurnCompleted {
            stop_reason: Some("end_turn".into()),
            text: "done".into(),
        },
    )
}
