//! A timer whose work met a passing failure (issues 29 and 30): what counts as passing,
//! and giving the timer back to wait a moment. Used by what the timer loop (`timers`)
//! fires: parked continuations (`parking`) and scheduled runs (`schedules`).

use crate::Runtime;

/// A timer whose work met a passing failure waits this long and is tried again.
const RETRY_MS: i64 = 2_000;
/// For at most this long after it was due: then the failure counts as final (said in
/// the conversation), so nothing waits for ever.
pub(crate) const GIVE_UP_MS: i64 = 10 * 60_000;

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
        | E::Draining
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
        | E::BudgetExceeded(_)
        | E::Worktree(_) => false,
    }
}

/// Gives timer `id` (claimed by this node) back to wait [`RETRY_MS`] more.
pub(crate) async fn retry(rt: &Runtime, id: &str) {
    let due = rt.ctx().clock.now_ms() + RETRY_MS;
    let node = rt.ctx().config.cluster.node_id.to_string();
    if let Err(e) = rt.ctx().store.timers().retry_timer(id, &node, due).await {
        tracing::warn!(timer = id, error = %e, "cannot give a timer back; its claim lapses instead");
    }
}
