//! What an operator's gauges read (issue 31, `/metrics`): counts of what is in the store
//! now, across the cluster (every node reads the same), and this node's connections.

use sqlx::Row;

use super::Db;
use crate::{OpsCounts, OutboxBacklog, PoolUse, Result};

impl Db {
    /// Turns queued, approvals and questions pending, sessions live and dormant, and the
    /// channels' undelivered outbox rows (count, oldest) — one round trip each.
    pub async fn ops_counts(&self) -> Result<OpsCounts> {
        let row = sqlx::query(
            "SELECT \
             (SELECT count(*) FROM turns WHERE status = 'queued') AS queued, \
             (SELECT count(*) FROM approvals WHERE status = 'pending') AS approvals, \
             (SELECT count(*) FROM questions WHERE status = 'pending') AS questions, \
             (SELECT count(*) FROM sessions WHERE status = 'live') AS live, \
             (SELECT count(*) FROM sessions WHERE status = 'dormant') AS dormant",
        )
        .fetch_one(&self.reader)
        .await?;
        let outbox = sqlx::query(
            "SELECT channel, count(*) AS n, min(created_at) AS oldest FROM channel_outbox \
             WHERE status = 'pending' GROUP BY channel ORDER BY channel",
        )
        .fetch_all(&self.reader)
        .await?
        .iter()
        .map(|r| {
            Ok(OutboxBacklog {
                channel: r.try_get("channel")?,
                pending: r.try_get("n")?,
                oldest_created_at_ms: r.try_get("oldest")?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
        Ok(OpsCounts {
            queued_turns: row.try_get("queued")?,
            pending_approvals: row.try_get("approvals")?,
            pending_questions: row.try_get("questions")?,
            live_sessions: row.try_get("live")?,
            dormant_sessions: row.try_get("dormant")?,
            outbox,
        })
    }

    /// This node's database connections: the writer's and the readers' sets.
    pub async fn pool_use(&self) -> Result<PoolUse> {
        let (writer_size, writer_busy) = self.writer.usage();
        let (reader_size, reader_busy) = self.reader.usage();
        Ok(PoolUse {
            size: writer_size + reader_size,
            in_use: writer_busy + reader_busy,
        })
    }
}
