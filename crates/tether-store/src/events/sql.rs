//! Events (gap-free `seq` per session) and the conversation history.

use tether_proto::{
    ConversationId, EventEnvelope, EventPayload, HistoryMessage, MessageRole, SessionId, TurnId,
};

use super::conns::Tx;

use super::{Db, rows};
use crate::{Result, StoreError};

/// Appends one event: `seq` = the session's `last_seq` + 1, read by the `INSERT` itself;
/// the trigger `events_keep_session_seq` (migration 0005) moves `last_seq` on, so `seq`
/// stays gap-free. One statement: on its own (autocommit) it is atomic, inside an open
/// transaction it commits with the rest. The caller publishes it with
/// [`Store::commit_events`].
pub(crate) async fn append(
    conn: &mut Tx,
    session_id: &SessionId,
    turn_id: Option<&TurnId>,
    payload: &EventPayload,
) -> Result<EventEnvelope> {
    let at = conn.now_ms();
    let json = serde_json::to_string(payload).map_err(|e| StoreError::Corrupt {
        table: "events",
        detail: e.to_string(),
    })?;
    // `fetch_all`: the statement runs to its end (and commits, outside a transaction).
    let rows: Vec<(i64, i64, String)> = sqlx::query_as(
        "INSERT INTO events (session_id, conversation_id, seq, turn_id, at, kind, payload) \
         SELECT id, conversation_id, last_seq + 1, $1, $2, $3, $4 FROM sessions WHERE id = $5 \
         RETURNING id, seq, conversation_id",
    )
    .bind(turn_id.map(TurnId::as_str))
    .bind(at)
    .bind(payload.kind())
    .bind(json)
    .bind(session_id.as_str())
    .fetch_all(&mut **conn)
    .await?;
    let Some((id, seq, conversation_id)) = rows.into_iter().next() else {
        // No such session: nothing was stored.
        return Err(sqlx::Error::RowNotFound.into());
    };
    conn.note_appended(1);
    let conversation_id = ConversationId::from(conversation_id);
    conn.note_on_behalf(&conversation_id);
    Ok(EventEnvelope {
        id,
        session_id: session_id.clone(),
        conversation_id,
        seq,
        turn_id: turn_id.cloned(),
        at_ms: at,
        payload: payload.clone(),
    })
}

/// Appends a history entry inside an open transaction (and touches the conversation's
/// `updated_at`), in one query; the transaction writes on behalf of the conversation.
pub(crate) async fn add_message(
    conn: &mut Tx,
    conversation_id: &ConversationId,
    role: MessageRole,
    text: &str,
    session_id: Option<&SessionId>,
    turn_id: Option<&TurnId>,
) -> Result<i64> {
    // `fetch_all`, never `fetch_one`: with a row limit sqlx stops after the first row
    // and the second statement would not run.
    let rows: Vec<(i64,)> = sqlx::query_as(super::dialect::ADD_MESSAGE)
        .bind(conversation_id.as_str())
        .bind(role.as_str())
        .bind(text)
        .bind(session_id.map(SessionId::as_str))
        .bind(turn_id.map(TurnId::as_str))
        .bind(conn.now_ms())
        .fetch_all(&mut **conn)
        .await?;
    let [(id,)] = rows.as_slice() else {
        return Err(sqlx::Error::RowNotFound.into());
    };
    conn.note_on_behalf(conversation_id);
    Ok(*id)
}

impl Db {
    /// Appends a history entry, optionally with a `status` event on a session, together.
    pub async fn add_message(
        &self,
        conversation_id: &ConversationId,
        role: MessageRole,
        text: &str,
        session_id: Option<&SessionId>,
        turn_id: Option<&TurnId>,
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
        self.commit_events(tx, ev.as_slice()).await?;
        Ok(ev)
    }

    /// A session's events with `seq > after_seq`, oldest first.
    pub async fn session_events(
        &self,
        session_id: &SessionId,
        after_seq: i64,
        limit: u32,
    ) -> Result<Vec<EventEnvelope>> {
        let rows = sqlx::query(
            "SELECT * FROM events WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
        )
        .bind(session_id.as_str())
        .bind(after_seq)
        .bind(i64::from(limit))
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(rows::event).collect()
    }

    /// A conversation's events (across its sessions) with global `id > after_id`.
    pub async fn conversation_events(
        &self,
        conversation_id: &ConversationId,
        after_id: i64,
        limit: u32,
    ) -> Result<Vec<EventEnvelope>> {
        let rows = sqlx::query(
            "SELECT * FROM events WHERE conversation_id = $1 AND id > $2 ORDER BY id LIMIT $3",
        )
        .bind(conversation_id.as_str())
        .bind(after_id)
        .bind(i64::from(limit))
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(rows::event).collect()
    }

    /// The conversation's history with `id > after_id`, oldest first.
    pub async fn history(
        &self,
        conversation_id: &ConversationId,
        after_id: i64,
        limit: u32,
    ) -> Result<Vec<HistoryMessage>> {
        let rows = sqlx::query(
            "SELECT * FROM messages WHERE conversation_id = $1 AND id > $2 ORDER BY id LIMIT $3",
        )
        .bind(conversation_id.as_str())
        .bind(after_id)
        .bind(i64::from(limit))
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(rows::message).collect()
    }
}
