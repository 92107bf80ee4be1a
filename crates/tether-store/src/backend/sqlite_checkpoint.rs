//! Background WAL checkpoints. SQLite's automatic checkpoint runs inside the commit that
//! pushes the WAL past 1000 pages, so one unlucky write (a turn's event, start-up
//! recovery) paid for copying the WAL into the database and two `fsync`s — measured by
//! tether-bench as most of the time from start to serving on a big store, and as the
//! tail of turn latency. Commits no longer checkpoint (`wal_autocheckpoint = 0` on every
//! connection); a task checkpoints (`PASSIVE`: never waits for, nor blocks, readers and
//! the writer) on its own connection every [`EVERY`]. Durability is unchanged: with
//! `synchronous = NORMAL` the WAL was only synced at checkpoints before too, and SQLite
//! still checkpoints when the last connection closes.

use std::time::Duration;

use super::conns::Conns;

/// How often the WAL is copied into the database.
pub(crate) const EVERY: Duration = Duration::from_secs(1);

/// Stops the checkpoint task when the last store clone is dropped.
pub(crate) struct Checkpointer {
    pool: Conns,
    task: tokio::task::AbortHandle,
}

impl Checkpointer {
    /// Starts checkpointing on `pool` (a read-write pool of its own).
    pub fn start(pool: Conns) -> Checkpointer {
        let p = pool.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if p.is_closed() {
                    return;
                }
                if let Err(e) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
                    .execute(&p)
                    .await
                {
                    tracing::debug!(error = %e, "WAL checkpoint failed; retrying later");
                }
            }
        })
        .abort_handle();
        Checkpointer { pool, task }
    }

    pub async fn close(&self) {
        self.task.abort();
        self.pool.close().await;
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
