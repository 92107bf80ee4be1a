//! Draining (issue 31): a node about to stop (an upgrade, a restart) takes no new work
//! and lets what runs finish. [`Runtime::begin_drain`] marks the node (its registry row,
//! so the others' placement leaves it out; `/api/v1/ready` answers 503), evicts its idle
//! sessions at once and every other one as its turn ends (the conversation is released:
//! its next message is taken up by another node); a conversation it does not own is
//! placed on another node, or refused with `draining` when there is none (SQLite).
//! [`Runtime::drained`] waits until no session is live here or the grace runs out; the
//! caller then shuts down as usual (a turn still running ends `interrupted`, and another
//! node's failover, or this node's next start, recovers it).

use std::time::Duration;

use crate::Runtime;

/// How often [`Runtime::drained`] looks at the live sessions.
const DRAIN_LOOK: Duration = Duration::from_millis(100);

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
    pub fn done(self) -> bool {
        self.live == 0 && self.actors == 0
    }
}

/// The node's operation (issue 31): draining and the gauges of a scrape. A view of the
/// runtime, reached through [`Runtime::ops`].
#[derive(Clone, Copy)]
pub struct Ops<'a> {
    pub(crate) rt: &'a Runtime,
}

impl<'a> Ops<'a> {
    fn ctx(self) -> &'a crate::ctx::Ctx {
        self.rt.ctx()
    }

    /// Starts draining this node (idempotent): see the module's header.
    pub async fn begin_drain(self) {
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
        if self.rt.placement().cluster().enabled()
            && let Err(e) = ctx
                .store
                .cluster()
                .set_node_draining(self.rt.placement().cluster().node_id(), now)
                .await
        {
            tracing::warn!(error = %e, "cannot mark this node draining in the registry");
        }
        ctx.pool.drain();
    }

    /// Resolves once this node drains (a signal, `tether drain`, the API).
    pub async fn drain_started(self) {
        self.ctx().drain.started().await
    }

    /// Resolves when the node drains, for a delegation wait of a caller from outside
    /// (they may wait again on another node); never for a session's own wait, whose turn
    /// runs here until it ends or the grace does.
    pub(crate) async fn drain_ends_wait(self, caller: &crate::Caller) {
        match caller {
            crate::Caller::Session { .. } => std::future::pending().await,
            crate::Caller::External | crate::Caller::Person => self.drain_started().await,
        }
    }

    /// Whether this node's store answers now (issue 25; readiness adds draining).
    pub async fn ready(self) -> crate::error::Result<()> {
        Ok(self.ctx().store.ready().await?)
    }

    /// Whether this node drains.
    pub fn draining(self) -> bool {
        self.ctx().drain.since().is_some()
    }

    /// The sessions still live here.
    pub fn drain_progress(self) -> DrainProgress {
        let status = self.ctx().pool.status();
        DrainProgress {
            live: status.live,
            busy: status.busy,
            actors: self.rt.router().actors_running(),
        }
    }

    /// Waits until no session is live here, for at most `grace`; `true` when none is.
    /// Logs the progress every few seconds.
    pub async fn drained(self, grace: Duration) -> bool {
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
