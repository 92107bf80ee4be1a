//! A running turn while the store is unreachable (issue 25; a child module of `actor`).
//!
//! The turn keeps its agent. Streamed events the store refuses as unavailable wait here,
//! in order, and go first with the next batch once it answers again. At most
//! [`MAX_HELD_EVENTS`] wait; past that bound, or when the outage lasts longer than
//! `store_outage_limit`, the turn is stopped and ends `interrupted` (the session stays
//! bound, for a follow-up to resume). A turn's start and its end wait for the store as
//! long as it takes (with back-off), so a turn never stays "running" in the store once
//! the database is back. An approval or a question the agent asks meanwhile waits too
//! (after the events before it, within the same limit) and reaches people once stored.

use std::collections::VecDeque;
use std::future::Future;
use std::time::Duration;

use tether_proto::{EventPayload, TurnId};
use tether_store::StoreError;
use tokio::time::Instant;

use super::Actor;

/// Most streamed events of a turn that wait in memory for the store (about a few MB of
/// deltas); beyond, the turn is stopped and ends `interrupted`.
pub(crate) const MAX_HELD_EVENTS: usize = 10_000;

/// Most waiting events a turn's end takes into its own transaction (the store's one-query
/// bound for them).
const STREAMED_WITH_END: usize = 64;

/// Events the store could not take yet, and since when it has refused.
#[derive(Default)]
pub(super) struct Held {
    events: VecDeque<EventPayload>,
    turn_id: Option<TurnId>,
    since: Option<Instant>,
    /// Events dropped past the bound (the turn is being stopped).
    dropped: usize,
}

impl Held {
    pub(super) fn is_empty(&self) -> bool {
        self.events.is_empty()
    }
}

/// Runs `op` until it succeeds or fails for another reason than an unreachable store,
/// waiting 250 ms doubling to 2 s between tries.
pub(super) async fn patiently<T, F, Fut>(what: &str, mut op: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    let mut wait = Duration::from_millis(250);
    let mut warned = false;
    loop {
        match op().await {
            Err(e) if e.is_unavailable() => {
                if !warned {
                    tracing::warn!(error = %e, "the store is unreachable; {what} waits for it");
                    warned = true;
                }
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(2));
            }
            other => return other,
        }
    }
}

impl Actor {
    /// Stores `batch` after whatever waits already, in order. When the store is
    /// unreachable the events wait (see the module header); `true` when they were stored.
    pub(super) async fn store_batch(&mut self, batch: &mut Vec<EventPayload>) -> bool {
        self.hold(batch);
        self.try_store_held().await
    }

    /// Puts `batch` behind the events that wait (at most [`MAX_HELD_EVENTS`]).
    fn hold(&mut self, batch: &mut Vec<EventPayload>) {
        let turn_id = self.current.as_ref().map(|c| c.turn_id.clone());
        if !self.held.is_empty() && self.held.turn_id != turn_id {
            // A previous turn's events never wait past its end (see `store_held`).
            self.held = Held::default();
        }
        self.held.turn_id = turn_id;
        let room = MAX_HELD_EVENTS.saturating_sub(self.held.events.len());
        if batch.len() > room {
            self.held.dropped += batch.len() - room;
            batch.truncate(room);
        }
        self.held.events.extend(batch.drain(..));
    }

    /// One try at storing the waiting events. On an unreachable store they keep waiting;
    /// past the bound or the limit the turn is stopped.
    async fn try_store_held(&mut self) -> bool {
        if self.held.events.is_empty() {
            return true;
        }
        // Taken, not copied (a copy was one more allocation and copy per streamed event);
        // put back if the store is away.
        let events = Vec::from(std::mem::take(&mut self.held.events));
        let turn_id = self.held.turn_id.clone();
        match self
            .ctx
            .store
            .events()
            .append_events(&self.session.id, turn_id.as_ref(), &events)
            .await
        {
            Ok(evs) => {
                self.ctx.streamed.batch(evs.len());
                if let Some(since) = self.held.since.take() {
                    tracing::info!(
                        events = evs.len(),
                        waited_ms = since.elapsed().as_millis() as u64,
                        "the store is back; stored the events that waited"
                    );
                }
                // A gap past the bound is said, not hidden.
                if self.held.dropped > 0 {
                    tracing::error!(
                        dropped = self.held.dropped,
                        "streamed events were dropped while the store was away"
                    );
                }
                self.held = Held {
                    turn_id: self.held.turn_id.take(),
                    ..Held::default()
                };
                true
            }
            Err(e) if e.is_unavailable() => {
                self.held.events = events.into();
                let since = *self.held.since.get_or_insert_with(Instant::now);
                let limit = self.ctx.config.store_outage_limit;
                if self.held.dropped > 0 || since.elapsed() >= limit {
                    self.give_up_on_store().await;
                }
                false
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot store agent events");
                false
            }
        }
    }

