//! Events (gap-free `seq` per session) and the conversation history.

use tether_proto::{
    ConversationId, EventEnvelope, EventPayload, HistoryMessage, MessageRole, SessionId, TurnId,
};

use super::conns::Tx;

use super::{Db, rows};
use crate::events::numbers::SessionNums;
use crate::{Result, StoreError};

impl Db {
    /// The numbers of session `id` (see `numbers`): remembered, else read from committed
    /// rows (then remembered), else through `conn` (a session created in its still open
    /// transaction: not remembered, the transaction may roll back). `RowNotFound` when
    /// there is no such session.
    pub(super) async fn session_nums(&self, conn: &mut Tx, id: &SessionId) -> Result<SessionNums> {
        if let Some(nums) = self.shared.numbers.get(id) {
            return Ok(nums);
        }
        const READ: &str = "SELECT s.num, c.num, c.id FROM sessions s \
             JOIN conversations c ON c.id = s.conversation_id WHERE s.id = $1";
        let committed: Option<(i64, i64, String)> = sqlx::query_as(READ)
            .bind(id.as_str())
            .fetch_optional(&self.reader)
            .await?;
        let (row, remember) = match committed {
            Some(row) => (row, true),
            None => {
                let row: Option<(i64, i64, String)> = sqlx::query_as(READ)
                    .bind(id.as_str())
                    .fetch_optional(&mut **conn)
                    .await?;
                let Some(row) = row else {
                    return Err(sqlx::Error::RowNotFound.into());
                };
                (row, false)
            }
        };
        let nums = SessionNums {
            session: row.0,
            conversation: row.1,
            conversation_id: row.2.into(),
        };
        if remember {
            self.shared.numbers.remember(id, &nums);
        }
        Ok(nums)
    }

    /// Appends one event: `seq` = the session's largest + 1, read by the `INSERT` itself
    /// from `events_by_session` (gap-free; a concurrent writer of the same seq is refused
    /// by that unique index). One statement: on its own (autocommit) it is atomic, inside
    /// an open transaction it commits with the rest. The caller publishes it with
    /// [`Store::commit_events`].
    pub(super) async fn append_in(
        &self,
        conn: &mut Tx,
        session_id: &SessionId,
        turn_id: Option<&TurnId>,
        payload: &EventPayload,
    ) -> Result<EventEnvelope> {
        let nums = self.session_nums(conn, session_id).await?;
        let at = conn.now_ms();
        let json = serde_json::to_string(payload).map_err(|e| StoreError::Corrupt {
            table: "events",
            detail: e.to_string(),
        })?;
        // `fetch_all`: the statement runs to its end (and commits, outside a transaction).
        let rows: Vec<(i64, i64)> = sqlx::query_as(
            "INSERT INTO events (conversation_num, session_num, seq, turn_id, at, kind, payload) \
             VALUES ($1, $2, COALESCE((SELECT seq FROM events WHERE session_num = $2 \
             ORDER BY seq DESC LIMIT 1), 0) + 1, $3, $4, $5, $6) RETURNING id, seq",
        )
        .bind(nums.conversation)
        .bind(nums.session)
        .bind(turn_id.map(TurnId::as_str))
        .bind(at)
        .bind(payload.kind())
        .bind(json)
        .fetch_all(&mut **conn)
        .await?;
        let Some((id, seq)) = rows.into_iter().next() else {
            return Err(sqlx::Error::RowNotFound.into());
        };
        conn.note_appended(1);
        conn.note_on_behalf(&nums.conversation_id);
        Ok(EventEnvelope {
            id,
            session_id: session_id.clone(),
            conversation_id: nums.conversation_id,
            seq,
            turn_id: turn_id.cloned(),
            at_ms: at,
            payload: payload.clone(),
        })
    }
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
                self.append_in(
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
            super::rows::select_events!(
                "WHERE e.session_num = (SELECT num FROM sessions WHERE id = $1) \
                 AND e.seq > $2 ORDER BY e.seq LIMIT $3"
            ),
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
            super::rows::select_events!(
                "WHERE e.conversation_num = (SELECT num FROM conversations WHERE id = $1) \
                 AND e.id > $2 ORDER BY e.id LIMIT $3"
            ),
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
