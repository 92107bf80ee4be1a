//! Inbound updates kept until handled: recorded together with their dedupe key, marked
//! handled by the channel once the runtime has stored the message's turn, and replayed at
//! start-up while unhandled (so an accepted message survives a crash).

use sqlx::Row;

use super::Db;
use crate::{PendingInbound, Result, StoreError};

/// How an accept's transaction ended.
enum Accepted {
    /// Committed (`true`: new) or found a duplicate (`false`).
    Done(bool),
    /// The commit's answer was lost with the connection: stored or not, unknown.
    CommitLost(StoreError),
}

impl Db {
    /// Records an inbound dedupe key; `false` when it was seen before.
    pub async fn remember_inbound(&self, source: &str, key: &str) -> Result<bool> {
        let res = sqlx::query(
            "INSERT INTO inbound_dedupe (source, key, at) VALUES ($1, $2, $3) \
             ON CONFLICT DO NOTHING",
        )
        .bind(source)
        .bind(key)
        .bind(self.now_ms())
        .execute(&self.writer)
        .await?;
        Ok(res.rows_affected() == 1)
    }

    /// Records the dedupe key and keeps the raw update, in one transaction; `true` when
    /// the key is new (the caller then handles the update and later calls
    /// [`Channels::mark_inbound_handled`](crate::Channels::mark_inbound_handled)).
    ///
    /// When the database goes away on the way (issue 25), whether the transaction
    /// committed is read back (the key's row carries this call's time) before answering:
    /// a caller told "not recorded" fetches the update again, and one recorded must not
    /// then be dropped as a duplicate.
    pub async fn accept_inbound(&self, channel: &str, key: &str, payload: &str) -> Result<bool> {
        let now = self.now_ms();
        match self.try_accept_inbound(channel, key, payload, now).await? {
            Accepted::Done(new) => Ok(new),
            // Only a commit whose answer was lost may have stored it; a failure before
            // (no connection, the server gone at `BEGIN`) stored nothing and fails at once.
            Accepted::CommitLost(e) => {
                let at: Option<i64> = self
                    // Shorter than a webhook's deadline (30 s), so a platform that
                    // redelivers finds the answer settled.
                    .read_back(
                        "an inbound update",
                        std::time::Duration::from_secs(15),
                        || async {
                            Ok(sqlx::query_scalar(
                                "SELECT at FROM inbound_dedupe WHERE source = $1 AND key = $2",
                            )
                            .bind(channel)
                            .bind(key)
                            .fetch_optional(&self.reader)
                            .await?)
                        },
                    )
                    .await?;
                if at == Some(now) {
                    tracing::info!(
                        channel,
                        key,
                        "an update whose answer was lost had been recorded"
                    );
                    Ok(true)
                } else {
                    Err(e)
                }
            }
        }
    }

    async fn try_accept_inbound(
        &self,
        channel: &str,
        key: &str,
        payload: &str,
        now: i64,
    ) -> Result<Accepted> {
        let mut tx = self.writer.begin().await?;
        let res = sqlx::query(
            "INSERT INTO inbound_dedupe (source, key, at) VALUES ($1, $2, $3) \
                 ON CONFLICT DO NOTHING",
        )
        .bind(channel)
        .bind(key)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        if res.rows_affected() != 1 {
            return Ok(Accepted::Done(false));
        }
        sqlx::query(
            "INSERT INTO channel_inbound (channel, key, payload, created_at) \
             VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
        )
        .bind(channel)
        .bind(key)
        .bind(payload)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        match tx.commit().await.map_err(StoreError::from) {
            Ok(()) => Ok(Accepted::Done(true)),
            Err(e) if e.is_unavailable() => Ok(Accepted::CommitLost(e)),
            Err(e) => Err(e),
        }
    }

    /// Marks an accepted update handled: it will not be replayed, and its row goes (the
    /// dedupe key stays in `inbound_dedupe` until
    /// [`Channels::prune_inbound`](crate::Channels::prune_inbound)).
    pub async fn mark_inbound_handled(&self, channel: &str, key: &str) -> Result<()> {
        sqlx::query("DELETE FROM channel_inbound WHERE channel = $1 AND key = $2")
            .bind(channel)
            .bind(key)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// Forgets the dedupe keys of `source` recorded before `before_ms` (a platform that
    /// redelivers later than that is no longer recognised); returns how many went.
    pub async fn prune_inbound(&self, source: &str, before_ms: i64) -> Result<u64> {
        let res = sqlx::query("DELETE FROM inbound_dedupe WHERE source = $1 AND at < $2")
            .bind(source)
            .bind(before_ms)
            .execute(&self.writer)
            .await?;
        Ok(res.rows_affected())
    }

    /// The accepted updates not yet handled, in arrival order.
    pub async fn unhandled_inbound(&self, channel: &str) -> Result<Vec<PendingInbound>> {
        let rows = sqlx::query(
            "SELECT key, payload FROM channel_inbound WHERE channel = $1 AND handled = 0 \
             ORDER BY id",
        )
        .bind(channel)
        .fetch_all(&self.writer)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(PendingInbound {
                    key: r.try_get("key")?,
                    payload: r.try_get("payload")?,
                })
            })
            .collect()
    }
}
