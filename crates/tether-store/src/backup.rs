//! Online backups of the embedded store (issue 31): a consistent copy of a SQLite store
//! that a daemon may be writing meanwhile (`VACUUM INTO` reads one snapshot through
//! the WAL, without blocking the writer), and the check a copy must pass before it is
//! restored. PostgreSQL is backed up with its own tools (`pg_dump`, base backups).

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Connection};

use crate::{Result, StoreError};

/// What a store file holds, as a backup reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// The newest schema migration applied to it.
    pub migration: i64,
    pub conversations: i64,
    pub bytes: u64,
}

async fn open(path: &Path) -> Result<sqlx::SqliteConnection> {
    Ok(SqliteConnectOptions::from_str("sqlite://")?
        .filename(path)
        .create_if_missing(false)
        .busy_timeout(Duration::from_secs(30))
        .connect()
        .await?)
}

/// Copies the SQLite store at `db` into the new file `into`, safe while a daemon runs
/// on it, and checks the copy.
pub async fn backup_sqlite(db: &Path, into: &Path) -> Result<SnapshotInfo> {
    let mut conn = open(db).await?;
    sqlx::query("VACUUM INTO $1")
        .bind(into.to_string_lossy().into_owned())
        .execute(&mut conn)
        .await?;
    conn.close().await?;
    check_sqlite(into).await
}

/// Checks a store file (`PRAGMA integrity_check`) and reads what it holds.
pub async fn check_sqlite(path: &Path) -> Result<SnapshotInfo> {
    let mut conn = open(path).await?;
    let verdict: String = sqlx::query_scalar("PRAGMA integrity_check")
        .fetch_one(&mut conn)
        .await?;
    if verdict != "ok" {
        return Err(StoreError::Corrupt {
            table: "(file)",
            detail: format!("{}: integrity check says {verdict}", path.display()),
        });
    }
    let migration: i64 =
        sqlx::query_scalar("SELECT coalesce(max(version), 0) FROM _sqlx_migrations")
            .fetch_one(&mut conn)
            .await?;
    let conversations: i64 = sqlx::query_scalar("SELECT count(*) FROM conversations")
        .fetch_one(&mut conn)
        .await?;
    conn.close().await?;
    let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    Ok(SnapshotInfo {
        migration,
        conversations,
        bytes,
    })
}
