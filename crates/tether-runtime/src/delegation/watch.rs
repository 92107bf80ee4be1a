//! Reports every ended turn of a delegated task once: `delegation_completed` for the
//! first turn, `delegation_session_update` for later ones, on the parent's session (or
//! on the child's own session when the task has no parent session). A watcher follows
//! the event bus; at start-up it first reports what a restart left unreported (turns
//! interrupted by recovery) — until then delegation requests get `rebuilding` — and it
//! re-scans whenever it lags behind the bus. Each row is handled on its own: one that
//! keeps failing is retried a few times, then recorded as unreportable, and never holds
//! up the others.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tether_proto::{EventPayload, TurnOrigin};
use tether_store::now_ms;
use tokio::sync::broadcast::error::RecvError;

use crate::api::{Inner, Result};
use crate::delegation::status::outcome_of;
use crate::{Runtime, RuntimeError};

impl Runtime {
    /// Starts the outcome watcher (called once by [`Runtime::start`]). Delegation
    /// requests answer `rebuilding` until its start-up pass has handled every row.
    pub(crate) fn start_delegation_watch(&self) {
        let rx = self.subscribe();
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            let mut rx = rx;
            if let Some(rt) = upgrade(&weak) {
                rt.report_pending_delegation_turns().await;
                rt.ctx().delegation.set_ready();
            }
            loop {
                let ev = rx.recv().await;
                let Some(rt) = upgrade(&weak) else { return };
                match ev {
                    Ok(ev) => {
                        if let (Some(turn_id), true) = (&ev.turn_id, ev.payload.is_turn_terminal())
                            && let Err(e) = rt.report_delegation_turn(turn_id).await
                        {
                            tracing::error!(turn_id, error = %e, "cannot report a delegated turn");
                        }
                    }
                    Err(RecvError::Lagged(_)) => rt.report_pending_delegation_turns().await,
                    Err(RecvError::Closed) => return,
                }
            }
        });
    }

    /// Reports every ended, unreported turn, each on its own (see [`Self::report_or_give_up`]).
    /// Listing them is retried until it works: without the list nothing is handled.
    async fn report_pending_delegation_turns(&self) {
        let mut delay = RETRY_FIRST;
        let ids = loop {
            match self.ctx().store.unreported_delegation_turn_ids().await {
                Ok(ids) => break ids,
                Err(e) => {
                    tracing::error!(error = %e, "cannot list unreported delegated turns; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(RETRY_MAX);
                }
            }
        };
        for turn_id in ids {
            self.report_or_give_up(&turn_id).await;
        }
    }

    /// Reports one turn, retrying a failure [`REPORT_ATTEMPTS`] times in all; then records
    /// it as unreportable (marked handled, with a status event saying why).
    async fn report_or_give_up(&self, turn_id: &str) {
        let mut delay = RETRY_FIRST;
        let mut last = String::new();
        for attempt in 1..=REPORT_ATTEMPTS {
            match self.report_delegation_turn(turn_id).await {
                Ok(()) => return,
                Err(e) => {
                    tracing::warn!(turn_id, attempt, error = %e, "cannot report a delegated turn");
                    last = e.to_string();
                }
            }
            if attempt < REPORT_ATTEMPTS {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(RETRY_MAX);
            }
        }
        tracing::error!(
            turn_id,
            error = last,
            "giving up on reporting a delegated turn"
        );
        match self
            .ctx()
            .store
            .record_unreportable_turn(turn_id, &last)
            .await
        {
            Ok(ev) => self.ctx().publish(ev),
            Err(e) => {
                tracing::error!(turn_id, error = %e, "cannot record an unreportable delegated turn");
            }
        }
    }

    /// Reports one ended turn if it belongs to a task (no-op otherwise or if done).
    async fn report_delegation_turn(&self, turn_id: &str) -> Result<()> {
        let store = &self.ctx().store;
        let Some(dt) = store.delegation_turn(turn_id).await? else {
            return Ok(());
        };
        if dt.reported {
            return Ok(());
        }
        let turn = store
            .get_turn(turn_id)
            .await?
            .ok_or_else(|| RuntimeError::Internal(format!("turn {turn_id} vanished")))?;
        if !turn.status.is_terminal() {
            return Ok(());
        }
        let outcome = outcome_of(&turn, now_ms());
        let payload = if dt.turn_version == 1 && dt.origin == TurnOrigin::Parent {
            EventPayload::DelegationCompleted {
                task_id: dt.task_id,
                turn_id: dt.turn_id,
                turn_version: dt.turn_version,
                outcome,
            }
        } else {
            EventPayload::DelegationSessionUpdate {
                task_id: dt.task_id,
                turn_id: dt.turn_id,
                turn_version: dt.turn_version,
                origin: dt.origin,
                outcome,
            }
        };
        if let Some(ev) = store.report_delegation_turn(turn_id, &payload).await? {
            self.ctx().publish([ev]);
        }
        Ok(())
    }
}

/// Attempts at reporting one turn before it is recorded as unreportable.
const REPORT_ATTEMPTS: u32 = 4;
/// First pause between attempts (doubling, at most [`RETRY_MAX`]).
const RETRY_FIRST: Duration = Duration::from_millis(250);
const RETRY_MAX: Duration = Duration::from_secs(5);

fn upgrade(weak: &Weak<Inner>) -> Option<Runtime> {
    weak.upgrade().map(|inner| Runtime { inner })
}
