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
use super::usage::{Binds, bind_usage};
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
            tx.statement_done();
            return Ok(None);
        };
        let input: String = turn.try_get(2)?;
        let files: i64 = turn.try_get(3)?;
        let payload = EventPayload::TurnStarted {
            input,
            traceparent: traceparent.map(str::to_owned),
        };
        let (_, ev) = self
            .publish(tx, (&turn, &stored), turn_id, now, payload, Vec::new())
            .await?;
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
            tx.statement_done();
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
    /// usage row, more with streamed events): `sql` is the dialect's
    /// `FINISH_TURN_AT_ONCE` with the statuses the turn may end from, the usage row's
    /// statement when `usage` is given, and [`streamed_before_end`] when `streamed` is.
    pub(super) async fn finish_turn_at_once(
        &self,
        sql: &str,
        turn_id: &TurnId,
        parts: EndParts<'_>,
    ) -> Result<FinishedTurn> {
        let EndParts {
            end,
            event,
            message,
            usage,
            streamed,
        } = parts;
        let json = serde_json::to_string(event).map_err(|e| StoreError::Corrupt {
            table: "events",
            detail: e.to_string(),
        })?;
        let streamed_json = streamed
            .iter()
            .map(serde_json::to_string)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| StoreError::Corrupt {
                table: "events",
                detail: e.to_string(),
            })?;
        let mut tx = Tx::autocommit_on(self.writer.acquire().await?);
        let now = tx.now_ms();
        let q = bind_end(sqlx::query(sql), end, now, turn_id)
            .bind(event.kind())
            .bind(json)
            .bind(message.map(|m| m.role.as_str()))
            .bind(message.map(|m| m.text.as_str()));
        let mut q = match usage {
            Some(u) => bind_usage(q, u, now),
            None => q,
        };
        if !streamed.is_empty() {
            // Padded like `streamed_before_end`'s rows (skipped by the statement).
            let padded = streamed.len().next_power_of_two();
            for slot in 0..padded {
                let row = streamed.get(slot).zip(streamed_json.get(slot));
                let nth = row.map(|_| i64::try_from(slot).map_or(i64::MAX, |n| n + 1));
                q = q
                    .bind(nth)
                    .bind(row.map(|(p, _)| p.kind()))
                    .bind(row.map(|(_, j)| j.clone()));
            }
        }
        let mut ran = q.fetch_all(&mut *tx).await;
        // With streamed events, the first row says what their insert stored: the last
        // id, the count and the `seq`s (three columns).
        let mut stored_streamed = None;
        if let Ok(rows) = &mut ran
            && !streamed.is_empty()
            && rows.first().is_some_and(|r| r.len() == 3)
        {
            let first = rows.remove(0);
            let last: i64 = first.try_get(0)?;
            let n: i64 = first.try_get(1)?;
            let seqs: String = first.try_get(2)?;
            stored_streamed = Some((last, n, seqs));
        }
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
            tx.statement_done();
            return Ok(FinishedTurn {
                event: None,
                usage_stored,
                streamed: Vec::new(),
            });
        };
        let before = match stored_streamed {
            Some((last, n, seqs)) => streamed_envelopes(&turn, turn_id, now, streamed, last, n, &seqs)?,
            None if streamed.is_empty() => Vec::new(),
            None => {
                return Err(StoreError::Corrupt {
                    table: "events",
                    detail: "a turn's end did not say what its streamed events stored".into(),
                });
            }
        };
        let (streamed, ev) = self
            .publish(tx, (&turn, &stored), turn_id, now, event.clone(), before)
            .await?;
        Ok(FinishedTurn {
            event: Some(ev),
            usage_stored,
            streamed,
        })
    }

    /// The event a query of this module stored with `payload` (`rows`: the turn's, with
    /// its session and conversation first, and the event's id and `seq`), published
    /// after the events `before` it stored in the same transaction.
    async fn publish(
        &self,
        mut tx: Tx,
        (turn, stored): (&SqlRow, &SqlRow),
        turn_id: &TurnId,
        now: i64,
        payload: EventPayload,
        mut before: Vec<EventEnvelope>,
    ) -> Result<(Vec<EventEnvelope>, EventEnvelope)> {
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
        tx.note_appended(before.len() + 1);
        before.push(ev);
        self.commit_events(tx, &before).await?;
        let ev = before.pop().ok_or_else(|| StoreError::Corrupt {
            table: "events",
            detail: "a published event went missing".into(),
        })?;
        Ok((before, ev))
    }
}

