//! Leader leases (issue 12): the same claim as a conversation owner's (`owners.rs`) for a
//! named piece of work: the first claim inserts the row, a claim while the leader's node
//! lease holds changes nothing, and a claim after it ended moves the row to the claimer
//! under a higher epoch. A node's leases end with its node lease, so nothing needs renewing
//! here: the heartbeat in `nodes` is the lease.

use sqlx::Row;

use super::{Db, SqlRow};
use crate::{LeaderClaim, LeaderRow, Result};

const LEADER: &str = "SELECT l.name, l.node_id, l.epoch, l.claimed_at, n.lease_until \
     FROM leaders l LEFT JOIN nodes n ON n.id = l.node_id";

fn leader(row: &SqlRow) -> Result<LeaderRow> {
    Ok(LeaderRow {
        name: row.try_get("name")?,
        node_id: tether_proto::NodeId::new(row.try_get::<String, _>("node_id")?),
        epoch: row.try_get("epoch")?,
        claimed_at_ms: row.try_get("claimed_at")?,
        lease_until_ms: row.try_get("lease_until")?,
    })
}

impl Db {
    /// Claims the lease `name` for node `node_id` at `now_ms`: this node leads under a
    /// new epoch when nobody led or the leader's node lease ended; a leader keeps its
    /// epoch; another live leader keeps the lease (see [`LeaderClaim`]).
    pub async fn claim_leader(
        &self,
        name: &str,
        node_id: &str,
        now_ms: i64,
    ) -> Result<LeaderClaim> {
        let claimed: Option<(i64,)> = sqlx::query_as(
            "INSERT INTO leaders (name, node_id, epoch, claimed_at) VALUES ($1, $2, 1, $3) \
             ON CONFLICT (name) DO UPDATE SET node_id = excluded.node_id, \
             epoch = leaders.epoch + 1, claimed_at = excluded.claimed_at \
             WHERE leaders.node_id <> excluded.node_id AND NOT EXISTS \
             (SELECT 1 FROM nodes n WHERE n.id = leaders.node_id AND n.lease_until > $3) \
             RETURNING epoch",
        )
        .bind(name)
        .bind(node_id)
        .bind(now_ms)
        .fetch_optional(&self.writer)
        .await?;
        if let Some((epoch,)) = claimed {
            return Ok(LeaderClaim::Claimed { epoch });
        }
        // On the writer: the row the upsert just saw.
        let row = sqlx::query(&format!("{LEADER} WHERE l.name = $1"))
            .bind(name)
            .fetch_one(&self.writer)
            .await?;
        let current = leader(&row)?;
        if current.node_id == node_id {
            Ok(LeaderClaim::Held {
                epoch: current.epoch,
            })
        } else {
            Ok(LeaderClaim::Led(current))
        }
    }

    /// Every lease, by name (held, gone or released: see [`LeaderRow::alive`]).
    pub async fn leaders(&self) -> Result<Vec<LeaderRow>> {
        let rows = sqlx::query(&format!("{LEADER} ORDER BY l.name"))
            .fetch_all(&self.reader)
            .await?;
        rows.iter().map(leader).collect()
    }

    /// Gives the lease `name` up if `node_id` still holds it under `epoch` (it stops
    /// leading): `false` when it did not. The epoch stays, so the next claim raises it.
    pub async fn release_leader(&self, name: &str, node_id: &str, epoch: i64) -> Result<bool> {
        let res = sqlx::query(
            "UPDATE leaders SET node_id = '' WHERE name = $1 AND node_id = $2 AND epoch = $3",
        )
        .bind(name)
        .bind(node_id)
        .bind(epoch)
        .execute(&self.writer)
        .await?;
        Ok(res.rows_affected() == 1)
    }

    /// Takes the lease `name` over for `node_id` from node `from`, seen gone by its
    /// presence lock before its node lease ended, if `from` still holds it under `epoch`:
    /// the new epoch, or `None` when the lease moved meanwhile.
    pub async fn take_leader(
        &self,
        name: &str,
        node_id: &str,
        from: &str,
        epoch: i64,
        now_ms: i64,
    ) -> Result<Option<i64>> {
        let taken: Option<(i64,)> = sqlx::query_as(
            "UPDATE leaders SET node_id = $2, epoch = epoch + 1, claimed_at = $5 \
             WHERE name = $1 AND node_id = $3 AND epoch = $4 RETURNING epoch",
        )
        .bind(name)
        .bind(node_id)
        .bind(from)
        .bind(epoch)
        .bind(now_ms)
        .fetch_optional(&self.writer)
        .await?;
        Ok(taken.map(|(e,)| e))
    }
}
