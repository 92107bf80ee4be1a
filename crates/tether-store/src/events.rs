//! Events (gap-free `seq` per session) and the conversation history.

use sqlx::{QueryBuilder, Sqlite, SqliteConnection};
use tether_proto::{
    ConversationId, EventEnvelope, EventPayload, HistoryMessage, MessageRole, SessionId, TurnId,
};

use crate::conns::Tx;
use crate::{Result, Store, StoreError, now_ms, rows};

/// Largest multi-row `INSERT` of [`append_many`]; batches are split into power-of-two
/// chunks up to this size, so only a handful of statement shapes are ever prepared.
const MAX_INSERT_ROWS: usize = 128;

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
    let at = now_ms();
    let json = serde_json::to_string(payload).map_err(|e| StoreError::Corrupt {
        table: "events",
        detail: e.to_string(),
    })?;
    // `fetch_all`: the statement runs to its end (and commits, outside a transaction).
    let rows: Vec<(i64, i64, String)> = sqlx::query_as(
        "INSERT INTO events (session_id, conversation_id, seq, turn_id, at, kind, payload) \
         SELECT id, conversation_id, last_seq + 1, ?, ?, ?, ? FROM sessions WHERE id = ? \
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
    Ok(EventEnvelope {
        id,
        session_id: session_id.clone(),
        conversation_id: conversation_id.into(),
        seq,
        turn_id: turn_id.cloned(),
        at_ms: at,
        payload: payload.clone(),
    })
}

/// Appends several events of one session inside an open transaction: one `UPDATE` of
/// the session's counter for the whole batch, then multi-row `INSERT`s (power-of-two
/// chunks), instead of two statements per event — each statement is a round trip to
/// sqlx's SQLite worker thread. Same result as calling [`append`] for each payload.
pub(crate) async fn append_many(
    conn: &mut Tx,
    session_id: &SessionId,
    turn_id: Option<&TurnId>,
    payloads: &[EventPayload],
) -> Result<Vec<EventEnvelope>> {
    if let [p] = payloads {
        return Ok(vec![append(conn, session_id, turn_id, p).await?]);
    }
    if payloads.is_empty() {
        return Ok(Vec::new());
    }
    let at = now_ms();
    let (last, conversation_id): (i64, String) = sqlx::query_as(
        "UPDATE sessions SET last_seq = last_seq + ?, updated_at = ? WHERE id = ? \
         RETURNING last_seq, conversation_id",
    )
    .bind(payloads.len() as i64)
    .bind(at)
    .bind(session_id.as_str())
    .fetch_one(&mut **conn)
    .await?;
    let first_seq = last - payloads.len() as i64 + 1;
    let mut out = Vec::with_capacity(payloads.len());
    let mut start = 0;
    while start < payloads.len() {
        let left = payloads.len() - start;
        let size = if left >= MAX_INSERT_ROWS {
            MAX_INSERT_ROWS
        } else {
            1 << left.ilog2()
        };
        let chunk = &payloads[start..start + size];
        let mut jsons = Vec::with_capacity(size);
        for p in chunk {
            jsons.push(serde_json::to_string(p).map_err(|e| StoreError::Corrupt {
                table: "events",
                detail: e.to_string(),
            })?);
        }
        let mut q = QueryBuilder::<Sqlite>::new(
            "INSERT INTO events (session_id, conversation_id, seq, turn_id, at, kind, payload) ",
        );
        q.push_values(
            chunk.iter().zip(jsons).enumerate(),
            |mut b, (i, (p, json))| {
                b.push_bind(session_id.as_str())
                    .push_bind(conversation_id.clone())
                    .push_bind(first_seq + (start + i) as i64)
                    .push_bind(turn_id.map(TurnId::as_str))
                    .push_bind(at)
                    .push_bind(p.kind())
                    .push_bind(json);
            },
        );
        q.push(" RETURNING id, seq");
        let mut ids: Vec<(i64, i64)> = q.build_query_as().fetch_all(&mut **conn).await?;
        // RETURNING does not promise an order: put the rows back in seq order.
        ids.sort_by_key(|(_, seq)| *seq);
        if ids.len() != size {
            return Err(StoreError::Corrupt {
                table: "events",
                detail: format!("inserted {} events, expected {size}", ids.len()),
            });
        }
        for ((id, seq), p) in ids.into_iter().zip(chunk) {
            out.push(EventEnvelope {
                id,
                session_id: session_id.clone(),
                conversation_id: conversation_id.as_str().into(),
                seq,
                turn_id: turn_id.cloned(),
                at_ms: at,
                payload: p.clone(),
            });
        }
        start += size;
    }
    conn.note_appended(out.len());
    Ok(out)
}

/// Appends a history entry inside an open transaction (and touches the conversation's
/// `updated_at`), in one query.
pub(crate) async fn add_message(
    conn: &mut SqliteConnection,
    conversation_id: &ConversationId,
    role: MessageRole,
    text: &str,
    session_id: Option<&SessionId>,
    turn_id: Option<&TurnId>,
) -> Result<i64> {
    // `fetch_all`, never `fetch_one`: with a row limit sqlx stops after the first row
    // and the second statement would not run.
    let rows: Vec<(i64,)> = sqlx::query_as(
        "INSERT INTO messages (conversation_id, role, text, session_id, turn_id, at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6) RETURNING id; \
         UPDATE conversations SET updated_at = ?6 WHERE id = ?1",
    )
    .bind(conversation_id.as_str())
    .bind(role.as_str())
    .bind(text)
    .bind(session_id.map(SessionId::as_str))
    .bind(turn_id.map(TurnId::as_str))
    .bind(now_ms())
    .fetch_all(&mut *conn)
    .await?;
    let [(id,)] = rows.as_slice() else {
        return Err(sqlx::Error::RowNotFound.into());
    };
    Ok(*id)
}

impl Store {
    /// Appends events of one session atomically: one event as one statement, more in
    /// one transaction.
    pub async fn append_events(
        &self,
        session_id: &SessionId,
        turn_id: Option<&TurnId>,
        payloads: &[EventPayload],
    ) -> Result<Vec<EventEnvelope>> {
        // One statement needs no transaction around it (BEGIN and COMMIT would be two
        // more round trips to sqlx's SQLite thread).
        let mut tx = match payloads {
            [_] => self.writer.autocommit().await?,
            _ => self.writer.begin().await?,
        };
        let out = append_many(&mut tx, session_id, turn_id, payloads).await?;
        self.commit_events(tx, &out).await?;
        Ok(out)
    }

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
            "SELECT * FROM events WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?",
        )
        .bind(session_id.as_str())
        .bind(after_seq)
        .bind(limit)
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
            "SELECT * FROM events WHERE conversation_id = ? AND id > ? ORDER BY id LIMIT ?",
        )
        .bind(conversation_id.as_str())
        .bind(after_id)
        .bind(limit)
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
            "SELECT * FROM messages WHERE conversation_id = ? AND id > ? ORDER BY id LIMIT ?",
        )
        .bind(conversation_id.as_str())
        .bind(after_id)
        .bind(limit)
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(rows::message).collect()
    }
}
