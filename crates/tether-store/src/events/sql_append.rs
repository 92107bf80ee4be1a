//! Group commit of streamed events, the SQL part (the queue and its rules are in
//! `crate::events::append`; compiled once per backend).

use std::collections::HashMap;

use sqlx::QueryBuilder;
use tether_proto::{EventEnvelope, EventPayload, SessionId, TurnId};
use tokio::sync::oneshot;

use super::conns::{Conn, Tx};
use super::{Db, Sql};
use crate::events::append::Pending;
use crate::events::numbers::SessionNums;
use crate::{Result, StoreError};

/// Largest multi-row `INSERT`; bigger groups are split into power-of-two chunks up to
/// this size, so only a handful of statement shapes are ever prepared.
const MAX_INSERT_ROWS: usize = 128;

/// Most sessions whose last `seq` one statement reads (padded to a power of two).
const MAX_SEQ_SESSIONS: usize = 64;

impl Db {
    /// Appends events of one session atomically (all or none, gap-free `seq`s in this
    /// order) and publishes them at commit; possibly in one transaction with other
    /// sessions' appends (see the module header).
    pub async fn append_events(
        &self,
        session_id: &SessionId,
        turn_id: Option<&TurnId>,
        payloads: &[EventPayload],
    ) -> Result<Vec<EventEnvelope>> {
        if payloads.is_empty() {
            return Ok(Vec::new());
        }
        let (reply, mut answer) = oneshot::channel();
        let id = self.shared.appends.next_id();
        self.shared.appends.push(Pending {
            id,
            session_id: session_id.clone(),
            turn_id: turn_id.cloned(),
            payloads: payloads.to_vec(),
            reply,
        });
        loop {
            let conn = match self.writer.acquire().await {
                Ok(conn) => conn,
                // No writer (the store is unreachable): ours must not stay queued for a
                // later group while the caller tries again; if a group holds it
                // already, its answer comes.
                Err(e) if self.shared.appends.withdraw(id) => return Err(e.into()),
                Err(_) => {
                    return match answer.await {
                        Ok(result) => result,
                        Err(_) => Err(StoreError::AppendAbandoned),
                    };
                }
            };
            match answer.try_recv() {
                Ok(result) => return result,
                // Its group's commit ended without answering (it panicked).
                Err(oneshot::error::TryRecvError::Closed) => {
                    return Err(StoreError::AppendAbandoned);
                }
                Err(oneshot::error::TryRecvError::Empty) => {}
            }
            // Unanswered but no longer queued: a group holds it and is settling an
            // unknown commit (the writer is free meanwhile); wait for its answer rather
            // than commit empty groups.
            if !self.shared.appends.is_queued(id) {
                drop(conn);
                return match answer.await {
                    Ok(result) => result,
                    Err(_) => Err(StoreError::AppendAbandoned),
                };
            }
            // Ours is queued and unanswered, so the queue is not empty; if the group
            // stops before ours, the next round takes it.
            let group = self.shared.appends.take();
            // In a task of its own: the group holds other callers' batches, which must
            // be stored (or refused) even if this caller goes away mid-commit.
            let store = self.clone();
            let events: usize = group.iter().map(|p| p.payloads.len()).sum();
            let started = std::time::Instant::now();
            let commit = tokio::spawn(async move { store.commit_group(conn, group).await });
            if let Err(e) = commit.await {
                // A panic inside the commit: its waiters see their answers dropped.
                tracing::error!(error = %e, "a group commit of events failed");
            }
            metrics::histogram!(crate::ops::COMMIT_SECONDS).record(started.elapsed().as_secs_f64());
            metrics::histogram!(crate::ops::GROUP_EVENTS).record(events as f64);
        }
    }

