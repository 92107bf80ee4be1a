//! The continuation ledger (idempotent continue/close per parent conversation), releasing
//! a task, and the once-only outcome reports on the parent's session.

use super::conns::Tx;
use super::SqlRow;
use sqlx::Row;

use tether_proto::{
    EventEnvelope, EventPayload, MessageRole, SessionId, SessionStatus, TaskId, TurnId,
};

use super::delegation::delegation_turn;

use super::events::add_message;

use super::Db;
use crate::{
    CLAIM_STALE_MS, ContinuationClaim, DelegationTurnRow, LedgerEntry, Result, StoreError,
};

fn ledger(row: &SqlRow) -> Result<LedgerEntry> {
    let result: String = row.try_get("result")?;
    Ok(LedgerEntry {
        scope: row.try_get("scope")?,
        continuation_id: row.try_get("continuation_id")?,
        task_id: super::rows::id(row, "task_id")?,
        action: row.try_get("action")?,
        message: row.try_get("message")?,
        result: serde_json::from_str(&result).map_err(|e| StoreError::Corrupt {
            table: "continuation_ledger",
            detail: e.to_string(),
        })?,
    })
}

/// Records a ledger entry; fails with [`StoreError::LedgerTaken`] (never a constraint
/// error) when the continuation id is already used in the scope, so the caller's
/// transaction rolls back whole.
pub(crate) async fn put_ledger(conn: &mut Tx, e: &LedgerEntry) -> Result<()> {
    let inserted = sqlx::query(
        "INSERT INTO continuation_ledger (scope, continuation_id, task_id, action, message, \
         result, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7) \
         ON CONFLICT (scope, continuation_id) DO NOTHING",
    )
    .bind(&e.scope)
    .bind(&e.continuation_id)
    .bind(e.task_id.as_str())
    .bind(&e.action)
    .bind(&e.message)
    .bind(e.result.to_string())
    .bind(conn.now_ms())
    .execute(&mut **conn)
    .await?
    .rows_affected();
    if inserted == 0 {
        return Err(StoreError::LedgerTaken {
            scope: e.scope.clone(),
            continuation_id: e.continuation_id.clone(),
        });
    }
    // The entry replaces the claim of the request that records it.
    sqlx::query("DELETE FROM continuation_claims WHERE scope = $1 AND continuation_id = $2")
        .bind(&e.scope)
        .bind(&e.continuation_id)
        .execute(&mut **conn)
        .await?;
    Ok(())
}

impl Db {
    /// The ledger entry of a continuation id in a scope.
    pub async fn ledger_entry(
        &self,
        scope: &str,
        continuation_id: &str,
    ) -> Result<Option<LedgerEntry>> {
        let row = sqlx::query(
            "SELECT * FROM continuation_ledger WHERE scope = $1 AND continuation_id = $2",
        )
        .bind(scope)
        .bind(continuation_id)
        .fetch_optional(&self.writer)
        .await?;
        row.as_ref().map(ledger).transpose()
    }

    /// Claims a continuation id for one request, in one transaction with the ledger
    /// read: the entry when the id is recorded; else the claim (`claim` names it), unless
    /// a request of another node holds it. A claim is free again when it is this node's
    /// own (its requests are serialised in memory, so an old one is a previous run's),
    /// when its node's lease ended, or after [`CLAIM_STALE_MS`].
    pub async fn claim_continuation(
        &self,
        scope: &str,
        continuation_id: &str,
        node_id: &str,
        claim: &str,
    ) -> Result<ContinuationClaim> {
        let now = self.now_ms();
        let mut tx = self.writer.begin().await?;
        // The claim first, the ledger read after it. Read first, a request recording the
        // id could commit in between (its entry written, its claim deleted): on
        // PostgreSQL's read committed the insert then finds no claim and takes the id,
        // and the request would act on a recorded id before the ledger refused it (a
        // close ended the process of a task whose close was then refused). Read after,
        // the entry of any request that gave its claim up is seen.
        let taken = sqlx::query(
            "INSERT INTO continuation_claims (scope, continuation_id, node_id, claim, claimed_at) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (scope, continuation_id) DO UPDATE \
             SET node_id = excluded.node_id, claim = excluded.claim, claimed_at = excluded.claimed_at \
             WHERE continuation_claims.node_id = excluded.node_id \
             OR continuation_claims.claimed_at < $6 \
             OR continuation_claims.node_id NOT IN (SELECT id FROM nodes WHERE lease_until >= $5)",
        )
        .bind(scope)
        .bind(continuation_id)
        .bind(node_id)
        .bind(claim)
        .bind(now)
        .bind(now - CLAIM_STALE_MS)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        let row = sqlx::query(
            "SELECT * FROM continuation_ledger WHERE scope = $1 AND continuation_id = $2",
        )
        .bind(scope)
        .bind(continuation_id)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(row) = row {
            let entry = ledger(&row)?;
            // Recorded: no claim is kept for it.
            tx.rollback().await?;
            return Ok(ContinuationClaim::Recorded(entry));
        }
        if taken == 1 {
            tx.commit().await?;
            return Ok(ContinuationClaim::Claimed);
        }
        let (holder,): (String,) = sqlx::query_as(
            "SELECT node_id FROM continuation_claims WHERE scope = $1 AND continuation_id = $2",
        )
        .bind(scope)
        .bind(continuation_id)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(ContinuationClaim::Held { node_id: holder })
    }