/// Most streamed events stored with a turn's end in its one query (more: the general
/// path). The rows are padded to a power of two, so few statement shapes are prepared.
pub(super) const STREAMED_AT_END_MAX: usize = 64;

/// The statements that store a turn's last streamed events before its end in the one
/// query (SQLite): one `INSERT … SELECT` of `n` rows (padded to a power of two; each
/// row's parameters `(place, kind, payload)` numbered from `$first`; `seq` = the
/// session's largest, read by the statement before it inserts, + the place), only while
/// the turn may still end (`statuses`), then a row with the last id, the count and the
/// new rows' `seq`s in id order. `$7` is the time and `$8` the turn, the end's own.
pub(super) fn streamed_before_end(n: usize, first: usize, statuses: &str) -> String {
    let padded = n.next_power_of_two();
    let mut values = String::with_capacity(padded * 20);
    for i in 0..padded {
        let p = first + 3 * i;
        if i > 0 {
            values.push_str(", ");
        }
        values.push_str(&format!("(${p}, ${}, ${})", p + 1, p + 2));
    }
    format!(
        "INSERT INTO events (conversation_num, session_num, seq, turn_id, at, kind, payload) \
         SELECT c.num, s.num, COALESCE((SELECT e.seq FROM events e WHERE e.session_num = \
         s.num ORDER BY e.seq DESC LIMIT 1), 0) + v.column1, t.id, $7, v.column2, v.column3 \
         FROM (VALUES {values}) v JOIN turns t ON t.id = $8 JOIN sessions s ON s.id = \
         t.session_id JOIN conversations c ON c.id = t.conversation_id WHERE v.column1 IS \
         NOT NULL AND t.status IN {statuses} ORDER BY v.column1; SELECT last_insert_rowid(), \
         changes(), (SELECT json_group_array(seq) FROM (SELECT seq FROM events WHERE id > \
         last_insert_rowid() - changes() AND id <= last_insert_rowid() ORDER BY id))"
    )
}

/// A turn's end's first eight parameters: its status, result, stop reason, error code
/// and message, usage, the time (`now`) and the turn.
pub(super) fn bind_end<'q, Q: Binds<'q>>(q: Q, end: &'q TurnEnd, now: i64, turn_id: &'q TurnId) -> Q {
    q.with(end.status.as_str())
        .with(&end.result_text)
        .with(&end.stop_reason)
        .with(end.error.as_ref().map(|(c, _)| c.as_str()))
        .with(end.error.as_ref().map(|(_, m)| m.as_str()))
        .with(end.usage.as_ref().map(|u| u.to_string()))
        .with(now)
        .with(turn_id.as_str())
}

/// What a turn's end stores besides the turn's row ([`Db::finish_turn_with_usage`]).
pub(super) struct EndParts<'a> {
    pub end: &'a TurnEnd,
    pub event: &'a EventPayload,
    pub message: Option<&'a NewMessage>,
    pub usage: Option<&'a NewUsage>,
    pub streamed: &'a [EventPayload],
}

/// The envelopes of the streamed events a turn's end stored (`last`, `n`, `seqs`: what
/// the query said), in order.
fn streamed_envelopes(
    turn: &SqlRow,
    turn_id: &TurnId,
    now: i64,
    streamed: &[EventPayload],
    last: i64,
    n: i64,
    seqs: &str,
) -> Result<Vec<EventEnvelope>> {
    let corrupt = |detail: String| StoreError::Corrupt {
        table: "events",
        detail,
    };
    let seqs: Vec<i64> = serde_json::from_str(seqs).map_err(|e| corrupt(e.to_string()))?;
    if usize::try_from(n).ok() != Some(streamed.len()) || seqs.len() != streamed.len() {
        return Err(corrupt(format!(
            "a turn's end stored {n} of its {} streamed events ({} seqs)",
            streamed.len(),
            seqs.len()
        )));
    }
    let session_id = SessionId::from(turn.try_get::<String, _>(0)?);
    let conversation_id = ConversationId::from(turn.try_get::<String, _>(1)?);
    Ok(streamed
        .iter()
        .zip(seqs)
        .zip(last - n + 1..)
        .map(|((payload, seq), id)| EventEnvelope {
            id,
            session_id: session_id.clone(),
            conversation_id: conversation_id.clone(),
            seq,
            turn_id: Some(turn_id.clone()),
            at_ms: now,
            payload: payload.clone(),
        })
        .collect())
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
