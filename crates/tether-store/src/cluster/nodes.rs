//! The nodes serving a store (see `sql_nodes.rs`).

/// One registered node and its lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRow {
    pub id: tether_proto::NodeId,
    /// Where it runs (the host name).
    pub name: String,
    /// The address its HTTP API listens on.
    pub addr: String,
    pub started_at_ms: i64,
    /// Its last heartbeat.
    pub heartbeat_at_ms: i64,
    /// Until when its lease holds: after that the node counts as gone.
    pub lease_until_ms: i64,
    /// Since when it drains (issue 31): it takes no new conversations.
    pub draining_at_ms: Option<i64>,
    /// The tether version it runs (empty: a version from before rolling upgrades).
    pub version: String,
}

impl NodeRow {
    /// Whether its lease still holds at `now_ms`.
    pub fn alive(&self, now_ms: i64) -> bool {
        self.lease_until_ms > now_ms
    }

    /// Whether new conversations may be placed on it at `now_ms`: alive, not draining.
    pub fn takes_work(&self, now_ms: i64) -> bool {
        self.alive(now_ms) && self.draining_at_ms.is_none()
    }
}
