//! A group of events stored in one round trip to the database (compiled once per
//! backend; used where the dialect has `EVENTS_AT_ONCE`, i.e. SQLite).
//!
//! The general path (`sql_append.rs`) costs four round trips per group: `BEGIN`, the
//! sessions' last `seq`s, the `INSERT`, `COMMIT`. Through sqlx's SQLite thread each one
//! is two context switches, which made them most of a group's cost (issue 33 item 1).
//! Here one query begins its own transaction, inserts every event with its `seq`
//! computed by the statement (the session's largest + the event's place among the
//! group's events of that session), reads back the new rows' ids and `seq`s as one row,
//! and commits. Only where no fence is checked (this node holds no epoch), and for
//! groups of at most [`MAX_ROWS`] events; the rows are padded to a power of two with
//! rows the statement skips, so only a handful of statement shapes are ever prepared.

use tether_proto::{EventEnvelope, TurnId};

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

    /// Stores every batch of `group` on the writer `conn` in one transaction of one
    /// query (see the module header); the envelopes in queue order, published. Failed,
    /// nothing of it was stored (the query stops at its first error and the connection,
    /// possibly inside its transaction, is closed).
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
        // Per session: how many of its events the group has so far.
        let mut counts: Vec<(i64, i64)> = Vec::new();
        for p in group {
            let nums = self.session_nums(&mut tx, &p.session_id).await?;
            tx.note_on_behalf(&nums.conversation_id);
            let i = match counts.iter().position(|(s, _)| *s == nums.session) {
                Some(i) => i,
                None => {
                    counts.push((nums.session, 0));
                    counts.len() - 1
                }
            };
            for payload in &p.payloads {
                let json = serde_json::to_string(payload).map_err(|e| corrupt(e.to_string()))?;
                let Some((_, count)) = counts.get_mut(i) else {
                    return Err(corrupt("a session's count went missing".into()));
                };
                *count += 1;
                rows.push(Row {
                    pending: p,
                    nums: nums.clone(),
                    nth: *count,
                    payload,
                    json,
                });
            }
        }
        let mut q = sqlx::QueryBuilder::<Sql>::new(head);
        let padded = rows.len().next_power_of_two();
        let slots = rows.iter().map(Some).chain(std::iter::repeat_n(None, padded - rows.len()));
        q.push_values(slots, |mut b, r: Option<&Row<'_>>| {
            b.push_bind(r.map(|r| r.nums.conversation))
                .push_bind(r.map(|r| r.nums.session))
                .push_bind(r.map(|r| r.nth))
                .push_bind(r.and_then(|r| r.pending.turn_id.as_ref().map(TurnId::as_str)))
                .push_bind(r.map(|_| at))
                .push_bind(r.map(|r| r.payload.kind()))
                .push_bind(r.map(|r| r.json.as_str()));
        });
        q.push(tail);
        let stored: std::result::Result<Vec<(i64, i64, String)>, sqlx::Error> =
            q.build_query_as().fetch_all(&mut *tx).await;
        let (last, n, seqs) = match stored {
            Ok(mut got) if got.len() == 1 => got.remove(0),
            Ok(got) => return Err(corrupt(format!("{} answers to an insert", got.len()))),
            Err(e) => {
                tx.own_transaction_failed(&e);
                return Err(e.into());
            }
        };
        // Committed: from here on only a broken promise of SQLite's can fail it.
        let seqs: Vec<i64> = serde_json::from_str(&seqs).map_err(|e| corrupt(e.to_string()))?;
        if usize::try_from(n).ok() != Some(rows.len()) || seqs.len() != rows.len() {
            return Err(corrupt(format!(
                "inserted {n} events ({} seqs), expected {}",
                seqs.len(),
                rows.len()
            )));
        }
        let first = last - n + 1;
        let mut out = Vec::with_capacity(rows.len());
        // Each session's events follow each other in the group's order: `seq` less
        // the event's place is the same for all of them.
        let mut bases: Vec<(i64, i64)> = Vec::new();
        for ((r, id), seq) in rows.iter().zip(first..).zip(seqs) {
            let base = seq - r.nth;
            match bases.iter().find(|(s, _)| *s == r.nums.session) {
                Some((_, b)) if *b != base => {
                    return Err(corrupt(format!(
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
}

fn corrupt(detail: String) -> StoreError {
    StoreError::Corrupt {
        table: "events",
        detail,
    }
}
