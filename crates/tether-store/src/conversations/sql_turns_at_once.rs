//! A turn's start and end in one round trip to the database each (compiled once per
//! backend; used where the dialect has `START_TURN_AT_ONCE` and `FINISH_TURN_AT_ONCE`,
//! i.e. SQLite, and only where no fence is checked: this node holds no epoch).
//!
//! The general paths (`sql_turns.rs`) cost four and five round trips: `BEGIN`, the
//! turn's row, its event (and the history line), `COMMIT`. Through sqlx's SQLite thread
//! each one is two context switches, a fixed part of tether's share of every turn
//! (issue 33 item 2). Here one query begins its own transaction, runs each statement
//! only when the one before changed a row, returns what the caller needs, and commits.
//! Failed midway, it may leave its transaction open: the connection is closed, which
//! rolls it back.

use sqlx::Row;
use tether_proto::{ConversationId, EventEnvelope, EventPayload, MessageRole, SessionId, TurnId};

use super::Db;
use super::SqlRow;
use super::conns::Tx;
use super::usage::bind_usage;
use crate::{
    FinishedTurn, NewMessage, NewTurn, NewUsage, Result, StartedTurn, StoreError, TurnEnd,
};

impl Db {
    /// [`Db::start_turn`] in one round trip instead of four: `sql` is the dialect's
    /// `START_TURN_AT_ONCE`.
    pub(super) async fn start_turn_at_once(
        &self,
        sql: &str,
        turn_id: &TurnId,
        traceparent: Option<&str>,
    ) -> Result<Option<StartedTurn>> {
        let mut tx = Tx::autocommit_on(self.writer.acquire().await?);
        let now = tx.now_ms();
        let ran = sqlx::query(sql)
            .bind(now)
            .bind(turn_id.as_str())
            .bind(traceparent)
            .fetch_all(&mut *tx)
            .await;
        let Some((turn, stored)) = two_rows(&mut tx, ran, "a turn's start")? else {
            return Ok(None);
        };
        let input: String = turn.try_get(2)?;
        let files: i64 = turn.try_get(3)?;
        let payload = EventPayload::TurnStarted {
            input,
            traceparent: traceparent.map(str::to_owned),
        };
        let ev = self.publish(tx, (&turn, &stored), turn_id, now, payload).await?;
        Ok(Some(StartedTurn {
            event: ev,
            has_attachments: files > 0,
        }))
    }

    /// [`Db::insert_started_turn`] in one round trip instead of two commits of one each:
    /// `sql` is the dialect's `ADD_STARTED_TURN_AT_ONCE`.
    pub(super) async fn insert_started_turn_at_once(
        &self,
        sql: &str,
        t: &NewTurn,
        traceparent: Option<&str>,
    ) -> Result<StartedTurn> {
        let mut tx = Tx::autocommit_on(self.writer.acquire().await?);
        let now = tx.now_ms();
        let ran = sqlx::query(sql)
            .bind(t.id.as_str())
            .bind(t.session_id.as_str())
            .bind(t.conversation_id.as_str())
            .bind(&t.input)
            .bind(now)
            .bind(MessageRole::User.as_str())
            .bind(traceparent)
            .fetch_all(&mut *tx)
            .await;
        // The message's id (one column), then the event's id, `seq` and the turn's files.
        let Some((_message, stored)) = two_rows(&mut tx, ran, "a turn's insert")? else {
            return Err(sqlx::Error::RowNotFound.into());
        };
        let files: i64 = stored.try_get(2)?;
        let ev = EventEnvelope {
            id: stored.try_get(0)?,
            session_id: t.session_id.clone(),
            conversation_id: t.conversation_id.clone(),
            seq: stored.try_get(1)?,
            turn_id: Some(t.id.clone()),
            at_ms: now,
            payload: EventPayload::TurnStarted {
                input: t.input.clone(),
                traceparent: traceparent.map(str::to_owned),
            },
        };
        tx.note_on_behalf(&t.conversation_id);
        tx.note_appended(1);
        self.commit_events(tx, std::slice::from_ref(&ev)).await?;
        Ok(StartedTurn {
            event: ev,
            has_attachments: files > 0,
        })
    }

