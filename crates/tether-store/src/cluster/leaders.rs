//! Leader leases (issue 12; see `sql_leaders.rs`): work that must run once per cluster
//! (a channel's poller, pump and outbox, the sweeps) runs on the node that holds the
//! lease of its name. A leader holds it while its own node lease holds; once that ends,
//! another node claims it under a higher epoch.

/// Who leads a name, as the store records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderRow {
    pub name: String,
    /// `''` once released.
    pub node_id: tether_proto::NodeId,
    /// Rises on every claim.
    pub epoch: i64,
    pub claimed_at_ms: i64,
    /// The leading node's lease (`None`: it has no row, it is gone).
    pub lease_until_ms: Option<i64>,
}

impl LeaderRow {
    /// Whether the leader's node lease still holds at `now_ms`.
    pub fn alive(&self, now_ms: i64) -> bool {
        !self.node_id.is_empty() && self.lease_until_ms.is_some_and(|until| until > now_ms)
    }
}

/// What a leader claim found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaderClaim {
    /// This node leads now, under a new `epoch` (nobody led, or the leader was gone).
    Claimed { epoch: i64 },
    /// This node led already, under `epoch`.
    Held { epoch: i64 },
    /// Another node whose lease holds leads.
    Led(LeaderRow),
}

impl LeaderClaim {
    /// The epoch this node leads under, if it leads.
    pub fn epoch(&self) -> Option<i64> {
        match self {
            LeaderClaim::Claimed { epoch } | LeaderClaim::Held { epoch } => Some(*epoch),
            LeaderClaim::Led(_) => None,
        }
    }
}
