//! Subscription accounts' usage windows in SQL (see `usage/mod.rs`): each report of a
//! vendor's window replaces the one before it; an account's use is the fullest of its
//! windows that has not reset yet.

use super::Db;
use crate::Result;

/// The fullest window of `account` at `now_ms` (a window past its reset counts no more).
const FULLEST: &str = "SELECT MAX(used_percent) FROM account_windows WHERE account = $1 \
     AND (resets_at IS NULL OR resets_at > $2)";

impl Db {
    /// Stores a vendor's report that `account`'s window `window` is `used_percent` used
    /// (resetting at `resets_at_ms` when it says); the account's fullest window before
    /// and after it, read in the same transaction.
    pub async fn record_window(
        &self,
        account: &str,
        window: &str,
        used_percent: i64,
        resets_at_ms: Option<i64>,
    ) -> Result<(i64, i64)> {
        let now = self.now_ms();
        let mut tx = self.writer.begin().await?;
        let (before,): (Option<i64>,) = sqlx::query_as(FULLEST)
            .bind(account)
            .bind(now)
            .fetch_one(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO account_windows (account, window_name, used_percent, resets_at, \
             updated_at) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (account, window_name) \
             DO UPDATE SET used_percent = excluded.used_percent, resets_at = \
             excluded.resets_at, updated_at = excluded.updated_at",
        )
        .bind(account)
        .bind(window)
        .bind(used_percent)
        .bind(resets_at_ms)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        let (after,): (Option<i64>,) = sqlx::query_as(FULLEST)
            .bind(account)
            .bind(now)
            .fetch_one(&mut *tx)
            .await?;
        tx.commit_unchecked().await?;
        Ok((before.unwrap_or(0), after.unwrap_or(0)))
    }

    /// The fullest window of `account` at `now_ms` (0 when its vendor reported none).
    pub async fn account_window(&self, account: &str, now_ms: i64) -> Result<i64> {
        let (used,): (Option<i64>,) = sqlx::query_as(FULLEST)
            .bind(account)
            .bind(now_ms)
            .fetch_one(&self.reader)
            .await?;
        Ok(used.unwrap_or(0))
    }

    /// The fullest window of any account at `now_ms` (the budgets list shows it).
    pub async fn fullest_window(&self, now_ms: i64) -> Result<i64> {
        let (used,): (Option<i64>,) = sqlx::query_as(
            "SELECT MAX(used_percent) FROM account_windows WHERE resets_at IS NULL \
             OR resets_at > $1",
        )
        .bind(now_ms)
        .fetch_one(&self.reader)
        .await?;
        Ok(used.unwrap_or(0))
    }
}
