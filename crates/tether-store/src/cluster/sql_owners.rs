//! Conversation owners (issue 12): a node claims an unowned conversation, or one whose
//! owner's lease ended, and the epoch rises with every claim; a survivor takes over a dead
//! node's conversation only from the epoch it read (compare and set), so two survivors
//! never both win.

use sqlx::Row;
use tether_proto::ConversationId;

use super::{Db, SqlRow};
use crate::{Claim, OwnerRow, Result};

const OWNER: &str = "SELECT o.conversation_id, o.node_id, o.epoch, o.claimed_at, \
     n.lease_until, n.started_at AS node_started_at FROM owners o LEFT JOIN nodes n ON n.id = o.node_id";

/// A claim ($1 the conversation, $2 the node, $3 now): the conversation's new epoch,
/// no row when it stays another live node's or this node's already (the row is locked
/// all the same, as `ON CONFLICT DO UPDATE` does).
const CLAIM: &str = "INSERT INTO owners (conversation_id, node_id, epoch, claimed_at) \
     VALUES ($1, $2, 1, $3) ON CONFLICT (conversation_id) DO UPDATE SET \
     node_id = excluded.node_id, epoch = owners.epoch + 1, \
     claimed_at = excluded.claimed_at \
     WHERE owners.node_id <> excluded.node_id AND NOT EXISTS \
     (SELECT 1 FROM nodes n WHERE n.id = owners.node_id AND n.lease_until > $3) \
     RETURNING epoch";

/// [`CLAIM`] and, when it claimed nothing, the row it left, in one statement where the
/// dialect has `CLAIM_AND_OWNER`.
static CLAIM_AND_OWNER: std::sync::LazyLock<Option<String>> = std::sync::LazyLock::new(|| {
    super::dialect::CLAIM_AND_OWNER.map(|(head, tail)| format!("{head}{CLAIM}{tail}"))
});

fn owner(row: &SqlRow) -> Result<OwnerRow> {
    Ok(OwnerRow {
        conversation_id: ConversationId::from(row.try_get::<String, _>("conversation_id")?),
        node_id: tether_proto::NodeId::new(row.try_get::<String, _>("node_id")?),
        epoch: row.try_get("epoch")?,
        claimed_at_ms: row.try_get("claimed_at")?,
        lease_until_ms: row.try_get("lease_until")?,
        node_started_at_ms: row.try_get("node_started_at")?,
    })
}

impl Db {
    /// Claims conversation `id` for node `node_id` at `now_ms`: it becomes this node's
    /// under a new epoch when it had no owner or its owner's lease ended; a node that owns
    /// it already keeps its epoch; another live owner keeps it.
    pub async fn claim_conversation(
        &self,
        id: &ConversationId,
        node_id: &str,
        now_ms: i64,
    ) -> Result<Claim> {
        let current = match &*CLAIM_AND_OWNER {
            // One round trip: the claim, else the row it left (issue 33 item 5).
            Some(sql) => {
                let row = sqlx::query(sql)
                    .bind(id.as_str())
                    .bind(node_id)
                    .bind(now_ms)
                    .fetch_one(&self.writer)
                    .await?;
                if let Some(epoch) = row.try_get::<Option<i64>, _>("claimed")? {
                    self.shared.held.set(id, epoch);
                    return Ok(Claim::Claimed { epoch });
                }
                match row.try_get::<Option<String>, _>("conversation_id")? {
                    Some(_) => owner(&row)?,
                    // Another node's claim committed after this statement's snapshot
                    // (the upsert waited for it): its row is read now.
                    None => self.owner_on_writer(id).await?,
                }
            }
            None => {
                let claimed: Option<(i64,)> = sqlx::query_as(CLAIM)
                    .bind(id.as_str())
                    .bind(node_id)
                    .bind(now_ms)
                    .fetch_optional(&self.writer)
                    .await?;
                if let Some((epoch,)) = claimed {
                    self.shared.held.set(id, epoch);
                    return Ok(Claim::Claimed { epoch });
                }
                self.owner_on_writer(id).await?
            }
        };
        if current.node_id == node_id {
            self.shared.held.set(id, current.epoch);
            Ok(Claim::Held {
                epoch: current.epoch,
            })
        } else {
            self.shared.held.forget(id);
            Ok(Claim::Owned(current))
        }
    }

