//! Channel rows (Telegram, Feishu): chat ↔ conversation mapping with its event cursor,
//! the durable outbox (a row first, then a send; deduplicated by key), allowlisted users,
//! pairing codes and small per-channel state.
//!
//! Bodies and addresses are opaque JSON strings here: their shape belongs to the channels.

use super::conns::Tx;
use super::SqlRow;
use sqlx::Row;

use tether_proto::ConversationId;

use super::Db;
use crate::{ChannelChat, NewOutbox, OutboxRow, OutboxStatus, Result, StoreError};

fn chat(row: &SqlRow) -> Result<ChannelChat> {
    Ok(ChannelChat {
        channel: row.try_get("channel")?,
        chat_key: row.try_get("chat_key")?,
        conversation_id: super::rows::id(row, "conversation_id")?,
        address: row.try_get("address")?,
        event_cursor: row.try_get("event_cursor")?,
        created_at_ms: row.try_get("created_at")?,
        muted: row.try_get::<i64, _>("muted")? != 0,
    })
}

pub(super) fn outbox(row: &SqlRow) -> Result<OutboxRow> {
    let status: String = row.try_get("status")?;
    Ok(OutboxRow {
        id: row.try_get("id")?,
        channel: row.try_get("channel")?,
        chat_key: row.try_get("chat_key")?,
        dedupe_key: row.try_get("dedupe_key")?,
        op: row.try_get("op")?,
        target_key: row.try_get("target_key")?,
        address: row.try_get("address")?,
        body: row.try_get("body")?,
        version: row.try_get("version")?,
        status: OutboxStatus::parse(&status).ok_or_else(|| StoreError::Corrupt {
            table: "channel_outbox",
            detail: format!("unknown status {status:?}"),
        })?,
        attempts: row.try_get("attempts")?,
        next_attempt_at_ms: row.try_get("next_attempt_at")?,
        last_error: row.try_get("last_error")?,
        remote_id: row.try_get("remote_id")?,
        created_at_ms: row.try_get("created_at")?,
        traceparent: row.try_get("traceparent")?,
    })
}

pub(super) async fn insert_outbox(conn: &mut Tx, item: &NewOutbox) -> Result<bool> {
    let now = conn.now_ms();
    // The existing row is named by its table: a bare column is ambiguous next to
    // `excluded` on PostgreSQL.
    let on_conflict = if item.replace {
        format!(
            "ON CONFLICT (channel, dedupe_key) DO UPDATE SET body = excluded.body, \
             version = channel_outbox.version + 1, status = 'pending', attempts = 0, \
             next_attempt_at = {greatest}(channel_outbox.next_attempt_at, \
             excluded.next_attempt_at), updated_at = excluded.updated_at \
             WHERE channel_outbox.body != excluded.body",
            greatest = super::dialect::GREATEST
        )
    } else {
        "ON CONFLICT (channel, dedupe_key) DO NOTHING".to_string()
    };
    let sql = format!(
        "INSERT INTO channel_outbox (channel, chat_key, dedupe_key, op, target_key, address, \
         body, status, next_attempt_at, created_at, updated_at, traceparent) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', $8, $9, $10, $11) {on_conflict}"
    );
    let res = sqlx::query(&sql)
        .bind(&item.channel)
        .bind(&item.chat_key)
        .bind(&item.dedupe_key)
        .bind(&item.op)
        .bind(&item.target_key)
        .bind(&item.address)
        .bind(&item.body)
        .bind(now)
        .bind(now)
        .bind(now)
        .bind(&item.traceparent)
        .execute(&mut **conn)
        .await?;
    Ok(res.rows_affected() == 1)
}

impl Db {
    /// The chat's mapping, if the chat was seen before.
    pub async fn channel_chat(&self, channel: &str, chat_key: &str) -> Result<Option<ChannelChat>> {
        let row = sqlx::query("SELECT * FROM channel_chats WHERE channel = $1 AND chat_key = $2")
            .bind(channel)
            .bind(chat_key)
            .fetch_optional(&self.writer)
            .await?;
        row.as_ref().map(chat).transpose()
    }

    /// Every chat of a channel.
    pub async fn channel_chats(&self, channel: &str) -> Result<Vec<ChannelChat>> {
        let rows =
            sqlx::query("SELECT * FROM channel_chats WHERE channel = $1 ORDER BY created_at")
                .bind(channel)
                .fetch_all(&self.writer)
                .await?;
        rows.iter().map(chat).collect()
    }

