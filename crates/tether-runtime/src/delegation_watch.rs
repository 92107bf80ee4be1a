//! Reports every ended turn of a delegated task on the parent's session, once:
//! `delegation_completed` for the first turn, `delegation_session_update` for later ones.
//! A watcher follows the event bus; at start-up it first reports what a restart left
//! unreported (turns interrupted by recovery) — until then delegation requests get
//! `rebuilding` — and it re-scans whenever it lags behind the bus.

use std::sync::{Arc, Weak};

use tether_proto::{EventPayload, TurnOrigin};
use tether_store::now_ms;
use tokio::sync::broadcast::error::RecvError;

use crate::api::{Inner, Result};
use crate::delegation_status::outcome_of;
use crate::{Runtime, RuntimeError};

impl Runtime {
    /// Starts the outcome watcher (called once by [`Runtime::start`]). Delegation
    /// requests answer `rebuilding` until its start-up pass is done.
    pub(crate) fn start_delegation_watch(&self) {
        let rx = self.subscribe();
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            let mut rx = rx;
            if let Some(rt) = upgrade(&weak) {
                if let Err(e) = rt.report_pending_delegation_turns().await {
                    tracing::error!(error = %e, "cannot report delegated turns after restart");
                }
                rt.ctx().delegation.set_ready();
            }
            loop {
                let ev = rx.recv().await;
                let Some(rt) = upgrade(&weak) else { return };
                let res = match ev {
                    Ok(ev) => match (&ev.turn_id, ev.payload.is_turn_terminal()) {
                        (Some(turn_id), true) => rt.report_delegation_turn(turn_id).await,
                        _ => Ok(()),
                    },
                    Err(RecvError::Lagged(_)) => rt.report_pending_delegation_turns().await,
                    Err(RecvError::Closed) => return,
                };
                if let Err(e) = res {
                    tracing::error!(error = %e, "cannot report a delegated turn");
                }
            }
        });
    }

    async fn report_pending_delegation_turns(&self) -> Result<()> {
        for dt in self.ctx().store.unreported_delegation_turns().await? {
            self.report_delegation_turn(&dt.turn_id).await?;
        }
        Ok(())
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

fn upgrade(weak: &Weak<Inner>) -> Option<Runtime> {
    weak.upgrade().map(|inner| Runtime { inner })
}
