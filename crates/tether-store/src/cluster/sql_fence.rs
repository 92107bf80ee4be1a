//! Fencing (issue 12): a transaction that writes on behalf of a conversation this node
//! holds an epoch for commits only if that epoch is still the `owners` row's. A node that
//! was paused past its lease while a survivor took its conversation over (the epoch rose)
//! has its writes refused with [`StoreError::Fenced`], and nothing of the transaction is
//! stored. On PostgreSQL the rows are read `FOR SHARE`, so a concurrent take-over (an
//! `UPDATE` of the row) waits until this transaction has committed: the survivor's
//! recovery comes after the old owner's last write, never interleaved with it.
//!
//! A conversation this node holds no epoch for is not fenced (nothing was claimed: the
//! write is not an owner's, such as an answer given on any node). SQLite's single node
//! never claims, so there the check is one atomic load.

use sqlx::QueryBuilder;
use tether_proto::ConversationId;

use super::conns::Tx;
use super::{Db, Sql};
use crate::{Result, StoreError};

impl Db {
    /// Refuses `tx` (rolled back) when, for a conversation it writes on behalf of,
    /// this node's epoch is no longer the row's; otherwise the rows stay locked (shared)
    /// until `tx` ends.
    pub(super) async fn check_fence(&self, tx: &mut Tx) -> Result<()> {
        let held = &self.shared.held;
        // Autocommit: the statement is stored already (it ran while no epoch was held).
        if !held.any() || tx.is_autocommit() {
            return Ok(());
        }
        let fenced: Vec<(ConversationId, i64)> = tx
            .on_behalf()
            .iter()
            .filter_map(|c| held.get(c).map(|e| (c.clone(), e)))
            .collect();
        if fenced.is_empty() {
            return Ok(());
        }
        let mut q = QueryBuilder::<Sql>::new(
            "SELECT conversation_id, node_id, epoch FROM owners WHERE conversation_id IN (",
        );
        let mut ids = q.separated(", ");
        for (c, _) in &fenced {
            ids.push_bind(c.as_str());
        }
        q.push(")").push(super::dialect::FOR_SHARE);
        let rows: Vec<(String, String, i64)> = q.build_query_as().fetch_all(&mut **tx).await?;
        for (c, epoch) in fenced {
            let current = rows.iter().find(|(id, _, _)| id == c.as_str());
            // A row with our epoch and a node is still ours: epochs rise on every claim
            // and take-over, and our own release forgets the epoch.
            let ours = current.is_some_and(|(_, node, e)| *e == epoch && !node.is_empty());
            if !ours {
                let now = current.map(|(_, node, e)| (node.clone(), *e));
                // Refused: the rows' shared locks go now. Left for the connection's
                // next use, they would hold up the survivor's take-over or release
                // until this node wrote again.
                if let Err(e) = tx.roll_back_now().await {
                    tracing::debug!(error = %e, "could not roll a fenced write back at once");
                }
                return Err(self.refuse(c, epoch, now, !tx.is_trial()));
            }
        }
        Ok(())
    }

    /// The error of a write for conversation `c` refused under `epoch` (the row's owner
    /// is `now`), counted and logged when `counts` (a group commit's first try is not:
    /// its batches are tried again one by one).
    pub(super) fn refuse(
        &self,
        c: ConversationId,
        epoch: i64,
        now: Option<(String, i64)>,
        counts: bool,
    ) -> StoreError {
        if counts {
            self.shared.held.refused(&c);
            tracing::warn!(conversation = %c, held_epoch = epoch, owner = ?now,
                "refused a write: another node owns this conversation now (fenced)");
        }
        StoreError::Fenced {
            conversation_id: c,
            epoch,
        }
    }

    /// Commits `tx`, which appended no event, after its fence (see the module header).
    pub(super) async fn commit_fenced(&self, mut tx: Tx) -> Result<()> {
        self.check_fence(&mut tx).await?;
        tx.commit_unchecked().await?;
        Ok(())
    }
}
