//! Schedules in SQL (see `schedules/mod.rs`). A schedule and its waiting run change in
//! one transaction: the old run is cancelled, the new one added (its id is chosen by the
//! caller from the schedule and the due time, so adding it twice adds it once; a run
//! cancelled by a pause waits again on a resume, one that fired never runs again), and
//! the run that just fired marked.

use sqlx::Row;

use super::{Db, SqlRow};
use crate::Result;
use crate::schedules::ScheduleRow;
use crate::timers::NewTimer;
use tether_proto::{ConversationId, PersonId};

const COLUMNS: &str = "id, conversation_id, owner_id, owner_name, kind, expr, tz, prompt, \
     fresh_session, missed, state, failures, next_run_at, last_run_at, last_turn_id, note, \
     timer_id, start_at, created_at, updated_at";

fn schedule(row: &SqlRow) -> Result<ScheduleRow> {
    Ok(ScheduleRow {
        id: row.try_get("id")?,
        conversation_id: ConversationId::from(row.try_get::<String, _>("conversation_id")?),
        owner_id: row
            .try_get::<Option<String>, _>("owner_id")?
            .map(PersonId::from),
        owner_name: row.try_get("owner_name")?,
        kind: row.try_get("kind")?,
        expr: row.try_get("expr")?,
        tz: row.try_get("tz")?,
        prompt: row.try_get("prompt")?,
        fresh_session: row.try_get::<i64, _>("fresh_session")? != 0,
        missed: row.try_get("missed")?,
        state: row.try_get("state")?,
        failures: row.try_get("failures")?,
        next_run_ms: row.try_get("next_run_at")?,
        last_run_ms: row.try_get("last_run_at")?,
        last_turn_id: row.try_get("last_turn_id")?,
        note: row.try_get("note")?,
        timer_id: row.try_get("timer_id")?,
        start_ms: row.try_get("start_at")?,
        created_at_ms: row.try_get("created_at")?,
        updated_at_ms: row.try_get("updated_at")?,
    })
}

