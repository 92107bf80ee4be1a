//! Node registry rows: a node registers itself, renews its lease with each heartbeat and
//! removes its row when it stops; readers judge liveness by `lease_until`.

use sqlx::Row;

use super::{Db, SqlRow};
use crate::{NodeRow, Result};

fn node(row: &SqlRow) -> Result<NodeRow> {
    Ok(NodeRow {
        id: tether_proto::NodeId::new(row.try_get::<String, _>("id")?),
        name: row.try_get("name")?,
        addr: row.try_get("addr")?,
        started_at_ms: row.try_get("started_at")?,
        heartbeat_at_ms: row.try_get("heartbeat_at")?,
        lease_until_ms: row.try_get("lease_until")?,
        draining_at_ms: row.try_get("draining_at")?,
        version: row.try_get("version")?,
    })
}

impl Db {
    /// Registers `n` (or replaces an earlier row of the same id).
    pub async fn register_node(&self, n: &NodeRow) -> Result<()> {
        sqlx::query(
            "INSERT INTO nodes (id, name, addr, started_at, heartbeat_at, lease_until, \
             draining_at, version) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
             ON CONFLICT (id) DO UPDATE SET \
             name = excluded.name, addr = excluded.addr, started_at = excluded.started_at, \
             heartbeat_at = excluded.heartbeat_at, lease_until = excluded.lease_until, \
             draining_at = excluded.draining_at, version = excluded.version",
        )
        .bind(n.id.as_str())
        .bind(&n.name)
        .bind(&n.addr)
        .bind(n.started_at_ms)
        .bind(n.heartbeat_at_ms)
        .bind(n.lease_until_ms)
        .bind(n.draining_at_ms)
        .bind(&n.version)
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    /// A heartbeat: the node's lease now runs until `lease_until_ms`. `false` when the
    /// node has no row (it was removed: it must register again). On the side connection
    /// (PostgreSQL), not behind the writer's queue.
    pub async fn renew_node_lease(
        &self,
        id: &str,
        now_ms: i64,
        lease_until_ms: i64,
    ) -> Result<bool> {
        let res = sqlx::query("UPDATE nodes SET heartbeat_at = $1, lease_until = $2 WHERE id = $3")
            .bind(now_ms)
            .bind(lease_until_ms)
            .bind(id)
            .execute(&self.side)
            .await?;
        Ok(res.rows_affected() == 1)
    }

    /// Node `id` drains from `at_ms` on (issue 31): placement sends it no new
    /// conversations. `false` when it has no row.
    pub async fn set_node_draining(&self, id: &str, at_ms: i64) -> Result<bool> {
        let res = sqlx::query("UPDATE nodes SET draining_at = $1 WHERE id = $2")
            .bind(at_ms)
            .bind(id)
            .execute(&self.writer)
            .await?;
        Ok(res.rows_affected() == 1)
    }

    /// Every registered node, oldest first (alive or not: see [`NodeRow::alive`]).
    pub async fn nodes(&self) -> Result<Vec<NodeRow>> {
        let rows = sqlx::query("SELECT * FROM nodes ORDER BY started_at, id")
            .fetch_all(&self.reader)
            .await?;
        rows.iter().map(node).collect()
    }

    /// Removes a node's row (it stopped).
    pub async fn remove_node(&self, id: &str) -> Result<()> {
        sqlx::query("DELETE FROM nodes WHERE id = $1")
            .bind(id)
            .execute(&self.writer)
            .await?;
        Ok(())
    }
}