    /// Stores `group` in one transaction on the writer `conn` and answers every batch.
    async fn commit_group(&self, conn: Conn, mut group: Vec<Pending>) {
        if group.len() == 1
            && let Some(one) = group.pop()
        {
            let result = self.append_one(conn, &one).await;
            // The caller may have given up; its events are stored all the same.
            let _ = one.reply.send(result);
            return;
        }
        if self.at_once(&group) {
            let stored = self.store_at_once(conn, &group).await;
            return self.answer_group(group, stored).await;
        }
        let stored = async {
            // Each step within the query time-out: a commit that got no answer is
            // unknown, and read back like one whose connection was lost.
            let mut tx = self
                .bounded(async { Ok(Tx::begin_on(conn).await?) })
                .await?;
            // Refused (fenced), its batches are tried one by one, and counted then.
            tx.mark_trial();
            let events = self.bounded(self.store_group(&mut tx, &group)).await?;
            let committed = self.bounded(self.commit_events(tx, &events)).await;
            Ok::<_, StoreError>(self.settle(committed, events).await)
        }
        .await
        .and_then(|settled| settled);
        self.answer_group(group, stored).await;
    }

    /// Answers every batch of `group` from its group commit's outcome.
    async fn answer_group(&self, group: Vec<Pending>, stored: Result<Vec<EventEnvelope>>) {
        match stored {
            Ok(events) => {
                let mut events = events.into_iter();
                for p in group {
                    let mine = events.by_ref().take(p.payloads.len()).collect();
                    let _ = p.reply.send(Ok(mine));
                }
            }
            // Whether the group was stored is unknown for good (the database stayed away
            // while `settle` read back): neither retried nor published, every caller told.
            Err(StoreError::AppendAbandoned) => {
                for p in group {
                    let _ = p.reply.send(Err(StoreError::AppendAbandoned));
                }
            }
            // The database is unreachable: nothing of the group was stored (an unknown
            // commit was resolved first, see `settle`); every caller may try again.
            Err(e) if e.is_unavailable() => {
                for p in group {
                    let _ = p.reply.send(Err(unavailable_again(&e)));
                }
            }
            Err(e) => {
                // Rolled back: each batch on its own, so only a bad one fails.
                tracing::debug!(error = %e, batches = group.len(), "group commit failed; storing its batches one by one");
                for p in group {
                    let result = match self.writer.acquire().await {
                        Ok(conn) => self.append_one(conn, &p).await,
                        Err(e) => Err(e.into()),
                    };
                    let _ = p.reply.send(result);
                }
            }
        }
    }

    /// One batch in a transaction of its own on the writer `conn` (one event: one
    /// autocommit statement).
    async fn append_one(&self, conn: Conn, p: &Pending) -> Result<Vec<EventEnvelope>> {
        if p.payloads.len() > 1 && self.at_once(std::slice::from_ref(p)) {
            return self.store_at_once(conn, std::slice::from_ref(p)).await;
        }
        // While this node holds an epoch, even one event is a transaction: its fence is
        // checked before it commits (see `fence`).
        if let [payload] = p.payloads.as_slice()
            && !self.shared.held.any()
        {
            let started = self.now_ms();
            let mut tx = Tx::autocommit_on(conn);
            let appended = self
                .bounded(self.append_in(&mut tx, &p.session_id, p.turn_id.as_ref(), payload))
                .await;
            let ev = match appended {
                Ok(ev) => ev,
                // The statement commits on its own: lost on the way, it may have.
                Err(e) if e.is_unavailable() => {
                    drop(tx);
                    return self.settle_one(e, p, payload, started).await;
                }
                Err(e) => return Err(e),
            };
            let evs = vec![ev];
            let committed = self.bounded(self.commit_events(tx, &evs)).await;
            return self.settle(committed, evs).await;
        }
        let mut tx = self
            .bounded(async { Ok(Tx::begin_on(conn).await?) })
            .await?;
        let events = self
            .bounded(self.store_group(&mut tx, std::slice::from_ref(p)))
            .await?;
        let committed = self.bounded(self.commit_events(tx, &events)).await;
        self.settle(committed, events).await
    }