    /// Gives a claim back (its request failed before recording anything); a claim taken
    /// over meanwhile, or replaced by the ledger entry, is left alone.
    pub async fn release_continuation(
        &self,
        scope: &str,
        continuation_id: &str,
        claim: &str,
    ) -> Result<()> {
        sqlx::query(
            "DELETE FROM continuation_claims WHERE scope = $1 AND continuation_id = $2 \
             AND claim = $3",
        )
        .bind(scope)
        .bind(continuation_id)
        .bind(claim)
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    /// Releases a task for good: `released_at`, the session `closed`, a status message,
    /// and the ledger entry, in one transaction. `false` when it was already released.
    pub async fn release_delegation(
        &self,
        task_id: &TaskId,
        note: &str,
        ledger_entry: Option<&LedgerEntry>,
    ) -> Result<(bool, Vec<EventEnvelope>)> {
        let now = self.now_ms();
        let mut tx = self.writer.begin().await?;
        // The ledger first: a taken continuation id changes nothing.
        if let Some(e) = ledger_entry {
            put_ledger(&mut tx, e).await?;
        }
        let row: Option<(String,)> = sqlx::query_as(
            "UPDATE delegations SET released_at = $1 WHERE task_id = $2 AND released_at IS NULL \
             RETURNING session_id",
        )
        .bind(now)
        .bind(task_id.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        let mut events = Vec::new();
        if let Some((session_id,)) = &row {
            let session_id = &SessionId::from(session_id);
            sqlx::query("UPDATE sessions SET status = $1, updated_at = $2 WHERE id = $3")
                .bind(SessionStatus::Closed.as_str())
                .bind(now)
                .bind(session_id.as_str())
                .execute(&mut *tx)
                .await?;
            add_message(
                &mut tx,
                &task_id.conversation_id(),
                MessageRole::Status,
                note,
                Some(session_id),
                None,
            )
            .await?;
            let ev = EventPayload::Status {
                text: note.to_string(),
            };
            events.push(self.append_in(&mut tx, session_id, None, &ev).await?);
        }
        self.commit_events(tx, &events).await?;
        Ok((row.is_some(), events))
    }

    /// Records the outcome event of a delegation turn once: on the parent's session, or
    /// on the child's own session when the task has no parent session (an external MCP
    /// client's task). `None` when it was already reported.
    pub async fn report_delegation_turn(
        &self,
        turn_id: &TurnId,
        payload: &EventPayload,
    ) -> Result<Option<EventEnvelope>> {
        let mut tx = self.writer.begin().await?;
        let Some(target) = claim_report(&mut tx, turn_id).await? else {
            return Ok(None);
        };
        let ev = self.append_in(&mut tx, &target, None, payload).await?;
        self.commit_events(tx, std::slice::from_ref(&ev)).await?;
        Ok(Some(ev))
    }

    /// Gives up on reporting a delegation turn: marks it handled and records why on the
    /// session its outcome would have gone to (a status event). `None` when it was
    /// already reported.
    pub async fn record_unreportable_turn(
        &self,
        turn_id: &TurnId,
        why: &str,
    ) -> Result<Option<EventEnvelope>> {
        let mut tx = self.writer.begin().await?;
        let Some(target) = claim_report(&mut tx, turn_id).await? else {
            return Ok(None);
        };
        let ev = EventPayload::Status {
            text: format!("the outcome of delegated turn {turn_id} could not be reported: {why}"),
        };
        let ev = self.append_in(&mut tx, &target, None, &ev).await?;
        self.commit_events(tx, std::slice::from_ref(&ev)).await?;
        Ok(Some(ev))
    }

    /// Ids of the delegation turns that ended but whose outcome was not reported yet,
    /// oldest first (ids only: one unreadable row never hides the others).
    pub async fn unreported_delegation_turn_ids(&self) -> Result<Vec<TurnId>> {
        let rows: Vec<(String,)> = sqlx::query_as(
            "SELECT dt.turn_id FROM delegation_turns dt JOIN turns t ON t.id = dt.turn_id \
             WHERE dt.reported_at IS NULL \
             AND t.status IN ('completed', 'failed', 'cancelled', 'interrupted') \
             ORDER BY t.ended_at, dt.rowid",
        )
        .fetch_all(&self.reader)
        .await?;
        Ok(rows.into_iter().map(|(id,)| TurnId::from(id)).collect())
    }

    /// Delegation turns that ended but whose outcome was not reported yet.
    pub async fn unreported_delegation_turns(&self) -> Result<Vec<DelegationTurnRow>> {
        let rows = sqlx::query(
            "SELECT dt.* FROM delegation_turns dt JOIN turns t ON t.id = dt.turn_id \
             WHERE dt.reported_at IS NULL \
             AND t.status IN ('completed', 'failed', 'cancelled', 'interrupted') \
             ORDER BY t.ended_at, dt.rowid",
        )
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(delegation_turn).collect()
    }
}

/// Marks a turn reported and returns the session its outcome goes to (the parent's
/// session, else the child's own); `None` when it was reported already.
async fn claim_report(tx: &mut Tx, turn_id: &TurnId) -> Result<Option<SessionId>> {
    let row: Option<(String,)> = sqlx::query_as(
        "UPDATE delegation_turns SET reported_at = $1 WHERE turn_id = $2 \
         AND reported_at IS NULL RETURNING task_id",
    )
    .bind(tx.now_ms())
    .bind(turn_id.as_str())
    .fetch_optional(&mut **tx)
    .await?;
    let Some((task_id,)) = row else {
        return Ok(None);
    };
    let (parent, child): (Option<String>, String) =
        sqlx::query_as("SELECT parent_session_id, session_id FROM delegations WHERE task_id = $1")
            .bind(&task_id)
            .fetch_one(&mut **tx)
            .await?;
    Ok(Some(SessionId::from(parent.unwrap_or(child))))
}
