//! A group of events stored in one round trip to the database (compiled once per
//! backend; used where the dialect has `EVENTS_AT_ONCE`, i.e. SQLite).
//!
//! The general path (`sql_append.rs`) costs four round trips per group: `BEGIN`, the
//! sessions' last `seq`s, the `INSERT`, `COMMIT`. Through sqlx's SQLite thread each one
//! is two context switches, which made them most of a group's cost (issue 33 item 1).
//! Here one query of two statements: an `INSERT` of every event with its `seq` computed
//! by the statement (the session's largest + the event's place among the group's events
//! of that session), which commits on its own (one statement: all or nothing), then a
//! read of the new rows' `seq`s as one row; the ids come with the `INSERT`'s result.
//! Each statement's answer is one more message from sqlx's SQLite thread, most often one
//! more wake-up of a runtime thread: an explicit `BEGIN` … `COMMIT` around them cost two
//! more (measured: 7.7 → 3.8 context switches per group of 64, +17 % events/s). Only
//! where no fence is checked (this node holds no epoch), and for groups of at most
//! [`MAX_ROWS`] events; the rows are padded to a power of two with rows the statement
//! skips, so only a handful of statement shapes are ever prepared.

use tether_proto::{EventEnvelope, SessionId, TurnId};

use super::append::READ_BACK_LIMIT;
use super::conns::{Conn, Tx};
use super::{Db, Sql};
use crate::events::append::Pending;
use crate::events::numbers::SessionNums;
use crate::{Result, StoreError};

/// Most events stored at once (larger groups take the general path).
pub(super) const MAX_ROWS: usize = 128;

/// One event to insert: its batch, its session's numbers and its place among the
/// group's events of that session (1 for the first).
struct Row<'a> {
    pending: &'a Pending,
    nums: SessionNums,
    /// Its session's place in the group's list of sessions.
    slot: usize,
    nth: i64,
    payload: &'a tether_proto::EventPayload,
    json: String,
}

impl Db {
    /// Whether `group` is stored by [`Db::store_at_once`].
    pub(super) fn at_once(&self, group: &[Pending]) -> bool {
        super::dialect::EVENTS_AT_ONCE.is_some()
            && !self.shared.held.any()
            && group.iter().map(|p| p.payloads.len()).sum::<usize>() <= MAX_ROWS
    }

