//! The durable timer facility's loop (issues 29 and 30): each node claims the timers
//! that are due (`tether_store::Timers`: one node per timer, a claim of a node that dies
//! lapses and another takes it) every half second and fires each by its kind — a
//! continuation after a vendor's limit (`parking`), a schedule's run (`schedules`).

use std::sync::Arc;
use std::time::Duration;

use tether_store::{CONTINUE_AFTER_LIMIT, SCHEDULE_RUN};

use crate::Runtime;

/// How often each node looks for due timers.
const LOOK: Duration = Duration::from_millis(500);
/// How long a claim holds before another node may fire the timer.
const CLAIM_MS: i64 = 30_000;
/// Timers claimed per look.
const BATCH: i64 = 64;
/// A timer whose work met a passing failure waits this long and is tried again.
const RETRY_MS: i64 = 2_000;

/// Whether a failure to send a timer's message passes (the conversation's node was away
/// or changing hands, the store unreachable, the queue full): then the timer waits and
/// is tried again, the same turn id making a second sending harmless. Anything else (the
/// conversation is gone or archived, the message is refused) is final.
pub(crate) fn passing(e: &crate::RuntimeError) -> bool {
    use crate::RuntimeError as E;
    match e {
        E::Store(s) => s.is_unavailable(),
        E::Remote { .. }
        | E::OwnerLost { .. }
        | E::OwnedElsewhere { .. }
        | E::QueueFull { .. }
        | E::Internal(_) => true,
        E::NotFound { .. }
        | E::BadRequest(_)
        | E::Command(_)
        | E::UnknownAgent { .. }
        | E::InvalidCwd { .. }
        | E::Resolve(_)
        | E::NothingRunning
        | E::Archived(_)
        | E::Attachment(_)
        | E::FileOut(_)
        | E::Delegation { .. }
        | E::Denied(_)
        | E::BudgetExceeded(_) => false,
    }
}

/// Gives timer `id` back to wait [`RETRY_MS`] more.
pub(crate) async fn retry(rt: &Runtime, id: &str) {
    let due = rt.ctx().clock.now_ms() + RETRY_MS;
    if let Err(e) = rt.ctx().store.timers().retry_timer(id, due).await {
        tracing::warn!(timer = id, error = %e, "cannot give a timer back; its claim lapses instead");
    }
}

/// Starts this node's timer loop (called once at start).
pub(crate) fn start(rt: &Runtime) {
    let weak = Arc::downgrade(&rt.inner);
    tokio::spawn(async move {
        let mut look = tokio::time::interval(LOOK);
        look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            look.tick().await;
            let Some(inner) = weak.upgrade() else { return };
            let rt = Runtime { inner, who: None };
            fire_due(&rt).await;
        }
    });
}

/// Claims the due timers and fires each by its kind.
async fn fire_due(rt: &Runtime) {
    let ctx = rt.ctx();
    let node = ctx.config.cluster.node_id.to_string();
    loop {
        let now = ctx.clock.now_ms();
        let due = match ctx
            .store
            .timers()
            .claim_due_timers(&node, now, CLAIM_MS, BATCH)
            .await
        {
            Ok(due) => due,
            Err(e) => {
                tracing::debug!(error = %e, "cannot look for due timers");
                return;
            }
        };
        let full = due.len() as i64 == BATCH;
        for t in due {
            match t.kind.as_str() {
                CONTINUE_AFTER_LIMIT => crate::parking::fire(rt, &t).await,
                SCHEDULE_RUN => crate::schedules::fire(rt, &t).await,
                other => {
                    tracing::warn!(timer = t.id, kind = other, "a timer of an unknown kind");
                    let _ = ctx.store.timers().fire_timer(&t.id).await;
                }
            }
        }
        // A full batch: more may be due now.
        if !full {
            return;
        }
    }
}
