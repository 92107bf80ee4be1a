//! Access rows of the channels: users allowed by pairing, pairing codes, and small
//! per-channel state (such as the Telegram update offset).

use super::SqlRow;
use sqlx::Row;

use super::channels::insert_outbox;
use crate::NewOutbox;

use super::Db;
use crate::{Pairing, Result};

fn pairing(row: &SqlRow) -> Result<Pairing> {
    Ok(Pairing {
        code: row.try_get("code")?,
        channel: row.try_get("channel")?,
        user_id: row.try_get("user_id")?,
        user_name: row.try_get("user_name")?,
        chat_key: row.try_get("chat_key")?,
        address: row.try_get("address")?,
        status: row.try_get("status")?,
        created_at_ms: row.try_get("created_at")?,
        approved_at_ms: row.try_get("approved_at")?,
        approved_by: row.try_get("approved_by")?,
    })
}

impl Db {
    /// Whether a user was allowed by pairing.
    pub async fn channel_user_allowed(&self, channel: &str, user_id: &str) -> Result<bool> {
        let row: Option<(i64,)> =
            sqlx::query_as("SELECT CAST(1 AS BIGINT) FROM channel_allowed_users WHERE channel = $1 AND user_id = $2")
                .bind(channel)
                .bind(user_id)
                .fetch_optional(&self.writer)
                .await?;
        Ok(row.is_some())
    }

    /// The user's pending pairing, if any.
    pub async fn pending_pairing(&self, channel: &str, user_id: &str) -> Result<Option<Pairing>> {
        let row = sqlx::query(
            "SELECT * FROM channel_pairings WHERE channel = $1 AND user_id = $2 \
             AND status = 'pending' ORDER BY created_at DESC LIMIT 1",
        )
        .bind(channel)
        .bind(user_id)
        .fetch_optional(&self.writer)
        .await?;
        row.as_ref().map(pairing).transpose()
    }

    /// How many pending pairings of `channel` were created at or after `since_ms`.
    pub async fn count_pending_pairings(&self, channel: &str, since_ms: i64) -> Result<i64> {
        let row: (i64,) = sqlx::query_as(
            "SELECT COUNT(*) FROM channel_pairings WHERE channel = $1 AND status = 'pending' \
             AND created_at >= $2",
        )
        .bind(channel)
        .bind(since_ms)
        .fetch_one(&self.writer)
        .await?;
        Ok(row.0)
    }

    /// Deletes the pending pairings of `channel` created before `before_ms` (expired
    /// codes: they can no longer be approved); returns how many went.
    pub async fn prune_pairings(&self, channel: &str, before_ms: i64) -> Result<u64> {
        let res = sqlx::query(
            "DELETE FROM channel_pairings WHERE channel = $1 AND status = 'pending' \
             AND created_at < $2",
        )
        .bind(channel)
        .bind(before_ms)
        .execute(&self.writer)
        .await?;
        Ok(res.rows_affected())
    }

    /// Stores a new pending pairing code unless `channel` already has `max` pending ones
    /// created at or after `fresh_since_ms` (checked in the same statement, so parallel
    /// senders cannot overshoot); `false` when full or the code is taken (tell them apart
    /// with [`Channels::count_pending_pairings`](crate::Channels::count_pending_pairings)).
    pub async fn insert_pairing_capped(
        &self,
        p: &Pairing,
        fresh_since_ms: i64,
        max: i64,
    ) -> Result<bool> {
        let res = sqlx::query(
            "INSERT INTO channel_pairings (code, channel, user_id, user_name, chat_key, \
             address, status, created_at) SELECT $1, $2, $3, $4, $5, $6, 'pending', $7 \
             WHERE (SELECT COUNT(*) FROM channel_pairings WHERE channel = $8 \
                    AND status = 'pending' AND created_at >= $9) < $10 \
             ON CONFLICT DO NOTHING",
        )
        .bind(&p.code)
        .bind(&p.channel)
        .bind(&p.user_id)
        .bind(&p.user_name)
        .bind(&p.chat_key)
        .bind(&p.address)
        .bind(p.created_at_ms)
        .bind(&p.channel)
        .bind(fresh_since_ms)
        .bind(max)
        .execute(&self.writer)
        .await?;
        Ok(res.rows_affected() == 1)
    }