    /// Points a mapped chat at another conversation (its old one was archived: from its
    /// start; `/here`: from its latest event, `cursor`).
    pub async fn remap_channel_chat(
        &self,
        channel: &str,
        chat_key: &str,
        conversation_id: &ConversationId,
        cursor: i64,
    ) -> Result<ChannelChat> {
        sqlx::query(
            "UPDATE channel_chats SET conversation_id = $1, event_cursor = $4 \
             WHERE channel = $2 AND chat_key = $3",
        )
        .bind(conversation_id.as_str())
        .bind(channel)
        .bind(chat_key)
        .bind(cursor)
        .execute(&self.writer)
        .await?;
        self.channel_chat(channel, chat_key)
            .await?
            .ok_or_else(|| StoreError::Corrupt {
                table: "channel_chats",
                detail: format!("mapping {channel}/{chat_key} vanished"),
            })
    }

    /// Maps a chat to a conversation, starting its event cursor at `cursor`; an existing
    /// mapping wins and is returned.
    pub async fn insert_channel_chat(
        &self,
        channel: &str,
        chat_key: &str,
        conversation_id: &ConversationId,
        address: &str,
        cursor: i64,
    ) -> Result<ChannelChat> {
        sqlx::query(
            "INSERT INTO channel_chats (channel, chat_key, conversation_id, address, \
             event_cursor, created_at) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
        )
        .bind(channel)
        .bind(chat_key)
        .bind(conversation_id.as_str())
        .bind(address)
        .bind(cursor)
        .bind(self.now_ms())
        .execute(&self.writer)
        .await?;
        self.channel_chat(channel, chat_key)
            .await?
            .ok_or_else(|| StoreError::Corrupt {
                table: "channel_chats",
                detail: format!("mapping {channel}/{chat_key} vanished"),
            })
    }

    /// Makes this chat the one its conversation's replies go to: every other chat mapped
    /// to the conversation (on any channel) is muted, this one is not. Returns whether
    /// anything changed.
    pub async fn reply_here(
        &self,
        channel: &str,
        chat_key: &str,
        conversation_id: &ConversationId,
    ) -> Result<bool> {
        let res = sqlx::query(
            "UPDATE channel_chats SET muted = CASE WHEN channel = $1 AND chat_key = $2 \
             THEN 0 ELSE 1 END WHERE conversation_id = $3 AND muted <> CASE WHEN \
             channel = $1 AND chat_key = $2 THEN 0 ELSE 1 END",
        )
        .bind(channel)
        .bind(chat_key)
        .bind(conversation_id.as_str())
        .execute(&self.writer)
        .await?;
        Ok(res.rows_affected() > 0)
    }

    /// The id of the conversation's latest event (0: none yet): where a chat that takes
    /// the conversation over (`/here`) starts following it.
    pub async fn conversation_head(&self, conversation_id: &ConversationId) -> Result<i64> {
        let row = sqlx::query(
            "SELECT COALESCE(MAX(id), 0) AS head FROM events \
             WHERE conversation_num = (SELECT num FROM conversations WHERE id = $1)",
        )
        .bind(conversation_id.as_str())
        .fetch_one(&self.reader)
        .await?;
        Ok(row.try_get("head")?)
    }

    /// The chats mapped to a conversation, on every channel (the one not muted gets its
    /// replies).
    pub async fn chats_of_conversation(
        &self,
        conversation_id: &ConversationId,
    ) -> Result<Vec<ChannelChat>> {
        let rows = sqlx::query(
            "SELECT * FROM channel_chats WHERE conversation_id = $1 ORDER BY created_at",
        )
        .bind(conversation_id.as_str())
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(chat).collect()
    }

    /// Inserts outbox rows (see [`NewOutbox::replace`]) and moves the chat's event
    /// cursor forward, in one transaction. Returns how many rows were written.
    pub async fn advance_channel_chat(
        &self,
        channel: &str,
        chat_key: &str,
        cursor: i64,
        items: &[NewOutbox],
    ) -> Result<usize> {
        let mut tx = self.writer.begin().await?;
        let mut added = 0;
        for item in items {
            added += usize::from(insert_outbox(&mut tx, item).await?);
        }
        sqlx::query(&format!(
            "UPDATE channel_chats SET event_cursor = {}(event_cursor, $1) \
             WHERE channel = $2 AND chat_key = $3",
            super::dialect::GREATEST
        ))
        .bind(cursor)
        .bind(channel)
        .bind(chat_key)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(added)
    }

    /// Inserts outbox rows (see [`NewOutbox::replace`]). Returns how many were written.
    pub async fn enqueue_outbox(&self, items: &[NewOutbox]) -> Result<usize> {
        let mut tx = self.writer.begin().await?;
        let mut added = 0;
        for item in items {
            added += usize::from(insert_outbox(&mut tx, item).await?);
        }
        tx.commit().await?;
        Ok(added)
    }

