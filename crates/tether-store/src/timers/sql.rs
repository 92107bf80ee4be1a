//! Timers and account limits in SQL (see `timers/mod.rs`). A claim is one conditional
//! `UPDATE … RETURNING` whose own `WHERE` re-checks the state, so of two nodes that pick
//! the same due timer only one gets it (PostgreSQL re-evaluates the condition on the row
//! it waited for; SQLite has one writer).

use sqlx::Row;

use super::{Db, SqlQueryResult, SqlRow};
use crate::Result;
use crate::timers::{NewTimer, Timer};
use tether_proto::ConversationId;

const COLUMNS: &str =
    "id, kind, conversation_id, account, due_at, state, attempt, payload, created_at";

fn timer(row: &SqlRow) -> Result<Timer> {
    Ok(Timer {
        id: row.try_get("id")?,
        kind: row.try_get("kind")?,
        conversation_id: ConversationId::from(row.try_get::<String, _>("conversation_id")?),
        account: row.try_get("account")?,
        due_at_ms: row.try_get("due_at")?,
        state: row.try_get("state")?,
        attempt: row.try_get("attempt")?,
        payload: row.try_get("payload")?,
        created_at_ms: row.try_get("created_at")?,
    })
}

impl Db {
    /// Adds a waiting timer.
    pub async fn add_timer(&self, t: &NewTimer) -> Result<()> {
        self.insert_timer(t, "").await.map(drop)
    }

    /// Adds timer `t` unless a timer of its id is stored already (a slot's timer that
    /// every node adds: the first one stores it); whether it was added.
    pub async fn add_timer_once(&self, t: &NewTimer) -> Result<bool> {
        let done = self.insert_timer(t, " ON CONFLICT (id) DO NOTHING").await?;
        Ok(done.rows_affected() == 1)
    }

    async fn insert_timer(&self, t: &NewTimer, conflict: &str) -> Result<SqlQueryResult> {
        let sql = format!(
            "INSERT INTO timers (id, kind, conversation_id, account, due_at, state, attempt, \
             payload, created_at) VALUES ($1, $2, $3, $4, $5, 'waiting', $6, $7, $8){conflict}"
        );
        Ok(sqlx::query(&sql)
            .bind(&t.id)
            .bind(&t.kind)
            .bind(t.conversation_id.as_str())
            .bind(&t.account)
            .bind(t.due_at_ms)
            .bind(t.attempt)
            .bind(&t.payload)
            .bind(self.now_ms())
            .execute(&self.writer)
            .await?)
    }

    /// Claims up to `limit` timers due at `now_ms` (or whose claim lapsed) for `node`
    /// until `now_ms + lease_ms`; each is claimed by one node only.
    pub async fn claim_due_timers(
        &self,
        node: &str,
        now_ms: i64,
        lease_ms: i64,
        limit: i64,
    ) -> Result<Vec<Timer>> {
        let due = "((state = 'waiting' AND due_at <= $3) OR (state = 'claimed' AND claimed_until < $3))";
        let rows = sqlx::query(&format!(
            "UPDATE timers SET state = 'claimed', claimed_by = $1, claimed_until = $2 \
             WHERE id IN (SELECT id FROM timers WHERE {due} ORDER BY due_at LIMIT $4) \
             AND {due} RETURNING {COLUMNS}"
        ))
        .bind(node)
        .bind(now_ms + lease_ms)
        .bind(now_ms)
        .bind(limit)
        .fetch_all(&self.writer)
        .await?;
        rows.iter().map(timer).collect()
    }

    /// When the next timer falls due: the earliest waiting timer's `due_at` or claim's
    /// `claimed_until` (after which another node may take it); `None` without either.
    pub async fn next_timer_due(&self) -> Result<Option<i64>> {
        let (next,): (Option<i64>,) = sqlx::query_as(
            "SELECT MIN(at) FROM (SELECT MIN(due_at) AS at FROM timers WHERE state = 'waiting' \
             UNION ALL SELECT MIN(claimed_until) + 1 AS at FROM timers WHERE state = 'claimed') \
             AS next",
        )
        .fetch_one(&self.reader)
        .await?;
        Ok(next)
    }

