//! tether-store: durable state on sqlx + SQLite (WAL): conversations, runtime sessions,
//! turns, per-session events with a gap-free `seq`, approvals, questions, message history
//! and inbound dedupe keys. Writes that belong together run in one transaction.
//!
//! Must not depend on the agents, the channels or the web server. Writes go through one
//! writer connection (SQLite has one writer anyway; this avoids busy errors); reads use
//! four read-only connections; a third kind checkpoints the WAL in the background
//! (commits never do, see `checkpoint`). The connections are held directly, not in an
//! sqlx pool (see `conns`). Committed events are published to their followers by the
//! store itself, in commit order (see `feed`).

mod append;
mod approvals;
mod attachments;
mod channels;
mod checkpoint;
mod conns;
mod conversations;
mod delegation;
mod delegation_ledger;
mod events;
mod feed;
mod pages;
mod recovery;
mod rows;
mod rules;
mod turns;
mod view_parts;

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use sqlx::ConnectOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};

use crate::conns::Conns;

pub use append::AppendStats;
pub use channels::{ChannelChat, NewOutbox, OutboxRow, OutboxStatus, Pairing};
pub use delegation::{
    DelegationRow, DelegationTurnRow, EXTERNAL_SCOPE, NewDelegation, NewDelegationTurn,
};
pub use delegation_ledger::LedgerEntry;
pub use feed::{Batch, Follower, Scope};
pub use pages::ListCursor;
pub use recovery::{RecoveredConversation, RecoveryReport};
pub use rows::*;
pub use view_parts::ViewParts;

/// Errors from the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Db(#[from] sqlx::Error),
    #[error("migration error: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("cannot create data directory {path}: {source}")]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("corrupt row in {table}: {detail}")]
    Corrupt { table: &'static str, detail: String },
    /// A follower's topic closed (only when the store itself goes away).
    #[error("the event feed closed")]
    FeedClosed,
    /// An append's group commit ended without answering it (it panicked); nothing of it
    /// was stored.
    #[error("the append was abandoned before it was stored")]
    AppendAbandoned,
    /// Delegation: the continuation id is already in the ledger of this scope (the
    /// transaction that tried to record it was rolled back).
    #[error("continuation id {continuation_id:?} is already recorded in {scope}")]
    LedgerTaken {
        scope: String,
        continuation_id: String,
    },
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// The database handle. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    writer: Conns,
    reader: Conns,
    checkpointer: std::sync::Arc<checkpoint::Checkpointer>,
    /// Ids of conversations whose row changed (see `pages`).
    changes: tokio::sync::broadcast::Sender<tether_proto::ConversationId>,
    /// Followers of live events (see `feed`).
    feed: std::sync::Arc<feed::Hub>,
    /// Event batches waiting for a group commit (see `append`).
    appends: std::sync::Arc<append::Appends>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Store {
    /// Opens (creating if needed) `<data_dir>/tether.db` and runs the migrations.
    pub async fn open(data_dir: &Path) -> Result<Store> {
        std::fs::create_dir_all(data_dir).map_err(|source| StoreError::DataDir {
            path: data_dir.to_path_buf(),
            source,
        })?;
        Self::open_file(&data_dir.join("tether.db")).await
    }

    /// Opens a database file directly.
    pub async fn open_file(path: &Path) -> Result<Store> {
        let opts = SqliteConnectOptions::from_str("sqlite://")?
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(10))
            // Commits never checkpoint; a background task does (see `checkpoint`).
            .pragma("wal_autocheckpoint", "0")
            // After a checkpoint lets the WAL restart, a file grown by a burst shrinks.
            .pragma("journal_size_limit", "67108864")
            // Statement journals (a multi-row INSERT with a UNIQUE index inside a
            // transaction keeps one) in memory, not in temp files.
            .pragma("temp_store", "MEMORY");
        // The writer's page cache holds a group commit's dirty pages (16 MiB instead of
        // SQLite's 2 MiB: a full group spilled pages to the WAL mid-transaction).
        let mut first = opts
            .clone()
            .pragma("cache_size", "-16384")
            .connect()
            .await?;
        sqlx::migrate!("./migrations").run(&mut first).await?;
        let writer = Conns::from_connection(first);
        let reader = Conns::open(&opts.clone().read_only(true), 4).await?;
        let checkpointer = std::sync::Arc::new(checkpoint::Checkpointer::start(
            Conns::open(&opts, 1).await?,
        ));
        Ok(Store {
            writer,
            reader,
            checkpointer,
            changes: tokio::sync::broadcast::channel(pages::CHANGES_BUFFER).0,
            feed: std::sync::Arc::default(),
            appends: std::sync::Arc::default(),
        })
    }

    /// `PRAGMA integrity_check` → `true` when the database is sound.
    pub async fn integrity_check(&self) -> Result<bool> {
        let row: (String,) = sqlx::query_as("PRAGMA integrity_check")
            .fetch_one(&self.reader)
            .await?;
        Ok(row.0 == "ok")
    }

    /// Records an inbound dedupe key; `false` when it was seen before.
    pub async fn remember_inbound(&self, source: &str, key: &str) -> Result<bool> {
        let res =
            sqlx::query("INSERT OR IGNORE INTO inbound_dedupe (source, key, at) VALUES (?, ?, ?)")
                .bind(source)
                .bind(key)
                .bind(now_ms())
                .execute(&self.writer)
                .await?;
        Ok(res.rows_affected() == 1)
    }

    /// Closes every connection.
    pub async fn close(&self) {
        self.checkpointer.close().await;
        self.writer.close().await;
        self.reader.close().await;
    }
}