    /// Conversation `id`'s owner row, read on the writer after a claim that claimed
    /// nothing: the row the upsert just saw, not a reader's older view.
    async fn owner_on_writer(&self, id: &ConversationId) -> Result<OwnerRow> {
        let row = sqlx::query(&format!("{OWNER} WHERE o.conversation_id = $1"))
            .bind(id.as_str())
            .fetch_one(&self.writer)
            .await?;
        owner(&row)
    }

    /// Takes conversation `id` over for `node_id` if its epoch is still `from_epoch`
    /// (failover, or a node restarting under its own id): the new epoch, or `None` when
    /// someone claimed it in between.
    pub async fn take_over_conversation(
        &self,
        id: &ConversationId,
        node_id: &str,
        from_epoch: i64,
        now_ms: i64,
    ) -> Result<Option<i64>> {
        let mut tx = self.writer.begin().await?;
        // The old owner may be paused holding the row (a fenced write's `FOR SHARE`):
        // give up after a moment rather than hold this node's writer; the sweep retries.
        if let Some(set) = super::dialect::RECOVERY_LOCK_TIMEOUT {
            sqlx::query(set).execute(&mut *tx).await?;
        }
        let taken: Option<(i64,)> = sqlx::query_as(
            "UPDATE owners SET node_id = $2, epoch = epoch + 1, claimed_at = $4 \
             WHERE conversation_id = $1 AND epoch = $3 RETURNING epoch",
        )
        .bind(id.as_str())
        .bind(node_id)
        .bind(from_epoch)
        .bind(now_ms)
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        match taken {
            Some((epoch,)) => {
                self.shared.held.set(id, epoch);
                Ok(Some(epoch))
            }
            None => Ok(None),
        }
    }

    /// The owner of conversation `id`, if it has one (released: none).
    pub async fn conversation_owner(&self, id: &ConversationId) -> Result<Option<OwnerRow>> {
        let row = sqlx::query(&format!(
            "{OWNER} WHERE o.conversation_id = $1 AND o.node_id <> ''"
        ))
        .bind(id.as_str())
        .fetch_optional(&self.reader)
        .await?;
        row.as_ref().map(owner).transpose()
    }

    /// The conversations node `node_id` owns.
    pub async fn owned_conversations(&self, node_id: &str) -> Result<Vec<OwnerRow>> {
        let rows = sqlx::query(&format!(
            "{OWNER} WHERE o.node_id = $1 ORDER BY o.conversation_id"
        ))
        .bind(node_id)
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(owner).collect()
    }

    /// Conversations whose owner's lease ended before `now_ms` (or whose owner has no
    /// row): what survivors take over.
    pub async fn orphaned_conversations(&self, now_ms: i64) -> Result<Vec<OwnerRow>> {
        let rows = sqlx::query(&format!(
            "{OWNER} WHERE o.node_id <> '' AND (n.lease_until IS NULL OR n.lease_until <= $1) \
             ORDER BY o.conversation_id"
        ))
        .bind(now_ms)
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(owner).collect()
    }

    /// How many conversations each node owns (nodes owning none are not listed).
    pub async fn owner_counts(&self) -> Result<Vec<(String, i64)>> {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT node_id, COUNT(*) FROM owners WHERE node_id <> '' \
             GROUP BY node_id ORDER BY node_id",
        )
        .fetch_all(&self.reader)
        .await?;
        Ok(rows)
    }

    /// Gives conversation `id` up if `node_id` still owns it under `epoch` (its session
    /// went dormant, or the node stops): `false` when it was not. The row stays with no
    /// node, so the next claim still raises the epoch.
    pub async fn release_conversation(
        &self,
        id: &ConversationId,
        node_id: &str,
        epoch: i64,
    ) -> Result<bool> {
        self.shared.held.forget(id);
        let res = sqlx::query(
            "UPDATE owners SET node_id = '' \
             WHERE conversation_id = $1 AND node_id = $2 AND epoch = $3",
        )
        .bind(id.as_str())
        .bind(node_id)
        .bind(epoch)
        .execute(&self.writer)
        .await?;
        Ok(res.rows_affected() == 1)
    }
}
