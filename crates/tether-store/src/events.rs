//! Events (gap-free `seq` per session) and the conversation history.

use sqlx::SqliteConnection;
use tether_proto::{EventEnvelope, EventPayload, HistoryMessage, MessageRole};

use crate::{Result, Store, StoreError, now_ms, rows};

/// Appends one event inside an open transaction. The session's `last_seq` counter is
/// bumped in the same transaction, so `seq` is gap-free.
pub(crate) async fn append(
    conn: &mut SqliteConnection,
    session_id: &str,
    turn_id: Option<&str>,
    payload: &EventPayload,
) -> Result<EventEnvelope> {
    let at = now_ms();
    let (seq, conversation_id): (i64, String) = sqlx::query_as(
        "UPDATE sessions SET last_seq = last_seq + 1, updated_at = ? WHERE id = ? \
         RETURNING last_seq, conversation_id",
    )
    .bind(at)
    .bind(session_id)
    .fetch_one(&mut *conn)
    .await?;
    let json = serde_json::to_string(payload).map_err(|e| StoreError::Corrupt {
        table: "events",
        detail: e.to_string(),
    })?;
    let (id,): (i64,) = sqlx::query_as(
        "INSERT INTO events (session_id, conversation_id, seq, turn_id, at, kind, payload) \
         VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
    )
    .bind(session_id)
    .bind(&conversation_id)
    .bind(seq)
    .bind(turn_id)
    .bind(at)
    .bind(payload.kind())
    .bind(json)
    .fetch_one(&mut *conn)
    .await?;
    Ok(EventEnvelope {
        id,
        session_id: session_id.to_string(),
        conversation_id,
        seq,
        turn_id: turn_id.map(str::to_string),
        at_ms: at,
        payload: payload.clone(),
    })
}

/// Appends a history entry inside an open transaction.
pub(crate) async fn add_message(
    conn: &mut SqliteConnection,
    conversation_id: &str,
    role: MessageRole,
    text: &str,
    session_id: Option<&str>,
    turn_id: Option<&str>,
) -> Result<i64> {
    let (id,): (i64,) = sqlx::query_as(
        "INSERT INTO messages (conversation_id, role, text, session_id, turn_id, at) \
         VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
    )
    .bind(conversation_id)
    .bind(role.as_str())
    .bind(text)
    .bind(session_id)
    .bind(turn_id)
    .bind(now_ms())
    .fetch_one(&mut *conn)
    .await?;
    sqlx::query("UPDATE conversations SET updated_at = ? WHERE id = ?")
        .bind(now_ms())
        .bind(conversation_id)
        .execute(&mut *conn)
        .await?;
    Ok(id)
}

impl Store {
    /// Appends events of one session in one transaction.
    pub async fn append_events(
        &self,
        session_id: &str,
        turn_id: Option<&str>,
        payloads: &[EventPayload],
    ) -> Result<Vec<EventEnvelope>> {
        let mut tx = self.writer.begin().await?;
        let mut out = Vec::with_capacity(payloads.len());
        for p in payloads {
            out.push(append(&mut tx, session_id, turn_id, p).await?);
        }
        tx.commit().await?;
        Ok(out)
    }

    /// Appends a history entry, optionally with a `status` event on a session, together.
    pub async fn add_message(
        &self,
        conversation_id: &str,
        role: MessageRole,
        text: &str,
        session_id: Option<&str>,
        turn_id: Option<&str>,
    ) -> Result<Option<EventEnvelope>> {
        let mut tx = self.writer.begin().await?;
        add_message(&mut tx, conversation_id, role, text, session_id, turn_id).await?;
        let ev = match (role, session_id) {
            (MessageRole::Status, Some(sid)) => Some(
                append(
                    &mut tx,
                    sid,
                    turn_id,
                    &EventPayload::Status {
                        text: text.to_string(),
                    },
                )
                .await?,
            ),
            _ => None,
        };
        tx.commit().await?;
        Ok(ev)
    }

    /// A session's events with `seq > after_seq`, oldest first.
    pub async fn session_events(
        &self,
        session_id: &str,
        after_seq: i64,
        limit: u32,
    ) -> Result<Vec<EventEnvelope>> {
        let rows = sqlx::query(
            "SELECT * FROM events WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?",
        )
        .bind(session_id)
        .bind(after_seq)
        .bind(limit)
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(rows::event).collect()
    }

    /// A conversation's events (across its sessions) with global `id > after_id`.
    pub async fn conversation_events(
        &self,
        conversation_id: &str,
        after_id: i64,
        limit: u32,
    ) -> Result<Vec<EventEnvelope>> {
        let rows = sqlx::query(
            "SELECT * FROM events WHERE conversation_id = ? AND id > ? ORDER BY id LIMIT ?",
        )
        .bind(conversation_id)
        .bind(after_id)
        .bind(limit)
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(rows::event).collect()
    }

    /// The conversation's history with `id > after_id`, oldest first.
    pub async fn history(
        &self,
        conversation_id: &str,
        after_id: i64,
        limit: u32,
    ) -> Result<Vec<HistoryMessage>> {
        let rows = sqlx::query(
            "SELECT * FROM messages WHERE conversation_id = ? AND id > ? ORDER BY id LIMIT ?",
        )
        .bind(conversation_id)
        .bind(after_id)
        .bind(limit)
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(rows::message).collect()
    }
}
