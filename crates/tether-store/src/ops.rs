//! The store's operator series (issue 31): the counts the gauges read at a scrape (see
//! `backend/sql_ops.rs`) and the group commit's latency and size.

/// A commit of streamed events (a group commit, or a turn's last output with its end):
/// seconds from its start to its answer.
pub const COMMIT_SECONDS: &str = "tether_store_commit_seconds";
/// A commit of streamed events: how many it stored.
pub const GROUP_EVENTS: &str = "tether_store_group_events";

/// What is in the store now, across the cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpsCounts {
    pub queued_turns: i64,
    pub pending_approvals: i64,
    pub pending_questions: i64,
    pub live_sessions: i64,
    pub dormant_sessions: i64,
    /// Per channel with undelivered rows.
    pub outbox: Vec<OutboxBacklog>,
}

/// A channel's undelivered outbox rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxBacklog {
    pub channel: String,
    pub pending: i64,
    pub oldest_created_at_ms: Option<i64>,
}

/// This node's database connections.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolUse {
    pub size: usize,
    pub in_use: usize,
}
