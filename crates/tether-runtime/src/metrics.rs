//! The runtime's Prometheus series (issue 31), named once here. Events are recorded
//! where they happen through the `metrics` facade (a no-op until the binary installs a
//! recorder); what is a count of the present (sessions, approvals pending, nodes,
//! leaders) is read when scraped (`Ops::refresh_gauges`, `gauges.rs`). Every series is listed
//! with its meaning in the README ("Operating tether").

use std::time::Duration;

use tether_proto::{ErrorCode, TurnStatus};

pub const TURNS: &str = "tether_turns_total";
pub const TURN_SECONDS: &str = "tether_turn_duration_seconds";
pub const TURN_OWN_SECONDS: &str = "tether_turn_own_seconds";
pub const APPROVAL_WAIT: &str = "tether_approval_wait_seconds";
pub const RESUMES: &str = "tether_resumes_total";
pub const TAKEOVERS: &str = "tether_takeovers_total";
pub const FORWARDED: &str = "tether_forwarded_commands_total";
pub const FORWARD_SECONDS: &str = "tether_forward_seconds";
pub const QUEUE_DEPTH: &str = "tether_queue_depth";
pub const APPROVALS_PENDING: &str = "tether_approvals_pending";
pub const QUESTIONS_PENDING: &str = "tether_questions_pending";
pub const SESSIONS: &str = "tether_sessions";
pub const LIVE_HERE: &str = "tether_live_sessions";
pub const AGENT_PROCESSES: &str = "tether_agent_processes";
pub const AGENT_RSS: &str = "tether_agent_rss_bytes";
pub const EVICTIONS: &str = "tether_pool_evictions_total";
pub const OUTBOX_BACKLOG: &str = "tether_outbox_backlog";
pub const OUTBOX_AGE: &str = "tether_outbox_oldest_age_seconds";
pub const DB_CONNECTIONS: &str = "tether_db_connections";
pub const FENCED: &str = "tether_fenced_writes_total";
pub const NODES: &str = "tether_cluster_nodes";
pub const OWNED: &str = "tether_owned_conversations";
pub const LEADER: &str = "tether_channel_leader";
pub const READY: &str = "tether_ready";
pub const DRAINING: &str = "tether_draining";
pub const WORKTREES_REMOVED: &str = "tether_worktrees_removed_total";
pub const WORKTREES_DISK: &str = "tether_worktrees_disk_bytes";

/// A turn ended: its agent, status (and error code when it failed), how long it took
/// and tether's own part of that (all but the agent's start and prompt time).
pub(crate) fn turn_ended(
    agent: &str,
    status: TurnStatus,
    code: Option<ErrorCode>,
    total: Duration,
    agent_time: Duration,
) {
    let code = code.map_or("", ErrorCode::as_str);
    metrics::counter!(TURNS, "agent" => agent.to_owned(), "outcome" => status.as_str(), "code" => code)
        .increment(1);
    metrics::histogram!(TURN_SECONDS, "agent" => agent.to_owned()).record(total.as_secs_f64());
    metrics::histogram!(TURN_OWN_SECONDS, "agent" => agent.to_owned())
        .record(total.saturating_sub(agent_time).as_secs_f64());
}

/// A strict resume of an agent session ended (`ok`: the agent came back in it).
pub(crate) fn resumed(agent: &str, ok: bool) {
    let outcome = if ok { "ok" } else { "failed" };
    metrics::counter!(RESUMES, "agent" => agent.to_owned(), "outcome" => outcome).increment(1);
}

/// An approval or question was decided (or expired) after `waited_ms`.
pub(crate) fn decided(kind: &'static str, waited_ms: i64) {
    metrics::histogram!(APPROVAL_WAIT, "kind" => kind).record(waited_ms.max(0) as f64 / 1000.0);
}

/// This node took over a conversation whose owner was gone.
pub(crate) fn took_over() {
    metrics::counter!(TAKEOVERS).increment(1);
}

/// A command was forwarded to another node and ended (`replied`, `rerouted`, `error`).
pub(crate) fn forwarded(outcome: &'static str, took: Duration) {
    metrics::counter!(FORWARDED, "outcome" => outcome).increment(1);
    metrics::histogram!(FORWARD_SECONDS).record(took.as_secs_f64());
}

/// A worktree's directory was removed (after its snapshot): `archived`, `stale`, `budget`.
pub(crate) fn worktree_removed(reason: &'static str) {
    metrics::counter!(WORKTREES_REMOVED, "reason" => reason).increment(1);
}

/// The disk tether's worktrees take, as the last clean-up measured it.
pub(crate) fn worktrees_disk(bytes: u64) {
    metrics::gauge!(WORKTREES_DISK).set(bytes as f64);
}
