//! The durable timer facility's loop (issues 29 and 30): each node claims the timers
//! that are due (`tether_store::Timers`: one node per timer, a claim of a node that dies
//! lapses and another takes it) when they fall due (looking at least every half second)
//! and fires each by its kind — a continuation after a vendor's limit (`parking`), a
//! schedule's run (`schedules`), a worktree's removal or the worktrees' clean-up
//! (`worktree`).

use std::sync::Arc;
use std::time::Duration;

use tether_store::{CONTINUE_AFTER_LIMIT, SCHEDULE_RUN, WORKTREE_REMOVAL, WORKTREE_SWEEP};

use crate::Runtime;

/// How often each node looks for due timers at the least (timers other nodes add, and
/// the ones added here less than this ahead, are seen at the next look).
const LOOK: Duration = Duration::from_millis(500);
/// How long a claim holds before another node may fire the timer.
const CLAIM_MS: i64 = 30_000;
/// Timers claimed per look.
const BATCH: i64 = 64;
/// Starts this node's timer loop (called once at start): it fires what is due, then
/// sleeps until the next timer falls due or [`LOOK`], whichever comes first, so a timer
/// fires on time rather than up to a look late.
pub(crate) fn start(rt: &Runtime) {
    crate::worktree::sweep::schedule(rt);
    let weak = Arc::downgrade(&rt.inner);
    tokio::spawn(async move {
        loop {
            let wait = {
                let Some(inner) = weak.upgrade() else { return };
                let rt = Runtime { inner, who: None };
                let looked = fire_due(&rt).await;
                if looked { until_next(&rt).await } else { LOOK }
            };
            tokio::time::sleep(wait).await;
        }
    });
}

/// How long to sleep after a look: until the next timer falls due (none when one fell
/// due during the look), at most [`LOOK`].
async fn until_next(rt: &Runtime) -> Duration {
    let Ok(Some(due)) = rt.ctx().store.timers().next_timer_due().await else {
        return LOOK;
    };
    let ahead = u64::try_from(due - rt.ctx().clock.now_ms()).unwrap_or(0);
    Duration::from_millis(ahead).min(LOOK)
}

/// Fires one claimed timer by its kind.
async fn fire(rt: &Runtime, t: &tether_store::Timer) {
    match t.kind.as_str() {
        CONTINUE_AFTER_LIMIT => crate::parking::fire(rt, t).await,
        SCHEDULE_RUN => crate::schedules::fire(rt, t).await,
        WORKTREE_REMOVAL => crate::worktree::fire_removal(rt, t).await,
        WORKTREE_SWEEP => crate::worktree::sweep::fire(rt, t).await,
        other => {
            tracing::warn!(timer = t.id, kind = other, "a timer of an unknown kind");
            let _ = rt.ctx().store.timers().fire_timer(&t.id).await;
        }
    }
}

/// Claims the due timers and fires each by its kind; false when it could not look (the
/// node drains, or the store failed), so the loop does not look again at once.
async fn fire_due(rt: &Runtime) -> bool {
    let ctx = rt.ctx();
    let node = ctx.config.cluster.node_id.to_string();
    loop {
        // A draining node fires nothing (issue 31): another node does, or this one
        // after its restart.
        if rt.ops().draining() {
            return false;
        }
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
                return false;
            }
        };
        let full = due.len() as i64 == BATCH;
        // All at once: a send that waits for another node must not hold the rest of the
        // batch until their claims lapse.
        futures::future::join_all(due.iter().map(|t| fire(rt, t))).await;
        // A full batch: more may be due now.
        if !full {
            return true;
        }
    }
}