    /// Stores every batch of `group` on the writer `conn` with one `INSERT` statement,
    /// which commits on its own (see the module header); the envelopes in queue order,
    /// published. Failed, nothing of it was stored.
    pub(super) async fn store_at_once(
        &self,
        conn: Conn,
        group: &[Pending],
    ) -> Result<Vec<EventEnvelope>> {
        let Some((head, tail)) = super::dialect::EVENTS_AT_ONCE else {
            return Err(corrupt("no one-query append on this backend".into()));
        };
        let mut tx = Tx::autocommit_on(conn);
        let at = tx.now_ms();
        let mut rows: Vec<Row<'_>> =
            Vec::with_capacity(group.iter().map(|p| p.payloads.len()).sum());
        // Per session: its id and how many of its events the group has so far.
        let mut counts: Vec<(&SessionId, i64)> = Vec::new();
        for p in group {
            let nums = self.session_nums(&mut tx, &p.session_id).await?;
            tx.note_on_behalf(&nums.conversation_id);
            let slot = match counts.iter().position(|(s, _)| **s == p.session_id) {
                Some(i) => i,
                None => {
                    counts.push((&p.session_id, 0));
                    counts.len() - 1
                }
            };
            for payload in &p.payloads {
                let json = serde_json::to_string(payload).map_err(|e| corrupt(e.to_string()))?;
                let Some((_, count)) = counts.get_mut(slot) else {
                    return Err(corrupt("a session's count went missing".into()));
                };
                *count += 1;
                rows.push(Row {
                    pending: p,
                    nums: nums.clone(),
                    slot,
                    nth: *count,
                    payload,
                    json,
                });
            }
        }
        // Every session's last `seq` known (see `numbers`): the `INSERT` alone, its `seq`s
        // given, one statement and one answer.
        let known: Option<Vec<i64>> = counts
            .iter()
            .map(|(id, _)| self.shared.numbers.last_seq(id))
            .collect();
        let mut stored = None;
        if let (Some(lasts), Some((head, tail))) = (known, super::dialect::EVENTS_WITH_SEQS) {
            let seq_of = |r: &Row<'_>| lasts.get(r.slot).map_or(0, |last| last + r.nth);
            let q = values_query(head, tail, &rows, at, seq_of);
            match self.insert_known(&mut tx, q, rows.len()).await? {
                Some(last) => stored = Some((last, rows.iter().map(seq_of).collect())),
                // The database had more (something else wrote): forgotten, and read.
                None => {
                    for (id, _) in &counts {
                        self.shared.numbers.forget_seq(id);
                    }
                }
            }
        }
        let (last, seqs) = match stored {
            Some(stored) => stored,
            None => {
                let q = values_query(head, tail, &rows, at, |r| r.nth);
                self.insert_at_once(&mut tx, q, rows.len()).await?
            }
        };
        let first = last - seqs.len() as i64 + 1;
        let mut out = Vec::with_capacity(rows.len());
        // Each session's events follow each other in the group's order: `seq` less
        // the event's place is the same for all of them.
        let mut bases: Vec<(i64, i64)> = Vec::new();
        for ((r, id), seq) in rows.iter().zip(first..).zip(seqs) {
            let base = seq - r.nth;
            match bases.iter().find(|(s, _)| *s == r.nums.session) {
                Some((_, b)) if *b != base => {
                    return Err(stored_but(format!(
                        "event {seq} of session {} stored out of order",
                        r.pending.session_id
                    )));
                }
                Some(_) => {}
                None => bases.push((r.nums.session, base)),
            }
            out.push(EventEnvelope {
                id,
                session_id: r.pending.session_id.clone(),
                conversation_id: r.nums.conversation_id.clone(),
                seq,
                turn_id: r.pending.turn_id.clone(),
                at_ms: at,
                payload: r.payload.clone(),
            });
        }
        tx.note_appended(out.len());
        self.commit_events(tx, &out).await?;
        Ok(out)
    }

    /// Runs the one `INSERT` of `query`, whose `seq`s it gives; the last id it stored,
    /// or `None` when the unique index refused a `seq` (nothing was stored: one
    /// statement).
    async fn insert_known(
        &self,
        tx: &mut Tx,
        mut query: sqlx::QueryBuilder<'_, Sql>,
        rows: usize,
    ) -> Result<Option<i64>> {
        match query.build().execute(&mut **tx).await {
            Ok(done) => match super::inserted_ids(&done) {
                Some((last, n)) if usize::try_from(n).ok() == Some(rows) => Ok(Some(last)),
                other => Err(stored_but(format!(
                    "the insert of {rows} said {other:?} (last id, rows)"
                ))),
            },
            Err(e) if e.as_database_error().is_some_and(|d| d.is_unique_violation()) => {
                tracing::debug!("a session's remembered seq was behind the database's");
                Ok(None)
            }
            Err(e) => {
                tx.statement_failed(&e);
                Err(e.into())
            }
        }
    }