    /// Marks a claimed timer fired; false when it was cancelled (or fired) meanwhile.
    pub async fn fire_timer(&self, id: &str) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE timers SET state = 'fired', ended_at = $1 WHERE id = $2 AND state = 'claimed'",
        )
        .bind(self.now_ms())
        .bind(id)
        .execute(&self.writer)
        .await?
        .rows_affected();
        Ok(done > 0)
    }

    /// Gives a timer `node` claimed back to wait again until `due_ms` (what it was to do
    /// could not be done now: its conversation's node was away, say); whether it was
    /// still that node's claim.
    pub async fn retry_timer(&self, id: &str, node: &str, due_ms: i64) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE timers SET state = 'waiting', due_at = $1, claimed_by = NULL, \
             claimed_until = NULL WHERE id = $2 AND state = 'claimed' AND claimed_by = $3",
        )
        .bind(due_ms)
        .bind(id)
        .bind(node)
        .execute(&self.writer)
        .await?
        .rows_affected();
        Ok(done > 0)
    }

    /// Cancels a conversation's timers of `kind` still to fire (and forgets the ones
    /// fired, so a later parking counts its attempts from one again); how many were
    /// still to fire.
    pub async fn cancel_timers(&self, conversation_id: &ConversationId, kind: &str) -> Result<u64> {
        let now = self.now_ms();
        let mut tx = self.writer.begin().await?;
        let pending = sqlx::query(
            "UPDATE timers SET state = 'cancelled', ended_at = $1 WHERE conversation_id = $2 \
             AND kind = $3 AND state IN ('waiting', 'claimed')",
        )
        .bind(now)
        .bind(conversation_id.as_str())
        .bind(kind)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        sqlx::query(
            "UPDATE timers SET state = 'done' WHERE conversation_id = $1 AND kind = $2 \
             AND state = 'fired'",
        )
        .bind(conversation_id.as_str())
        .bind(kind)
        .execute(&mut *tx)
        .await?;
        tx.commit_unchecked().await?;
        Ok(pending)
    }

    /// A conversation's timers of `kind` still to fire, and the latest fired one (whose
    /// attempt a new parking continues), newest first.
    pub async fn conversation_timers(
        &self,
        conversation_id: &ConversationId,
        kind: &str,
    ) -> Result<Vec<Timer>> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM timers WHERE conversation_id = $1 AND kind = $2 \
             AND state IN ('waiting', 'claimed', 'fired') ORDER BY created_at DESC"
        ))
        .bind(conversation_id.as_str())
        .bind(kind)
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(timer).collect()
    }

    /// Timers of `account` still to fire (the staggering of a herd).
    pub async fn account_timers(&self, account: &str) -> Result<i64> {
        let (n,): (i64,) = sqlx::query_as(
            "SELECT CAST(COUNT(*) AS BIGINT) FROM timers WHERE account = $1 \
             AND state IN ('waiting', 'claimed')",
        )
        .bind(account)
        .fetch_one(&self.reader)
        .await?;
        Ok(n)
    }

    /// Records that `account` is at its limit until `until_ms` (a later moment wins).
    pub async fn limit_account(&self, account: &str, until_ms: i64, reason: &str) -> Result<()> {
        sqlx::query(&format!(
            "INSERT INTO account_limits (account, until_ms, reason) VALUES ($1, $2, $3) \
             ON CONFLICT (account) DO UPDATE SET \
             until_ms = {}(account_limits.until_ms, excluded.until_ms), reason = excluded.reason",
            super::dialect::GREATEST
        ))
        .bind(account)
        .bind(until_ms)
        .bind(reason)
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    /// Until when `account` is known to be limited, if it still is at `now_ms`.
    pub async fn account_limited(&self, account: &str, now_ms: i64) -> Result<Option<i64>> {
        let row: Option<(i64,)> = sqlx::query_as(
            "SELECT until_ms FROM account_limits WHERE account = $1 AND until_ms > $2",
        )
        .bind(account)
        .bind(now_ms)
        .fetch_optional(&self.reader)
        .await?;
        Ok(row.map(|(u,)| u))
    }
}
