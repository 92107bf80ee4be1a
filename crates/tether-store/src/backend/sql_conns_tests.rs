//! Tests of the connection set (on SQLite).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::str::FromStr;

use sqlx::sqlite::SqliteConnectOptions;

use super::conns::*;

async fn conns(dir: &std::path::Path, size: usize) -> Conns {
    let opts = SqliteConnectOptions::from_str("sqlite://")
        .unwrap()
        .filename(dir.join("t.db"))
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal);
    let c = Conns::open(&opts, size, None, &Default::default())
        .await
        .unwrap();
    sqlx::query("CREATE TABLE IF NOT EXISTS t (v INTEGER)")
        .execute(&c)
        .await
        .unwrap();
    c
}

async fn count(c: &Conns) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM t")
        .fetch_one(c)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_dropped_transaction_rolls_back_and_the_connection_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let c = conns(dir.path(), 1).await;
    {
        let mut tx = c.begin().await.unwrap();
        sqlx::query("INSERT INTO t VALUES (1)")
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    assert_eq!(count(&c).await, 0);
    let mut tx = c.begin().await.unwrap();
    sqlx::query("INSERT INTO t VALUES (2)")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(count(&c).await, 1);
}

#[tokio::test]
async fn more_users_than_connections_take_turns() {
    let dir = tempfile::tempdir().unwrap();
    let c = conns(dir.path(), 2).await;
    let all = futures::future::join_all((0..20).map(|i| {
        let c = c.clone();
        async move {
            let mut tx = c.begin().await.unwrap();
            sqlx::query("INSERT INTO t VALUES ($1)")
                .bind(i)
                .execute(&mut *tx)
                .await
                .unwrap();
            tokio::task::yield_now().await;
            tx.commit().await.unwrap();
            count(&c).await
        }
    }));
    let counts = tokio::time::timeout(std::time::Duration::from_secs(20), all)
        .await
        .unwrap();
    assert_eq!(counts.len(), 20);
    assert_eq!(count(&c).await, 20);
}

#[tokio::test]
async fn closed_connections_are_not_handed_out() {
    let dir = tempfile::tempdir().unwrap();
    let c = conns(dir.path(), 2).await;
    c.close().await;
    assert!(c.is_closed());
    assert!(matches!(c.acquire().await, Err(sqlx::Error::PoolClosed)));
    assert!(sqlx::query("SELECT 1").execute(&c).await.is_err());
}

#[tokio::test]
async fn a_dropped_write_transaction_lets_go_of_the_write_lock_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let c = conns(dir.path(), 1).await;
    // Another process's writer (its own set), which waits at most 200 ms for the lock.
    let other_opts = SqliteConnectOptions::from_str("sqlite://")
        .unwrap()
        .filename(dir.path().join("t.db"))
        .busy_timeout(std::time::Duration::from_millis(200));
    let other = Conns::open(&other_opts, 1, None, &Default::default())
        .await
        .unwrap();
    {
        let mut tx = c.begin().await.unwrap();
        sqlx::query("INSERT INTO t VALUES (1)")
            .execute(&mut *tx)
            .await
            .unwrap();
        // Dropped without a commit, and `c` not used again before `other` writes.
    }
    let mut tx = tokio::time::timeout(std::time::Duration::from_secs(10), other.begin())
        .await
        .unwrap()
        .expect("the dropped transaction still holds the write lock");
    sqlx::query("INSERT INTO t VALUES (2)")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(count(&c).await, 1, "the dropped insert is rolled back");
}
