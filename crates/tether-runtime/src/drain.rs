//! Draining (issue 31): a node about to stop (an upgrade, a restart) takes no new work
//! and lets what runs finish. [`Runtime::begin_drain`] marks the node (its registry row,
//! so the others' placement leaves it out; `/api/v1/ready` answers 503), evicts its idle
//! sessions at once and every other one as its turn ends (the conversation is released:
//! its next message is taken up by another node); a conversation it does not own is
//! placed on another node, or refused with `draining` when there is none (SQLite).
//! [`Runtime::drained`] waits until no session is live here or the grace runs out; the
//! caller then shuts down as usual (a turn still running ends `interrupted`, and another
//! node's failover, or this node's next start, recovers it).

use std::sync::Arc;
use std::time::Duration;

use crate::Runtime;

/// How often [`Runtime::drained`] looks at the live sessions.
const DRAIN_LOOK: Duration = Duration::from_millis(100);

/// Since when this node drains (shared with its membership's heartbeat, which writes it
/// again when it registers anew). 0: not draining.
#[derive(Debug, Clone)]
pub(crate) struct DrainMark(Arc<tokio::sync::watch::Sender<i64>>);

impl Default for DrainMark {
    fn default() -> Self {
        DrainMark(Arc::new(tokio::sync::watch::Sender::new(0)))
    }
}

impl DrainMark {
    pub fn since(&self) -> Option<i64> {
        match *self.0.borrow() {
            0 => None,
            at => Some(at),
        }
    }

    /// Marks the node draining from `at_ms`; `false` when it was already.
    fn start(&self, at_ms: i64) -> bool {
        self.0.send_if_modified(|v| {
            let first = *v == 0;
            if first {
                *v = at_ms.max(1);
            }
            first
        })
    }

    /// Resolves once the node drains.
    async fn started(&self) {
        let mut rx = self.0.subscribe();
        let _ = rx.wait_for(|v| *v != 0).await;
    }
}

/// How far a drain is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainProgress {
    /// Sessions still live here (running a turn, or being evicted).
    pub live: usize,
    /// Of those, running a turn.
    pub busy: usize,
    /// Session actors still here (a turn starting, a queue, a request waiting).
    pub actors: usize,
}

impl DrainProgress {
    /// Nothing runs here any more.
    pub fn done(&self) -> bool {
        self.live == 0 && self.actors == 0
    }
}

impl Runtime {
    /// Starts draining this node (idempotent): see the module's header.
    pub async fn begin_drain(&self) {
        let ctx = self.ctx();
        let now = ctx.clock.now_ms();
        if !ctx.drain.start(now) {
            return;
        }
        let progress = self.drain_progress();
        tracing::info!(
            live = progress.live,
            busy = progress.busy,
            "draining: no new work here; running turns may finish"
        );
        if self.placement().cluster().enabled()
            && let Err(e) = ctx
                .store
                .cluster()
                .set_node_draining(self.placement().cluster().node_id(), now)
                .await
        {
            tracing::warn!(error = %e, "cannot mark this node draining in the registry");
        }
        ctx.pool.drain();
    }

    /// Resolves once this node drains (a signal, `tether drain`, the API).
    pub async fn drain_started(&self) {
        self.ctx().drain.started().await
    }

    /// Whether this node drains.
    pub fn draining(&self) -> bool {
        self.ctx().drain.since().is_some()
    }

    /// The sessions still live here.
    pub fn drain_progress(&self) -> DrainProgress {
        let status = self.ctx().pool.status();
        DrainProgress {
            live: status.live,
            busy: status.busy,
            actors: self.router().actors_running(),
        }
    }

    /// Waits until no session is live here, for at most `grace`; `true` when none is.
    /// Logs the progress every few seconds.
    pub async fn drained(&self, grace: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + grace;
        let mut last_log = tokio::time::Instant::now();
        loop {
            let progress = self.drain_progress();
            if progress.done() {
                tracing::info!("drained: no session is live here");
                return true;
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                tracing::warn!(
                    live = progress.live,
                    busy = progress.busy,
                    "the drain grace ran out; stopping what still runs"
                );
                return false;
            }
            // A session whose turn was starting as the drain began is evicted once idle.
            self.ctx().pool.drain();
            if now.duration_since(last_log) >= Duration::from_secs(5) {
                tracing::info!(
                    live = progress.live,
                    busy = progress.busy,
                    left_secs = deadline.duration_since(now).as_secs(),
                    "draining"
                );
                last_log = now;
            }
            tokio::time::sleep(DRAIN_LOOK).await;
        }
    }
}