    /// Stores a new pending pairing code; `false` when the code is taken.
    pub async fn insert_pairing(&self, p: &Pairing) -> Result<bool> {
        let res = sqlx::query(
            "INSERT INTO channel_pairings (code, channel, user_id, user_name, chat_key, \
             address, status, created_at) VALUES ($1, $2, $3, $4, $5, $6, 'pending', $7) \
             ON CONFLICT DO NOTHING",
        )
        .bind(&p.code)
        .bind(&p.channel)
        .bind(&p.user_id)
        .bind(&p.user_name)
        .bind(&p.chat_key)
        .bind(&p.address)
        .bind(p.created_at_ms)
        .execute(&self.writer)
        .await?;
        Ok(res.rows_affected() == 1)
    }

    /// Pairings, newest first, optionally only those with `status`.
    pub async fn list_pairings(&self, status: Option<&str>) -> Result<Vec<Pairing>> {
        let rows = sqlx::query(
            "SELECT * FROM channel_pairings WHERE ($1 IS NULL OR status = $2) \
             ORDER BY created_at DESC, code LIMIT 500",
        )
        .bind(status)
        .bind(status)
        .fetch_all(&self.writer)
        .await?;
        rows.iter().map(pairing).collect()
    }

    /// The pairing with that code.
    pub async fn get_pairing(&self, code: &str) -> Result<Option<Pairing>> {
        let row = sqlx::query("SELECT * FROM channel_pairings WHERE code = $1")
            .bind(code)
            .fetch_optional(&self.writer)
            .await?;
        row.as_ref().map(pairing).transpose()
    }

    /// Approves a pending pairing: the user is allowed from now on and `notice` (built
    /// from the pairing) is queued, in one transaction. `None` when no pending pairing
    /// has that code.
    pub async fn approve_pairing(
        &self,
        code: &str,
        by: &str,
        notice: impl FnOnce(&Pairing) -> NewOutbox,
    ) -> Result<Option<Pairing>> {
        let mut tx = self.writer.begin().await?;
        let now = self.now_ms();
        let row = sqlx::query(
            "UPDATE channel_pairings SET status = 'approved', approved_at = $1, approved_by = $2 \
             WHERE code = $3 AND status = 'pending' RETURNING *",
        )
        .bind(now)
        .bind(by)
        .bind(code)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(p) = row.as_ref().map(pairing).transpose()? else {
            return Ok(None);
        };
        sqlx::query(
            "INSERT INTO channel_allowed_users (channel, user_id, added_by, created_at) \
             VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
        )
        .bind(&p.channel)
        .bind(&p.user_id)
        .bind(by)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        insert_outbox(&mut tx, &notice(&p)).await?;
        tx.commit().await?;
        Ok(Some(p))
    }

    /// A per-channel value (such as the Telegram update offset).
    pub async fn channel_state(&self, channel: &str, key: &str) -> Result<Option<String>> {
        let row: Option<(String,)> =
            sqlx::query_as("SELECT value FROM channel_state WHERE channel = $1 AND key = $2")
                .bind(channel)
                .bind(key)
                .fetch_optional(&self.writer)
                .await?;
        Ok(row.map(|r| r.0))
    }

    pub async fn set_channel_state(&self, channel: &str, key: &str, value: &str) -> Result<()> {
        sqlx::query(
            "INSERT INTO channel_state (channel, key, value) VALUES ($1, $2, $3) \
             ON CONFLICT (channel, key) DO UPDATE SET value = excluded.value",
        )
        .bind(channel)
        .bind(key)
        .bind(value)
        .execute(&self.writer)
        .await?;
        Ok(())
    }
}
