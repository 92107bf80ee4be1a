//! Turns: queued, started, waiting, finished (immutable once terminal).

use tether_proto::{
    ConversationId, EventEnvelope, EventPayload, MessageRole, SessionId, Turn, TurnId, TurnStatus,
};

use super::events::add_message;

use sqlx::Row;

use super::conns::Tx;
use super::{Db, rows};
use super::usage::{ALONE, alone_from, bind_usage};
use crate::{
    FinishedTurn, NewMessage, NewTurn, NewUsage, Result, StartedTurn, TurnEnd, TurnPlace, rules,
};

/// How SQLite's one-query writes begin their transaction.
const BEGIN_SQLITE: &str = "BEGIN IMMEDIATE; ";

/// The usage row's parameters ([`ALONE`]'s `$1` to `$18`).
const USAGE_PARAMS: usize = 18;

/// The usage row's statement where it follows a turn's end in one query: its parameters
/// after the end's twelve (`FINISH_TURN_AT_ONCE`).
static LEDGER_AFTER_END: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| format!("; {}", alone_from(13)));

const OPEN: &str = "('queued', 'running', 'waiting_approval', 'waiting_user')";

/// Inserts turn `t` created at `now` inside an open transaction, with its input as the
/// person's message in the history when `by_message`: the one turn insert (a message's
/// turn, a delegated task's first turn, a continuation).
pub(super) async fn add_turn(tx: &mut Tx, t: &NewTurn, by_message: bool, now: i64) -> Result<()> {
    sqlx::query(
        "INSERT INTO turns (id, session_id, conversation_id, input, status, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(t.id.as_str())
    .bind(t.session_id.as_str())
    .bind(t.conversation_id.as_str())
    .bind(&t.input)
    .bind(t.status.as_str())
    .bind(now)
    .execute(&mut **tx)
    .await?;
    if by_message {
        add_message(
            tx,
            &t.conversation_id,
            MessageRole::User,
            &t.input,
            Some(&t.session_id),
            Some(&t.id),
        )
        .await?;
    }
    Ok(())
}

impl Db {
    /// Inserts a turn (queued or about to run) with the person's message in the history.
    pub async fn insert_turn(&self, t: &NewTurn, by_message: bool) -> Result<Turn> {
        let now = self.now_ms();
        if by_message && !self.shared.held.any() {
            // No fence to check (this node holds no epoch): the turn, its history line
            // and the conversation's `updated_at` in one round trip to the database
            // instead of four (`BEGIN`, two statements, `COMMIT`).
            let mut tx = Tx::autocommit_on(self.writer.acquire().await?);
            let added: std::result::Result<Vec<(i64,)>, sqlx::Error> =
                sqlx::query_as(super::dialect::ADD_TURN_WITH_MESSAGE)
                    .bind(t.id.as_str())
                    .bind(t.session_id.as_str())
                    .bind(t.conversation_id.as_str())
                    .bind(&t.input)
                    .bind(t.status.as_str())
                    .bind(now)
                    .bind(MessageRole::User.as_str())
                    .fetch_all(&mut *tx)
                    .await;
            match added {
                Ok(rows) if rows.len() == 1 => tx.commit_unchecked().await?,
                Ok(rows) => {
                    return Err(crate::StoreError::Corrupt {
                        table: "messages",
                        detail: format!("a history line's insert returned {} rows", rows.len()),
                    });
                }
                Err(e) => {
                    tx.own_transaction_failed(&e);
                    return Err(e.into());
                }
            }
        } else {
            let mut tx = self.writer.begin().await?;
            add_turn(&mut tx, t, by_message, now).await?;
            // The turn is written for its conversation even without a history line.
            tx.note_on_behalf(&t.conversation_id);
            self.commit_fenced(tx).await?;
        }
        self.changed(&t.conversation_id);
        Ok(Turn {
            id: t.id.clone(),
            session_id: t.session_id.clone(),
            conversation_id: t.conversation_id.clone(),
            input: t.input.clone(),
            status: t.status,
            result_text: None,
            stop_reason: None,
            error_code: None,
            error_message: None,
            created_at_ms: now,
            started_at_ms: None,
            ended_at_ms: None,
            usage: None,
        })
    }

    /// Marks a queued turn running and records `turn_started`, together; whether files
    /// were given to it comes with the start. `None` when the turn is not queued any
    /// more (it already ran or ended).
    pub async fn start_turn(
        &self,
        turn_id: &TurnId,
        traceparent: Option<&str>,
    ) -> Result<Option<StartedTurn>> {
        if let Some(sql) = super::dialect::START_TURN_AT_ONCE
            && !self.shared.held.any()
        {
            return self.start_turn_at_once(sql, turn_id, traceparent).await;
        }
        let mut tx = self.writer.begin().await?;
        let Some((started, conversation_id)) =
            self.start_in(&mut tx, turn_id, traceparent).await?
        else {
            tx.rollback().await?;
            return Ok(None);
        };
        self.commit_events(tx, std::slice::from_ref(&started.event))
            .await?;
        if super::dialect::FINISH_TURN_FENCED.is_some() {
            // Its end checks the fence in its one statement (`turns_fenced`).
            self.shared.held.note_turn(turn_id, &conversation_id);
        }
        Ok(Some(started))
    }

    /// A message's turn stored already running: the turn, the person's message in the
    /// history and its `turn_started` event in one commit, instead of
    /// [`Self::insert_turn`] then [`Self::start_turn`] (two commits on every turn's path)
    /// when the session's actor runs it at once. `t.status` is not read. Fails with
    /// `RowNotFound` when `t`'s session is not its conversation's.
    pub async fn insert_started_turn(
        &self,
        t: &NewTurn,
        traceparent: Option<&str>,
    ) -> Result<StartedTurn> {
        if let Some(sql) = super::dialect::ADD_STARTED_TURN_AT_ONCE
            && !self.shared.held.any()
        {
            return self.insert_started_turn_at_once(sql, t, traceparent).await;
        }
        if let Some(sql) = super::dialect::ADD_STARTED_TURN_FENCED {
            return self.insert_started_turn_fenced(sql, t, traceparent).await;
        }
        let queued = NewTurn {
            status: TurnStatus::Queued,
            ..t.clone()
        };
        let mut tx = self.writer.begin().await?;
        add_turn(&mut tx, &queued, true, self.now_ms()).await?;
        let started = self.start_in(&mut tx, &t.id, traceparent).await?;
        // The event goes to the session's conversation: it must be the turn's.
        let Some((started, _)) =
            started.filter(|(s, _)| s.event.conversation_id == t.conversation_id)
        else {
            tx.rollback().await?;
            return Err(sqlx::Error::RowNotFound.into());
        };
        self.commit_events(tx, std::slice::from_ref(&started.event))
            .await?;
        Ok(started)
    }

    /// Marks queued turn `turn_id` running and appends its `turn_started` event, in `tx`,
    /// with the turn's conversation; `None` when it is not queued.
    async fn start_in(
        &self,
        tx: &mut Tx,
        turn_id: &TurnId,
        traceparent: Option<&str>,
    ) -> Result<Option<(StartedTurn, ConversationId)>> {
        let row: Option<(String, String, i64, String)> = sqlx::query_as(
            "UPDATE turns SET status = 'running', started_at = $1 WHERE id = $2 \
             AND status = 'queued' RETURNING session_id, input, \
             (SELECT COUNT(*) FROM attachments WHERE turn_id = $2), conversation_id",
        )
        .bind(self.now_ms())
        .bind(turn_id.as_str())
        .fetch_optional(&mut **tx)
        .await?;
        let Some((session_id, input, files, conversation_id)) = row else {
            return Ok(None);
        };
        let session_id = SessionId::from(session_id);
        let ev = self
            .append_in(
                tx,
                &session_id,
                Some(turn_id),
                &EventPayload::TurnStarted {
                    input,
                    traceparent: traceparent.map(str::to_owned),
                },
            )
            .await?;
        let started = StartedTurn {
            event: ev,
            has_attachments: files > 0,
        };
        Ok(Some((started, ConversationId::from(conversation_id))))
    }

    /// Ends a turn: status, result, the terminal event and a history entry, together.
    /// Returns `None` when the turn machine does not allow the step from its status (it
    /// had already ended: terminal states are immutable).
    pub async fn finish_turn(
        &self,
        turn_id: &TurnId,
        end: &TurnEnd,
        event: &EventPayload,
        message: Option<&NewMessage>,
    ) -> Result<Option<EventEnvelope>> {
        let finished = self
            .finish_turn_with_usage(turn_id, end, event, message, None, &[])
            .await?;
        Ok(finished.event)
    }

    /// [`Self::finish_turn`], with the turn's usage row (the one a turn whose agent
    /// reported nothing gets) in the same transaction when no budget counts it, and the
    /// turn's last streamed events (`streamed`, the agent's output still waiting for its
    /// batch to be stored when the prompt ended) before its end: the turn's end, its
    /// last output and its usage become visible together, in one commit instead of up
    /// to three on the turn's path. The usage row is stored even when the turn had
    /// already ended; the streamed events only with the end (never after it).
    pub async fn finish_turn_with_usage(
        &self,
        turn_id: &TurnId,
        end: &TurnEnd,
        event: &EventPayload,
        message: Option<&NewMessage>,
        usage: Option<&NewUsage>,
        streamed: &[EventPayload],
    ) -> Result<FinishedTurn> {
        let started = std::time::Instant::now();
        let finished = self
            .finish_turn_parts(turn_id, end, event, message, usage, streamed)
            .await?;
        if !finished.streamed.is_empty() {
            // A commit of streamed events, as a group commit is (`ops`).
            metrics::histogram!(crate::ops::COMMIT_SECONDS)
                .record(started.elapsed().as_secs_f64());
            metrics::histogram!(crate::ops::GROUP_EVENTS).record(finished.streamed.len() as f64);
        }
        Ok(finished)
    }

    /// [`Self::finish_turn_with_usage`] without its figures.
    async fn finish_turn_parts(
        &self,
        turn_id: &TurnId,
        end: &TurnEnd,
        event: &EventPayload,
        message: Option<&NewMessage>,
        usage: Option<&NewUsage>,
        streamed: &[EventPayload],
    ) -> Result<FinishedTurn> {
        if let Some((head, tail)) = super::dialect::FINISH_TURN_AT_ONCE
            && !self.shared.held.any()
            && streamed.len() <= super::turns_at_once::STREAMED_AT_END_MAX
        {
            let statuses = rules::turns_that_can_become(end.status);
            let ledger = match usage {
                Some(_) => LEDGER_AFTER_END.as_str(),
                None => "",
            };
            let sql = match streamed.len() {
                0 => format!("{head}{statuses}{tail}{ledger}; COMMIT"),
                n => {
                    // The streamed rows' parameters follow the end's twelve and the
                    // usage row's.
                    let first = 13 + if usage.is_some() { USAGE_PARAMS } else { 0 };
                    let before = super::turns_at_once::streamed_before_end(n, first, &statuses);
                    let head = head.strip_prefix(BEGIN_SQLITE).unwrap_or(head);
                    format!("{BEGIN_SQLITE}{before}; {head}{statuses}{tail}{ledger}; COMMIT")
                }
            };
            let parts = super::turns_at_once::EndParts {
                end,
                event,
                message,
                usage,
                streamed,
            };
            return self.finish_turn_at_once(&sql, turn_id, parts).await;
        }
        if let Some(parts) = super::dialect::FINISH_TURN_FENCED {
            // The epoch to check is the one of the conversation this node started the
            // turn in; none to check while no epoch is held at all.
            let conversation = self.shared.held.turn_conversation(turn_id);
            if conversation.is_some() || !self.shared.held.any() {
                let end_parts = super::turns_at_once::EndParts {
                    end,
                    event,
                    message,
                    usage,
                    streamed,
                };
                return self
                    .finish_turn_fenced(parts, turn_id, conversation.as_ref(), end_parts)
                    .await;
            }
        }
        let mut tx = self.writer.begin().await?;
        let now = self.now_ms();
        let usage_stored = match usage {
            Some(u) => bind_usage(sqlx::query_as::<_, (i64,)>(ALONE), u, now)
                .fetch_optional(&mut *tx)
                .await?
                .is_some(),
            None => false,
        };
        let sql = format!(
            "UPDATE turns SET status = $1, result_text = $2, stop_reason = $3, error_code = $4, \
             error_message = $5, usage = $6, ended_at = $7 WHERE id = $8 AND status IN {} \
             RETURNING session_id, conversation_id",
            rules::turns_that_can_become(end.status)
        );
        let row: Option<(String, String)> =
            super::turns_at_once::bind_end(sqlx::query_as(&sql), end, now, turn_id)
                .fetch_optional(&mut *tx)
                .await?;
        let Some((session_id, conversation_id)) = row else {
            // Not ended here: by this node's own earlier end, or by a survivor's recovery
            // after a take-over. A node that no longer owns the conversation learns it
            // here (`Fenced`), as the write of its output would have told it.
            if self.shared.held.any()
                && let Some((c,)) = sqlx::query_as::<_, (String,)>(
                    "SELECT conversation_id FROM turns WHERE id = $1",
                )
                .bind(turn_id.as_str())
                .fetch_optional(&mut *tx)
                .await?
            {
                tx.note_on_behalf(&ConversationId::from(c));
                self.check_fence(&mut tx).await?;
            }
            // The ledger is not fenced (as `record_usage`): its row stays (a refused
            // fence above rolled it back with the rest; the caller then stores it with
            // `record_usage`, as `usage_stored` says).
            if usage_stored {
                tx.commit_unchecked().await?;
            }
            return Ok(FinishedTurn {
                event: None,
                usage_stored,
                streamed: Vec::new(),
            });
        };
        let (session_id, conversation_id) = (
            SessionId::from(session_id),
            ConversationId::from(conversation_id),
        );
        // The turn's last output, then its end: `seq` in that order.
        let mut events = Vec::with_capacity(streamed.len() + 1);
        for payload in streamed {
            events.push(
                self.append_in(&mut tx, &session_id, Some(turn_id), payload)
                    .await?,
            );
        }
        events.push(self.append_in(&mut tx, &session_id, Some(turn_id), event).await?);
        if let Some(m) = message {
            add_message(
                &mut tx,
                &conversation_id,
                m.role,
                &m.text,
                Some(&session_id),
                Some(turn_id),
            )
            .await?;
        }
        self.commit_events(tx, &events).await?;
        let ev = events.pop();
        Ok(FinishedTurn {
            event: ev,
            usage_stored,
            streamed: events,
        })
    }

    pub async fn get_turn(&self, id: &TurnId) -> Result<Option<Turn>> {
        let row = sqlx::query("SELECT * FROM turns WHERE id = $1")
            .bind(id.as_str())
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(rows::turn).transpose()
    }

    /// Up to `limit` of a session's turns, oldest first, after the place `after` (a turn's
    /// `(created_at, rowid)`, as returned beside each turn); `None`: from the first.
    pub async fn session_turns(
        &self,
        session_id: &SessionId,
        after: Option<TurnPlace>,
        limit: u32,
    ) -> Result<Vec<(Turn, TurnPlace)>> {
        let (at, row) = after.map_or((i64::MIN, i64::MIN), |p| (p.created_at_ms, p.row));
        // Keyset: `created_at >= at` bounds the index range; the rest breaks ties.
        let rows = sqlx::query(
            "SELECT *, rowid AS page_row FROM turns WHERE session_id = $1 AND created_at >= $2 \
             AND (created_at > $2 OR rowid > $3) ORDER BY created_at, rowid LIMIT $4",
        )
        .bind(session_id.as_str())
        .bind(at)
        .bind(row)
        .bind(i64::from(limit))
        .fetch_all(&self.reader)
        .await?;
        rows.iter()
            .map(|r| {
                let turn = rows::turn(r)?;
                let place = TurnPlace {
                    created_at_ms: turn.created_at_ms,
                    row: r.try_get("page_row")?,
                };
                Ok((turn, place))
            })
            .collect()
    }

    /// The conversation's turns that have not ended, oldest first.
    pub async fn open_turns(&self, conversation_id: &ConversationId) -> Result<Vec<Turn>> {
        let rows = sqlx::query(&format!(
            "SELECT * FROM turns WHERE conversation_id = $1 AND status IN {OPEN} \
             ORDER BY created_at, rowid"
        ))
        .bind(conversation_id.as_str())
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(rows::turn).collect()
    }

    /// Sets a non-terminal status (running ↔ waiting); terminal turns are left alone.
    pub async fn set_turn_waiting(&self, turn_id: &TurnId, status: TurnStatus) -> Result<()> {
        sqlx::query(&format!(
            "UPDATE turns SET status = $1 WHERE id = $2 AND status IN {OPEN}"
        ))
        .bind(status.as_str())
        .bind(turn_id.as_str())
        .execute(&self.writer)
        .await?;
        Ok(())
    }
}
