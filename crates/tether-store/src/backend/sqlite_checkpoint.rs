//! Background WAL checkpoints. SQLite's automatic checkpoint runs inside the commit that
//! pushes the WAL past 1000 pages, so one unlucky write (a turn's event, start-up
//! recovery) paid for copying the WAL into the database and two `fsync`s — measured by
//! tether-bench as most of the time from start to serving on a big store, and as the
//! tail of turn latency. Commits no longer checkpoint (`wal_autocheckpoint = 0` on every
//! connection); a task checkpoints (`PASSIVE`: never waits for, nor blocks, readers and
//! the writer) on its own connection every [`EVERY`]. Durability is unchanged: with
//! `synchronous = NORMAL` the WAL was only synced at checkpoints before too, and SQLite
//! still checkpoints when the last connection closes.
//!
//! A `PASSIVE` checkpoint never shortens the WAL: the file starts over only when a writer
//! finds every frame copied and no reader still reading one, which readers that overlap
//! without pause, or a daemon killed before its checkpoints catch up, can put off for
//! ever. The soak found a WAL of 9.5 GB behind a database of 1.2 GB after 400 SIGKILLs,
//! each restart reading all of it again. So once the WAL passes [`TRUNCATE_AT`], the task
//! checkpoints with `TRUNCATE`, which waits (at most its connection's short busy time-out,
//! [`TRUNCATE_WAIT`]; writers queue meanwhile) for the readers to let go, and empties the
//! file; when they do not let go in time, it tries again at the next tick.

use std::time::Duration;

use super::conns::Conns;

/// How often the WAL is copied into the database.
pub(crate) const EVERY: Duration = Duration::from_secs(1);
/// The WAL size (in frames: pages of 4 KiB, so 64 MiB, as `journal_size_limit`) past which
/// a checkpoint empties it.
pub(crate) const TRUNCATE_AT: i64 = 16_384;
/// How long a truncating checkpoint waits for readers and the writer (its connection's
/// busy time-out).
pub(crate) const TRUNCATE_WAIT: Duration = Duration::from_millis(250);

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
                if let Err(e) = checkpoint(&p).await {
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

/// One round: `PASSIVE`, then `TRUNCATE` when the WAL is past [`TRUNCATE_AT`] frames.
async fn checkpoint(pool: &Conns) -> Result<(), sqlx::Error> {
    // (busy, frames in the WAL, frames copied into the database)
    let (_, frames, _): (i64, i64, i64) = sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
        .fetch_one(pool)
        .await?;
    if frames < TRUNCATE_AT {
        return Ok(());
    }
    let (busy, left, _): (i64, i64, i64) = sqlx::query_as("PRAGMA wal_checkpoint(TRUNCATE)")
        .fetch_one(pool)
        .await?;
    if busy != 0 {
        tracing::debug!(
            frames,
            "the WAL could not be emptied yet (readers); retrying later"
        );
    } else {
        tracing::debug!(frames, left, "WAL emptied");
    }
    Ok(())
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