    /// Runs `op`, a write the turn cannot go on without (an approval, a question), after
    /// the events that wait, in order. While the store is unreachable it waits, at most
    /// until `store_outage_limit` has passed since the store went away; then the turn is
    /// stopped and `None` comes back (the agent's request is cancelled by the caller).
    pub(super) async fn store_in_order<T, F, Fut>(
        &mut self,
        what: &str,
        op: F,
    ) -> Option<Result<T, StoreError>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let mut wait = Duration::from_millis(250);
        while !self.held.is_empty() {
            if self.try_store_held().await {
                break;
            }
            if self.current.as_ref().is_none_or(|c| c.store_lost) {
                return None;
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_secs(2));
        }
        let since = self.held.since.unwrap_or_else(Instant::now);
        let left = self
            .ctx
            .config
            .store_outage_limit
            .saturating_sub(since.elapsed());
        match tokio::time::timeout(left, patiently(what, op)).await {
            Ok(done) => Some(done),
            Err(_) => {
                self.give_up_on_store().await;
                None
            }
        }
    }

    /// Stops the running turn because the store stayed away: it ends `interrupted`.
    async fn give_up_on_store(&mut self) {
        let Some(cur) = self.current.as_mut() else {
            return;
        };
        if cur.store_lost {
            return;
        }
        tracing::warn!(
            turn_id = %cur.turn_id,
            held = self.held.events.len(),
            dropped = self.held.dropped,
            "the store stayed unreachable; stopping the turn"
        );
        cur.store_lost = true;
        self.stop().await;
    }

    /// The prompt ended with `batch` not stored yet: it waits here for the turn's end,
    /// which stores it in its own transaction, before the end (one commit for both,
    /// `take_for_end`), instead of a commit of its own just before.
    pub(super) fn defer_to_end(&mut self, batch: &mut Vec<EventPayload>) {
        self.hold(batch);
    }

    /// At a turn's end: the events that wait, to be stored with the end when they are
    /// few enough for its one query (`tether_store`'s bound); more are stored first, on
    /// their own (waiting for the store as long as it takes), and none are returned.
    pub(super) async fn take_for_end(&mut self) -> Vec<EventPayload> {
        if self.held.events.len() > STREAMED_WITH_END {
            self.store_held().await;
            return Vec::new();
        }
        let events = self.held.events.drain(..).collect();
        self.held = Held::default();
        events
    }

    /// Before another write of the session's events (it goes dormant): the events that
    /// wait go first, in one try (an unreachable store keeps them waiting).
    pub(super) async fn store_held_once(&mut self) {
        if !self.held.is_empty() {
            self.try_store_held().await;
        }
    }

    /// Before a turn's end is recorded: the events that wait are stored first (waiting
    /// for the store as long as it takes).
    pub(super) async fn store_held(&mut self) {
        if self.held.events.is_empty() {
            // Nothing waits: the next turn starts with a clean slate.
            self.held = Held::default();
            return;
        }
        let events: Vec<EventPayload> = self.held.events.drain(..).collect();
        let turn_id = self.held.turn_id.take();
        let store = self.ctx.store.clone();
        let session_id = self.session.id.clone();
        match patiently("a turn's events", || {
            store
                .events()
                .append_events(&session_id, turn_id.as_ref(), &events)
        })
        .await
        {
            Ok(evs) => self.ctx.streamed.batch(evs.len()),
            Err(e) => tracing::error!(error = %e, "cannot store agent events"),
        }
        self.held = Held::default();
    }

    /// Why a turn stopped for the store ends `interrupted`.
    pub(super) fn store_lost_message(&self) -> String {
        let limit = self.ctx.config.store_outage_limit.as_secs();
        format!(
            "the database was unreachable for too long (more than {limit} s, or more than \
             {MAX_HELD_EVENTS} events waited); the session is kept: send a message to continue"
        )
    }
}