    /// The outcome of a commit of `events`. When the connection was lost while it
    /// committed (issue 25), whether it did is unknown: read back (once the database
    /// answers again) before anyone is answered, so a caller that retries never stores
    /// the events twice and a stored group is never reported lost.
    async fn settle(
        &self,
        committed: Result<()>,
        events: Vec<EventEnvelope>,
    ) -> Result<Vec<EventEnvelope>> {
        let e = match committed {
            Ok(()) => return Ok(events),
            Err(e) if e.is_unavailable() => e,
            Err(e) => return Err(e),
        };
        // Each session's last event of the group, had it committed: stored exactly (the
        // same payload at that seq) only if the group committed. Another writer of the
        // session may have moved its counter on since, so the counter alone says nothing.
        let mut last: Vec<&EventEnvelope> = Vec::new();
        for ev in &events {
            match last.iter_mut().find(|l| l.session_id == ev.session_id) {
                Some(l) if ev.seq > l.seq => *l = ev,
                Some(_) => {}
                None => last.push(ev),
            }
        }
        let mut expect = Vec::with_capacity(last.len());
        for ev in last {
            let json = serde_json::to_string(&ev.payload).map_err(|e| corrupt(e.to_string()))?;
            expect.push((ev.session_id.as_str(), ev.seq, json));
        }
        let stored = self
            .read_back("a group commit", READ_BACK_LIMIT, || async {
                for (session, seq, json) in &expect {
                    let found: Option<String> = sqlx::query_scalar(
                        "SELECT payload FROM events WHERE seq = $2 \
                         AND session_num = (SELECT num FROM sessions WHERE id = $1)",
                    )
                    .bind(*session)
                    .bind(*seq)
                    .fetch_optional(&self.reader)
                    .await?;
                    if found.as_deref() != Some(json.as_str()) {
                        return Ok(false);
                    }
                }
                Ok(true)
            })
            .await?;
        if !stored {
            return Err(e);
        }
        tracing::info!(
            events = events.len(),
            "a commit whose answer was lost had committed; publishing it"
        );
        self.publish_late(&events);
        Ok(events)
    }

    /// [`Self::settle`] for one event appended without a transaction, whose statement's
    /// answer was lost: it committed if the session's last event is this one (its payload
    /// and turn, stored since `started`).
    async fn settle_one(
        &self,
        e: StoreError,
        p: &Pending,
        payload: &EventPayload,
        started: i64,
    ) -> Result<Vec<EventEnvelope>> {
        let json = serde_json::to_string(payload).map_err(|e| corrupt(e.to_string()))?;
        let found = self
            .read_back("an event", READ_BACK_LIMIT, || async {
                let row: Option<(i64, i64, String, Option<String>, i64, String)> = sqlx::query_as(
                    "SELECT e.id, e.seq, s.conversation_id, e.turn_id, e.at, e.payload \
                     FROM events e JOIN sessions s ON s.num = e.session_num \
                     WHERE s.id = $1 ORDER BY e.seq DESC LIMIT 1",
                )
                .bind(p.session_id.as_str())
                .fetch_optional(&self.reader)
                .await?;
                Ok(row.filter(|(_, _, _, turn, at, stored)| {
                    *at >= started
                        && *stored == json
                        && turn.as_deref() == p.turn_id.as_ref().map(TurnId::as_str)
                }))
            })
            .await?;
        let Some((id, seq, conversation_id, _, at, _)) = found else {
            return Err(e);
        };
        let evs = vec![EventEnvelope {
            id,
            session_id: p.session_id.clone(),
            conversation_id: conversation_id.into(),
            seq,
            turn_id: p.turn_id.clone(),
            at_ms: at,
            payload: payload.clone(),
        }];
        tracing::info!("an event whose answer was lost had been stored; publishing it");
        self.publish_late(&evs);
        Ok(evs)
    }