async fn add_run(tx: &mut super::conns::Tx, t: &NewTimer, now: i64) -> Result<()> {
    sqlx::query(
        "INSERT INTO timers (id, kind, conversation_id, account, due_at, state, attempt, \
         payload, created_at) VALUES ($1, $2, $3, $4, $5, 'waiting', $6, $7, $8) \
         ON CONFLICT (id) DO UPDATE SET state = 'waiting', claimed_by = NULL, \
         claimed_until = NULL, ended_at = NULL WHERE timers.state = 'cancelled'",
    )
    .bind(&t.id)
    .bind(&t.kind)
    .bind(t.conversation_id.as_str())
    .bind(&t.account)
    .bind(t.due_at_ms)
    .bind(t.attempt)
    .bind(&t.payload)
    .bind(now)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

impl Db {
    /// Stores a new schedule and its first run.
    pub async fn add_schedule(&self, s: &ScheduleRow, run: Option<&NewTimer>) -> Result<()> {
        let now = self.now_ms();
        let mut tx = self.writer.begin().await?;
        sqlx::query(&format!(
            "INSERT INTO schedules ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, \
             $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)"
        ))
        .bind(&s.id)
        .bind(s.conversation_id.as_str())
        .bind(s.owner_id.as_ref().map(PersonId::as_str))
        .bind(&s.owner_name)
        .bind(&s.kind)
        .bind(&s.expr)
        .bind(&s.tz)
        .bind(&s.prompt)
        .bind(i64::from(s.fresh_session))
        .bind(&s.missed)
        .bind(&s.state)
        .bind(s.failures)
        .bind(s.next_run_ms)
        .bind(s.last_run_ms)
        .bind(&s.last_turn_id)
        .bind(&s.note)
        .bind(&s.timer_id)
        .bind(s.start_ms)
        .bind(s.created_at_ms)
        .bind(s.updated_at_ms)
        .execute(&mut *tx)
        .await?;
        if let Some(run) = run {
            add_run(&mut tx, run, now).await?;
        }
        tx.commit_unchecked().await?;
        Ok(())
    }

    /// One schedule.
    pub async fn schedule(&self, id: &str) -> Result<Option<ScheduleRow>> {
        let row = sqlx::query(&format!("SELECT {COLUMNS} FROM schedules WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(schedule).transpose()
    }

    /// The schedules of a conversation (`None`: every one), oldest first.
    pub async fn schedules_of(
        &self,
        conversation_id: Option<&ConversationId>,
    ) -> Result<Vec<ScheduleRow>> {
        // A conversation's are an index range (`$1 IS NULL OR conversation_id = $1`
        // would read every schedule: D273).
        let rows = match conversation_id {
            Some(c) => {
                sqlx::query(&format!(
                    "SELECT {COLUMNS} FROM schedules WHERE conversation_id = $1 \
                     ORDER BY created_at, id"
                ))
                .bind(c.as_str())
                .fetch_all(&self.reader)
                .await?
            }
            None => {
                sqlx::query(&format!(
                    "SELECT {COLUMNS} FROM schedules ORDER BY created_at, id"
                ))
                .fetch_all(&self.reader)
                .await?
            }
        };
        rows.iter().map(schedule).collect()
    }

    /// Saves a schedule's changed fields; its waiting run becomes `run` (the one before
    /// is cancelled unless it is `run`), and `fired` (the run that just ran) is marked
    /// fired, all in one transaction. False when the schedule is gone, or when `fired` is
    /// no longer its run (it was paused or edited meanwhile: only `fired` is marked).
    pub async fn save_schedule(
        &self,
        s: &ScheduleRow,
        run: Option<&NewTimer>,
        fired: Option<&str>,
    ) -> Result<bool> {
        let now = self.now_ms();
        let mut tx = self.writer.begin().await?;
        let old: Option<(Option<String>,)> =
            sqlx::query_as("SELECT timer_id FROM schedules WHERE id = $1")
                .bind(&s.id)
                .fetch_optional(&mut *tx)
                .await?;
        let Some((old,)) = old else {
            return Ok(false);
        };
        // A run that fired while the schedule was changed (paused, edited, its run
        // replaced): the change stands; the run is only marked.
        let superseded = fired.is_some_and(|f| old.as_deref() != Some(f));
        if superseded {
            if let Some(fired) = fired {
                sqlx::query("UPDATE timers SET state = 'fired', ended_at = $1 WHERE id = $2 AND state = 'claimed'")
                    .bind(now)
                    .bind(fired)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit_unchecked().await?;
            return Ok(false);
        }
        if let Some(old) = old.clone().filter(|o| run.is_none_or(|r| &r.id != o)) {
            sqlx::query(
                "UPDATE timers SET state = 'cancelled', ended_at = $1 WHERE id = $2 \
                 AND state = 'waiting'",
            )
            .bind(now)
            .bind(old)
            .execute(&mut *tx)
            .await?;
        }
        if let Some(fired) = fired {
            sqlx::query("UPDATE timers SET state = 'fired', ended_at = $1 WHERE id = $2 AND state = 'claimed'")
                .bind(now)
                .bind(fired)
                .execute(&mut *tx)
                .await?;
        }
        if let Some(run) = run {
            add_run(&mut tx, run, now).await?;
        }
        // Only over the run read above: a change another writer committed meanwhile (on
        // PostgreSQL nothing locks the row between the read and here) stands.
        let saved = sqlx::query(
            "UPDATE schedules SET kind = $2, expr = $3, tz = $4, prompt = $5, \
             fresh_session = $6, missed = $7, state = $8, failures = $9, next_run_at = $10, \
             last_run_at = $11, last_turn_id = $12, note = $13, timer_id = $14, \
             start_at = $15, updated_at = $16 WHERE id = $1 \
             AND (timer_id = $17 OR ($17 IS NULL AND timer_id IS NULL))",
        )
        .bind(&s.id)
        .bind(&s.kind)
        .bind(&s.expr)
        .bind(&s.tz)
        .bind(&s.prompt)
        .bind(i64::from(s.fresh_session))
        .bind(&s.missed)
        .bind(&s.state)
        .bind(s.failures)
        .bind(s.next_run_ms)
        .bind(s.last_run_ms)
        .bind(&s.last_turn_id)
        .bind(&s.note)
        .bind(run.map(|r| r.id.as_str()))
        .bind(s.start_ms)
        .bind(now)
        .bind(old.as_deref())
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if saved == 0 {
            // Rolled back with the transaction: the other change stands.
            return Ok(false);
        }
        tx.commit_unchecked().await?;
        Ok(true)
    }

    /// Deletes a schedule and cancels its waiting run; whether it existed.
    pub async fn delete_schedule(&self, id: &str) -> Result<bool> {
        let now = self.now_ms();
        let mut tx = self.writer.begin().await?;
        sqlx::query(
            "UPDATE timers SET state = 'cancelled', ended_at = $1 WHERE state = 'waiting' \
             AND id = (SELECT timer_id FROM schedules WHERE id = $2)",
        )
        .bind(now)
        .bind(id)
        .execute(&mut *tx)
        .await?;
        let gone = sqlx::query("DELETE FROM schedules WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit_unchecked().await?;
        Ok(gone > 0)
    }
}