    /// Runs the two statements of `query` (the `INSERT` of `rows` events, then the read
    /// of their `seq`s); the last id and the `seq`s in id order. The `INSERT` commits on
    /// its own: failed, nothing was stored. Should the read fail after it (only a broken
    /// promise of SQLite's), the events are stored all the same: their `seq`s are read
    /// again by id; whatever goes wrong after the `INSERT` is
    /// [`StoreError::AppendAbandoned`], never an error the caller would retry (it
    /// would store them twice).
    async fn insert_at_once(
        &self,
        tx: &mut Tx,
        mut query: sqlx::QueryBuilder<'_, Sql>,
        rows: usize,
    ) -> Result<(i64, Vec<i64>)> {
        let query = query.build();
        use futures::TryStreamExt;
        use sqlx::{Either, Executor, Row};
        let mut inserted: Option<(i64, u64)> = None;
        let mut seqs: Option<String> = None;
        let read = async {
            let mut steps = (&mut **tx).fetch_many(query);
            while let Some(step) = steps.try_next().await? {
                match step {
                    // The first statement's result is the `INSERT`'s.
                    Either::Left(done) if inserted.is_none() => {
                        inserted = super::inserted_ids(&done);
                    }
                    Either::Left(_) => {}
                    Either::Right(row) => seqs = Some(row.try_get::<String, _>(0)?),
                }
            }
            Ok::<_, sqlx::Error>(())
        }
        .await;
        let (last, n) = match (read, inserted) {
            (Ok(()), Some(ids)) => ids,
            (Ok(()), None) => return Err(stored_but("the insert said no ids".into())),
            (Err(e), Some((last, n))) if n > 0 => {
                tracing::warn!(error = %e, events = n, "events were stored but their seqs could not be read; reading them again");
                tx.statement_failed(&e);
                match self.seqs_of(last - n as i64 + 1, last).await {
                    Ok(read) => seqs = Some(read),
                    Err(e) => return Err(stored_but(format!("their seqs: {e}"))),
                }
                (last, n)
            }
            (Err(e), _) => {
                tx.statement_failed(&e);
                return Err(e.into());
            }
        };
        let seqs: Vec<i64> = serde_json::from_str(seqs.as_deref().unwrap_or("[]"))
            .map_err(|e| stored_but(format!("their seqs: {e}")))?;
        if usize::try_from(n).ok() != Some(rows) || seqs.len() != rows {
            return Err(stored_but(format!(
                "inserted {n} events ({} seqs), expected {rows}",
                seqs.len()
            )));
        }
        Ok((last, seqs))
    }

    /// The `seq`s of the events with ids `first..=last`, in id order (read until the
    /// database answers, like an unknown commit's read-back).
    async fn seqs_of(&self, first: i64, last: i64) -> Result<String> {
        self.read_back("stored events' seqs", READ_BACK_LIMIT, || async {
            Ok(sqlx::query_scalar(SEQS_OF_IDS)
                .bind(first)
                .bind(last)
                .fetch_one(&self.reader)
                .await?)
        })
        .await
    }
}

/// `head`, the group's `rows` as `VALUES` (padded to a power of two with rows of `NULL`s,
/// which the statements skip) with each row's `seq` column from `seq`, then `tail`.
fn values_query<'a>(
    head: &str,
    tail: &str,
    rows: &'a [Row<'a>],
    at: i64,
    seq: impl Fn(&Row<'a>) -> i64,
) -> sqlx::QueryBuilder<'a, Sql> {
    let mut q = sqlx::QueryBuilder::<Sql>::new(head);
    let padded = rows.len().next_power_of_two();
    let slots = rows.iter().map(Some).chain(std::iter::repeat_n(None, padded - rows.len()));
    q.push_values(slots, |mut b, r: Option<&Row<'_>>| {
        b.push_bind(r.map(|r| r.nums.conversation))
            .push_bind(r.map(|r| r.nums.session))
            .push_bind(r.map(&seq))
            .push_bind(r.and_then(|r| r.pending.turn_id.as_ref().map(TurnId::as_str)))
            .push_bind(r.map(|_| at))
            .push_bind(r.map(|r| r.payload.kind()))
            .push_bind(r.map(|r| r.json.as_str()));
    });
    q.push(tail);
    q
}

/// Each `seq` of a range of ids, in id order, as a JSON array.
const SEQS_OF_IDS: &str = "SELECT json_group_array(seq) FROM (SELECT seq FROM events \
     WHERE id >= $1 AND id <= $2 ORDER BY id)";


/// Something went wrong after the `INSERT` stored a group (only a broken promise of
/// SQLite's): neither retried (the events would be stored twice) nor published, every
/// caller told, like a commit whose outcome stayed unknown.
fn stored_but(what: String) -> StoreError {
    tracing::error!(
        "a group of events was stored, but {what}: reported abandoned, not published"
    );
    StoreError::AppendAbandoned
}

fn corrupt(detail: String) -> StoreError {
    StoreError::Corrupt {
        table: "events",
        detail,
    }
}