    /// Runs a read until the database answers it (at most `limit`): how a write whose
    /// answer was lost with the connection learns whether it committed.
    pub(super) async fn read_back<T, F, Fut>(
        &self,
        what: &str,
        limit: std::time::Duration,
        mut read: F,
    ) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let start = std::time::Instant::now();
        let mut wait = std::time::Duration::from_millis(100);
        loop {
            match self.bounded(read()).await {
                Err(e) if e.is_unavailable() && start.elapsed() < limit => {
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(std::time::Duration::from_secs(2));
                }
                Err(e) if e.is_unavailable() => {
                    tracing::error!(error = %e, "cannot tell whether {what} was stored");
                    return Err(StoreError::AppendAbandoned);
                }
                other => return other,
            }
        }
    }

    /// Publishes events whose commit was confirmed only by reading them back.
    fn publish_late(&self, events: &[EventEnvelope]) {
        if super::dialect::EVENTS_AT_ONCE.is_some() {
            self.shared.numbers.committed(events);
        }
        for id in self.shared.feed.publish(events) {
            self.changed(&id);
        }
        self.shared.outbound.events(events);
    }
}

/// How long an append whose commit's answer was lost waits for the database to tell
/// whether it was stored; after that it is reported abandoned (neither retried nor
/// published).
pub(super) const READ_BACK_LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

/// An unreachable store's error again, for each caller of a group.
fn unavailable_again(e: &StoreError) -> StoreError {
    StoreError::Db(crate::backend::health::unreachable_error(&e.to_string()))
}

impl Db {
    /// Appends every batch of `group` in the open transaction `tx`, in queue order: reads
    /// each session's largest `seq` (one statement per [`MAX_SEQ_SESSIONS`] sessions),
    /// then inserts every event with its `seq` (multi-row `INSERT`s across sessions). The
    /// envelopes, in queue order.
    async fn store_group(&self, tx: &mut Tx, group: &[Pending]) -> Result<Vec<EventEnvelope>> {
        let at = tx.now_ms();
        // Each session of the group, in first-seen order, with its numbers.
        let mut sessions: Vec<(&str, SessionNums)> = Vec::new();
        for p in group {
            if !sessions.iter().any(|(s, _)| *s == p.session_id.as_str()) {
                let nums = self.session_nums(tx, &p.session_id).await?;
                tx.note_on_behalf(&nums.conversation_id);
                sessions.push((p.session_id.as_str(), nums));
            }
        }
        // Per session: the next `seq` to hand out.
        let mut next: HashMap<i64, i64> = HashMap::with_capacity(sessions.len());
        for chunk in sessions.chunks(MAX_SEQ_SESSIONS) {
            let nums: Vec<i64> = chunk.iter().map(|(_, n)| n.session).collect();
            let last = last_seqs(tx, &nums).await?;
            for num in nums {
                let seq = last
                    .iter()
                    .find(|(n, _)| *n == num)
                    .and_then(|(_, s)| *s)
                    .unwrap_or(0);
                next.insert(num, seq + 1);
            }
        }
        // The rows to insert, in queue order.
        let mut rows = Vec::with_capacity(group.iter().map(|p| p.payloads.len()).sum());
        for p in group {
            let Some((_, nums)) = sessions.iter().find(|(s, _)| *s == p.session_id.as_str())
            else {
                return Err(sqlx::Error::RowNotFound.into());
            };
            let Some(seq) = next.get_mut(&nums.session) else {
                return Err(sqlx::Error::RowNotFound.into());
            };
            for payload in &p.payloads {
                let json = serde_json::to_string(payload).map_err(|e| corrupt(e.to_string()))?;
                rows.push(Row {
                    pending: p,
                    nums,
                    seq: *seq,
                    payload,
                    json,
                });
                *seq += 1;
            }
        }
        let mut out = Vec::with_capacity(rows.len());
        let mut rest = rows.as_slice();
        while !rest.is_empty() {
            let size = if rest.len() >= MAX_INSERT_ROWS {
                MAX_INSERT_ROWS
            } else {
                1 << rest.len().ilog2()
            };
            let (chunk, tail) = rest.split_at(size);
            rest = tail;
            insert_rows(tx, chunk, at, &mut out).await?;
        }
        tx.note_appended(out.len());
        Ok(out)
    }
}

