//! Inbound updates kept until handled: recorded together with their dedupe key, marked
//! handled by the channel once the runtime has stored the message's turn, and replayed at
//! start-up while unhandled (so an accepted message survives a crash).

use sqlx::Row;

use crate::{Result, Store, now_ms};

/// An accepted inbound update not yet marked handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingInbound {
    pub key: String,
    /// The raw update as it was accepted.
    pub payload: String,
}

impl Store {
    /// Records the dedupe key and keeps the raw update, in one transaction; `true` when
    /// the key is new (the caller then handles the update and later calls
    /// [`Store::mark_inbound_handled`]).
    pub async fn accept_inbound(&self, channel: &str, key: &str, payload: &str) -> Result<bool> {
        let now = now_ms();
        let mut tx = self.writer.begin().await?;
        let res =
            sqlx::query("INSERT OR IGNORE INTO inbound_dedupe (source, key, at) VALUES (?, ?, ?)")
                .bind(channel)
                .bind(key)
                .bind(now)
                .execute(&mut *tx)
                .await?;
        if res.rows_affected() != 1 {
            return Ok(false);
        }
        sqlx::query(
            "INSERT OR IGNORE INTO channel_inbound (channel, key, payload, created_at) \
             VALUES (?, ?, ?, ?)",
        )
        .bind(channel)
        .bind(key)
        .bind(payload)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Marks an accepted update handled: it will not be replayed, and its row goes (the
    /// dedupe key stays in `inbound_dedupe` until [`Store::prune_inbound`]).
    pub async fn mark_inbound_handled(&self, channel: &str, key: &str) -> Result<()> {
        sqlx::query("DELETE FROM channel_inbound WHERE channel = ? AND key = ?")
            .bind(channel)
            .bind(key)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// Forgets the dedupe keys of `source` recorded before `before_ms` (a platform that
    /// redelivers later than that is no longer recognised); returns how many went.
    pub async fn prune_inbound(&self, source: &str, before_ms: i64) -> Result<u64> {
        let res = sqlx::query("DELETE FROM inbound_dedupe WHERE source = ? AND at < ?")
            .bind(source)
            .bind(before_ms)
            .execute(&self.writer)
            .await?;
        Ok(res.rows_affected())
    }

    /// The accepted updates not yet handled, in arrival order.
    pub async fn unhandled_inbound(&self, channel: &str) -> Result<Vec<PendingInbound>> {
        let rows = sqlx::query(
            "SELECT key, payload FROM channel_inbound WHERE channel = ? AND handled = 0 \
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn accepted_updates_are_kept_until_handled_and_deduplicated() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let run = async {
            let store = Store::open(dir.path()).await?;
            assert!(store.accept_inbound("telegram", "1", "{\"a\":1}").await?);
            assert!(store.accept_inbound("telegram", "2", "{\"a\":2}").await?);
            assert!(!store.accept_inbound("telegram", "1", "{\"a\":1}").await?);
            let keys = |v: Vec<PendingInbound>| v.into_iter().map(|p| p.key).collect::<Vec<_>>();
            assert_eq!(keys(store.unhandled_inbound("telegram").await?), ["1", "2"]);
            assert!(store.unhandled_inbound("feishu").await?.is_empty());
            store.mark_inbound_handled("telegram", "1").await?;
            let left = store.unhandled_inbound("telegram").await?;
            assert_eq!(left.len(), 1);
            assert_eq!(left[0].payload, "{\"a\":2}");
            store.close().await;
            Ok::<_, crate::StoreError>(())
        };
        tokio::time::timeout(std::time::Duration::from_secs(10), run)
            .await
            .unwrap_or_else(|_| panic!("timed out"))
            .unwrap_or_else(|e| panic!("{e}"));
    }
}
