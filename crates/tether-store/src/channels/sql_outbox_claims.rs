//! Outbox claims (issue 12): a sender claims the rows it is about to send, so two nodes
//! draining one channel (a leader and a stale one that has not noticed yet) never send the
//! same row. Only lane heads are claimed (the oldest pending row of each chat), and a
//! lane whose head is claimed waits, so per-chat order holds across nodes. A claim ends
//! when the row is marked (sent, retry, done), at its deadline, or as soon as the
//! claimer's node lease ends (a crashed sender's claim does not hold a chat up for long).
//! On PostgreSQL the rows are picked `FOR UPDATE SKIP LOCKED`: a row another node is
//! claiming at the same moment is passed over, never claimed twice.

use super::Db;
use crate::{OutboxRow, Result};

impl Db {
    /// Claims up to `limit` due lane heads of `channel` (the oldest pending row of each
    /// chat) for node `node_id` until `claim_until` (ms): rows no live node holds a claim
    /// on. Oldest first. Marking a row (sent, retry, done) ends its claim.
    pub async fn claim_outbox(
        &self,
        channel: &str,
        node_id: &str,
        now: i64,
        claim_until: i64,
        limit: u32,
    ) -> Result<Vec<OutboxRow>> {
        let sql = format!(
            "UPDATE channel_outbox SET claimed_by = $2, claim_until = $4 WHERE id IN (\
             SELECT o.id FROM channel_outbox o WHERE o.channel = $1 AND o.status = 'pending' \
             AND o.id = (SELECT MIN(i.id) FROM channel_outbox i WHERE i.channel = o.channel \
             AND i.chat_key = o.chat_key AND i.status = 'pending') \
             AND o.next_attempt_at <= $3 \
             AND (o.claimed_by IS NULL OR o.claim_until <= $3 OR NOT EXISTS \
             (SELECT 1 FROM nodes n WHERE n.id = o.claimed_by AND n.lease_until > $3)) \
             ORDER BY o.id LIMIT $5{skip}) RETURNING *",
            skip = super::dialect::SKIP_LOCKED
        );
        let rows = sqlx::query(&sql)
            .bind(channel)
            .bind(node_id)
            .bind(now)
            .bind(claim_until)
            .bind(i64::from(limit))
            .fetch_all(&self.writer)
            .await?;
        let mut claimed = rows
            .iter()
            .map(super::channels::outbox)
            .collect::<Result<Vec<_>>>()?;
        // RETURNING comes in no particular order.
        claimed.sort_by_key(|r| r.id);
        Ok(claimed)
    }

    /// Right before a row goes out: whether it is still pending and `node_id`'s claim,
    /// with that node's lease live past `live_until` (ms), so no other node may claim it
    /// before the send has reached the platform. When not, the claim is let go if it is
    /// still `node_id`'s (nothing was sent; the next claim, this node's or the new
    /// leader's, takes the row). On the side connection, like the marks.
    pub async fn confirm_outbox_claim(
        &self,
        id: i64,
        node_id: &str,
        live_until: i64,
    ) -> Result<bool> {
        let held = sqlx::query(
            "UPDATE channel_outbox SET claim_until = claim_until WHERE id = $1 \
             AND claimed_by = $2 AND status = 'pending' AND EXISTS \
             (SELECT 1 FROM nodes n WHERE n.id = $2 AND n.lease_until > $3)",
        )
        .bind(id)
        .bind(node_id)
        .bind(live_until)
        .execute(&self.side)
        .await?
        .rows_affected();
        if held == 1 {
            return Ok(true);
        }
        sqlx::query(
            "UPDATE channel_outbox SET claimed_by = NULL, claim_until = 0 \
             WHERE id = $1 AND claimed_by = $2",
        )
        .bind(id)
        .bind(node_id)
        .execute(&self.side)
        .await?;
        Ok(false)
    }

    /// Drops every claim `node_id` holds on `channel`'s rows (its sender starts: claims
    /// left by its previous life are void). Returns how many there were.
    pub async fn release_outbox_claims(&self, channel: &str, node_id: &str) -> Result<u64> {
        let res = sqlx::query(
            "UPDATE channel_outbox SET claimed_by = NULL, claim_until = 0 \
             WHERE channel = $1 AND claimed_by = $2",
        )
        .bind(channel)
        .bind(node_id)
        .execute(&self.writer)
        .await?;
        Ok(res.rows_affected())
    }
}