/// One event to insert.
struct Row<'a> {
    pending: &'a Pending,
    nums: &'a SessionNums,
    seq: i64,
    payload: &'a EventPayload,
    json: String,
}

/// Each session's largest `seq` (`None`: no event yet), in one statement: one index seek
/// per session (`ORDER BY seq DESC LIMIT 1`; SQLite scans a session's rows for a grouped
/// `MAX`). The list is padded to a power of two with its last entry, so few statement
/// shapes exist.
async fn last_seqs(tx: &mut Tx, sessions: &[i64]) -> Result<Vec<(i64, Option<i64>)>> {
    let Some(last) = sessions.last() else {
        return Ok(Vec::new());
    };
    let padded = sessions.len().next_power_of_two();
    let mut q = QueryBuilder::<Sql>::new("");
    for (i, num) in sessions
        .iter()
        .chain(std::iter::repeat_n(last, padded - sessions.len()))
        .enumerate()
    {
        if i > 0 {
            q.push(" UNION ALL ");
        }
        q.push("SELECT ")
            .push_bind(*num)
            .push(", (SELECT seq FROM events WHERE session_num = ")
            .push_bind(*num)
            .push(" ORDER BY seq DESC LIMIT 1)");
    }
    Ok(q.build_query_as().fetch_all(&mut **tx).await?)
}

/// Inserts `chunk` in one statement; pushes their envelopes (in `chunk`'s order) to `out`.
async fn insert_rows(
    tx: &mut Tx,
    chunk: &[Row<'_>],
    at: i64,
    out: &mut Vec<EventEnvelope>,
) -> Result<()> {
    let mut q = QueryBuilder::<Sql>::new(
        "INSERT INTO events (conversation_num, session_num, seq, turn_id, at, kind, payload) ",
    );
    q.push_values(chunk, |mut b, r| {
        b.push_bind(r.nums.conversation)
            .push_bind(r.nums.session)
            .push_bind(r.seq)
            .push_bind(r.pending.turn_id.as_ref().map(TurnId::as_str))
            .push_bind(at)
            .push_bind(r.payload.kind())
            .push_bind(r.json.as_str());
    });
    let returned: Vec<(i64, i64, i64)> = match super::dialect::INSERTED_IDS {
        Some(ids) => {
            // `fetch_all`: the row comes from the second statement.
            q.push(ids);
            let got: Vec<(i64, i64)> = q.build_query_as().fetch_all(&mut **tx).await?;
            let [(last, n)] = got.as_slice() else {
                return Err(corrupt(format!("{} answers to an insert", got.len())));
            };
            let first = last - n + 1;
            chunk
                .iter()
                .zip(first..)
                .map(|(r, id)| (id, r.nums.session, r.seq))
                .take(usize::try_from(*n).unwrap_or(0))
                .collect()
        }
        None => {
            // RETURNING does not promise an order: rows are matched by (session, seq).
            q.push(" RETURNING id, session_num, seq");
            q.build_query_as().fetch_all(&mut **tx).await?
        }
    };
    if returned.len() != chunk.len() {
        return Err(corrupt(format!(
            "inserted {} events, expected {}",
            returned.len(),
            chunk.len()
        )));
    }
    let ids: HashMap<(i64, i64), i64> = returned
        .iter()
        .map(|(id, session, seq)| ((*session, *seq), *id))
        .collect();
    for r in chunk {
        let Some(id) = ids.get(&(r.nums.session, r.seq)) else {
            return Err(corrupt(format!(
                "event {} of session {} not returned",
                r.seq, r.pending.session_id
            )));
        };
        out.push(EventEnvelope {
            id: *id,
            session_id: r.pending.session_id.clone(),
            conversation_id: r.nums.conversation_id.clone(),
            seq: r.seq,
            turn_id: r.pending.turn_id.clone(),
            at_ms: at,
            payload: r.payload.clone(),
        });
    }
    Ok(())
}

fn corrupt(detail: String) -> StoreError {
    StoreError::Corrupt {
        table: "events",
        detail,
    }
}