    /// The rows at the head of their lanes (oldest pending row of each chat) that are
    /// due at `now`, oldest first.
    pub async fn due_outbox(&self, channel: &str, now: i64, limit: u32) -> Result<Vec<OutboxRow>> {
        let rows = sqlx::query(
            "SELECT o.* FROM channel_outbox o WHERE o.channel = $1 AND o.status = 'pending' \
             AND o.id = (SELECT MIN(i.id) FROM channel_outbox i WHERE i.channel = o.channel \
             AND i.chat_key = o.chat_key AND i.status = 'pending') \
             AND o.next_attempt_at <= $2 ORDER BY o.id LIMIT $3",
        )
        .bind(channel)
        .bind(now)
        .bind(i64::from(limit))
        .fetch_all(&self.writer)
        .await?;
        rows.iter().map(outbox).collect()
    }

    /// When the next lane head of the channel is due, if any.
    pub async fn next_outbox_due(&self, channel: &str) -> Result<Option<i64>> {
        // A head claimed by another sender is due when its claim runs out at the latest
        // (see `outbox_claims`).
        let (at,): (Option<i64>,) = sqlx::query_as(&format!(
            "SELECT MIN({greatest}(o.next_attempt_at, o.claim_until)) FROM channel_outbox o \
             WHERE o.channel = $1 AND o.status = 'pending' AND o.id = (SELECT MIN(i.id) \
             FROM channel_outbox i WHERE i.channel = o.channel AND i.chat_key = o.chat_key \
             AND i.status = 'pending')",
            greatest = super::dialect::GREATEST
        ))
        .bind(channel)
        .fetch_one(&self.writer)
        .await?;
        Ok(at)
    }

    /// The row with that key.
    pub async fn outbox_row(&self, channel: &str, dedupe_key: &str) -> Result<Option<OutboxRow>> {
        let row =
            sqlx::query("SELECT * FROM channel_outbox WHERE channel = $1 AND dedupe_key = $2")
                .bind(channel)
                .bind(dedupe_key)
                .fetch_optional(&self.writer)
                .await?;
        row.as_ref().map(outbox).transpose()
    }

    /// Every row of a channel, oldest first (diagnostics and tests).
    pub async fn list_outbox(&self, channel: &str) -> Result<Vec<OutboxRow>> {
        let rows = sqlx::query("SELECT * FROM channel_outbox WHERE channel = $1 ORDER BY id")
            .bind(channel)
            .fetch_all(&self.writer)
            .await?;
        rows.iter().map(outbox).collect()
    }

    /// Marks a row sent, unless its body was replaced meanwhile (then it stays pending
    /// and the new body goes out next). `remote_id` is kept when `None`.
    pub async fn mark_outbox_sent(
        &self,
        id: i64,
        version: i64,
        remote_id: Option<&str>,
    ) -> Result<()> {
        sqlx::query(
            // A body replaced meanwhile keeps the row pending, but the claim ends either
            // way (or the new body would wait for the claim's deadline).
            "UPDATE channel_outbox SET \
             status = CASE WHEN version = $4 THEN 'sent' ELSE status END, \
             remote_id = CASE WHEN version = $4 THEN COALESCE($1, remote_id) ELSE remote_id END, \
             attempts = CASE WHEN version = $4 THEN attempts + 1 ELSE attempts END, \
             last_error = CASE WHEN version = $4 THEN NULL ELSE last_error END, \
             updated_at = $2, claimed_by = NULL, claim_until = 0 WHERE id = $3",
        )
        .bind(remote_id)
        .bind(self.now_ms())
        .bind(id)
        .bind(version)
        // Not behind the writer's queue (issue 33 item 6): until this lands, a sender
        // killed after the platform answered leaves the row to be sent again.
        .execute(&self.side)
        .await?;
        Ok(())
    }

    /// Records a failed attempt; the row is tried again at `next_attempt_at`.
    pub async fn mark_outbox_retry(
        &self,
        id: i64,
        next_attempt_at: i64,
        error: &str,
    ) -> Result<()> {
        sqlx::query(
            "UPDATE channel_outbox SET attempts = attempts + 1, next_attempt_at = $1, \
             last_error = $2, updated_at = $3, claimed_by = NULL, claim_until = 0 \
             WHERE id = $4 AND status = 'pending'",
        )
        .bind(next_attempt_at)
        .bind(error)
        .bind(self.now_ms())
        .bind(id)
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    /// Ends a row without delivery (`failed` or `skipped`).
    pub async fn mark_outbox_done(&self, id: i64, status: OutboxStatus, error: &str) -> Result<()> {
        sqlx::query(
            "UPDATE channel_outbox SET status = $1, last_error = $2, updated_at = $3, \
             claimed_by = NULL, claim_until = 0 WHERE id = $4",
        )
        .bind(status.as_str())
        .bind(error)
        .bind(self.now_ms())
        .bind(id)
        .execute(&self.writer)
        .await?;
        Ok(())
    }
}
