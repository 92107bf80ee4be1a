//! Worktree rows in SQL (see `worktrees/mod.rs`).

use sqlx::Row;

use super::{Db, SqlRow};
use crate::Result;
use crate::worktrees::{SweptWorktree, WorktreeRow};
use tether_proto::ConversationId;

fn worktree(row: &SqlRow) -> Result<WorktreeRow> {
    Ok(WorktreeRow {
        conversation_id: ConversationId::from(row.try_get::<String, _>("conversation_id")?),
        repo: row.try_get("repo")?,
        path: row.try_get("path")?,
        branch: row.try_get("branch")?,
        base: row.try_get("base")?,
        status: row.try_get("status")?,
        snapshot: row.try_get("snapshot")?,
        created_at_ms: row.try_get("created_at")?,
        updated_at_ms: row.try_get("updated_at")?,
    })
}

impl Db {
    /// The worktree of conversation `id`, if it has one (or wants one).
    pub async fn get_worktree(&self, id: &ConversationId) -> Result<Option<WorktreeRow>> {
        let row = sqlx::query("SELECT * FROM worktrees WHERE conversation_id = $1")
            .bind(id.as_str())
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(worktree).transpose()
    }

    /// Stores `w` (replacing the conversation's earlier row).
    pub async fn save_worktree(&self, w: &WorktreeRow) -> Result<()> {
        sqlx::query(
            "INSERT INTO worktrees (conversation_id, repo, path, branch, base, status, snapshot, \
             created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
             ON CONFLICT (conversation_id) DO UPDATE SET repo = excluded.repo, \
             path = excluded.path, branch = excluded.branch, base = excluded.base, \
             status = excluded.status, snapshot = excluded.snapshot, \
             updated_at = excluded.updated_at",
        )
        .bind(w.conversation_id.as_str())
        .bind(&w.repo)
        .bind(&w.path)
        .bind(&w.branch)
        .bind(&w.base)
        .bind(&w.status)
        .bind(&w.snapshot)
        .bind(w.created_at_ms)
        .bind(w.updated_at_ms)
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    /// Whether conversation `id`'s sessions work in its worktree.
    pub async fn set_isolated(&self, id: &ConversationId, isolated: bool) -> Result<()> {
        sqlx::query("UPDATE conversations SET isolated = $1 WHERE id = $2")
            .bind(i64::from(isolated))
            .bind(id.as_str())
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// Records the worktree's latest snapshot.
    pub async fn set_worktree_snapshot(
        &self,
        id: &ConversationId,
        snapshot: &str,
        now_ms: i64,
    ) -> Result<()> {
        sqlx::query("UPDATE worktrees SET snapshot = $1, updated_at = $2 WHERE conversation_id = $3")
            .bind(snapshot)
            .bind(now_ms)
            .bind(id.as_str())
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// Every worktree tether made and still keeps (`active`), least recently used first,
    /// each with whether its conversation is at work now — for the clean-up.
    pub async fn worktrees_for_sweep(&self) -> Result<Vec<SweptWorktree>> {
        let rows = sqlx::query(
            "SELECT w.*, \
             (SELECT count(*) FROM sessions s WHERE s.conversation_id = w.conversation_id \
              AND s.status IN ('starting', 'live')) + \
             (SELECT count(*) FROM turns t WHERE t.conversation_id = w.conversation_id \
              AND t.status IN ('queued', 'running', 'waiting_approval', 'waiting_user')) \
             AS busy FROM worktrees w WHERE w.status = 'active' ORDER BY w.updated_at",
        )
        .fetch_all(&self.reader)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(SweptWorktree {
                    row: worktree(r)?,
                    busy: r.try_get::<i64, _>("busy")? > 0,
                })
            })
            .collect()
    }
}