    /// [`Db::finish_turn_with_usage`] in one round trip instead of five (six with a
    /// usage row): `sql` is the dialect's `FINISH_TURN_AT_ONCE` with the statuses the
    /// turn may end from, and the usage row's statement when `usage` is given.
    pub(super) async fn finish_turn_at_once(
        &self,
        sql: &str,
        turn_id: &TurnId,
        end: &TurnEnd,
        event: &EventPayload,
        message: Option<&NewMessage>,
        usage: Option<&NewUsage>,
    ) -> Result<FinishedTurn> {
        let json = serde_json::to_string(event).map_err(|e| StoreError::Corrupt {
            table: "events",
            detail: e.to_string(),
        })?;
        let mut tx = Tx::autocommit_on(self.writer.acquire().await?);
        let now = tx.now_ms();
        let q = sqlx::query(sql)
            .bind(end.status.as_str())
            .bind(&end.result_text)
            .bind(&end.stop_reason)
            .bind(end.error.as_ref().map(|(c, _)| c.as_str()))
            .bind(end.error.as_ref().map(|(_, m)| m.as_str()))
            .bind(end.usage.as_ref().map(|u| u.to_string()))
            .bind(now)
            .bind(turn_id.as_str())
            .bind(event.kind())
            .bind(json)
            .bind(message.map(|m| m.role.as_str()))
            .bind(message.map(|m| m.text.as_str()));
        let q = match usage {
            Some(u) => bind_usage(q, u, now),
            None => q,
        };
        let mut ran = q.fetch_all(&mut *tx).await;
        // The usage row's id comes last, alone in its row (the turn's and the event's
        // rows have two columns each).
        let mut usage_stored = false;
        if let Ok(rows) = &mut ran
            && usage.is_some()
            && rows.last().is_some_and(|r| r.len() == 1)
        {
            rows.pop();
            usage_stored = true;
        }
        let Some((turn, stored)) = two_rows(&mut tx, ran, "a turn's end")? else {
            return Ok(FinishedTurn {
                event: None,
                usage_stored,
            });
        };
        let ev = self.publish(tx, (&turn, &stored), turn_id, now, event.clone()).await?;
        Ok(FinishedTurn {
            event: Some(ev),
            usage_stored,
        })
    }

    /// The event a query of this module stored with `payload` (`rows`: the turn's, with
    /// its session and conversation first, and the event's id and `seq`), published.
    async fn publish(
        &self,
        mut tx: Tx,
        (turn, stored): (&SqlRow, &SqlRow),
        turn_id: &TurnId,
        now: i64,
        payload: EventPayload,
    ) -> Result<EventEnvelope> {
        let conversation_id = ConversationId::from(turn.try_get::<String, _>(1)?);
        let ev = EventEnvelope {
            id: stored.try_get(0)?,
            session_id: SessionId::from(turn.try_get::<String, _>(0)?),
            conversation_id: conversation_id.clone(),
            seq: stored.try_get(1)?,
            turn_id: Some(turn_id.clone()),
            at_ms: now,
            payload,
        };
        tx.note_on_behalf(&conversation_id);
        tx.note_appended(1);
        self.commit_events(tx, std::slice::from_ref(&ev)).await?;
        Ok(ev)
    }

}

/// The answer of a query that changes a turn, then stores its event: committed, and
/// either no row (the turn was not in a state to change) or the turn's row and the
/// event's.
fn two_rows(
    tx: &mut Tx,
    ran: std::result::Result<Vec<SqlRow>, sqlx::Error>,
    what: &str,
) -> Result<Option<(SqlRow, SqlRow)>> {
    let rows = match ran {
        Ok(rows) => rows,
        Err(e) => {
            tx.own_transaction_failed(&e);
            return Err(e.into());
        }
    };
    let mut rows = rows.into_iter();
    match (rows.next(), rows.next(), rows.next()) {
        (None, _, _) => Ok(None),
        (Some(turn), Some(stored), None) => Ok(Some((turn, stored))),
        (Some(_), _, _) => Err(StoreError::Corrupt {
            table: "turns",
            detail: format!("{what} returned other rows than a turn and its event"),
        }),
    }
}
