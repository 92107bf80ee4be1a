//! The cluster view (`GET /api/v1/cluster`): the nodes serving one store and their
//! leases.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One node: a `tether serve` process registered in the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NodeView {
    #[schema(value_type = String)]
    pub id: crate::NodeId,
    /// The host it runs on.
    pub name: String,
    /// The address its HTTP API listens on.
    pub addr: String,
    pub started_at_ms: i64,
    /// Its last heartbeat.
    pub heartbeat_at_ms: i64,
    /// Until when its lease holds.
    pub lease_until_ms: i64,
    /// Whether the lease still holds (the node is up).
    pub alive: bool,
    /// Whether it drains (issue 31): it takes no new conversations.
    #[serde(default)]
    pub draining: bool,
    /// The tether version it runs (empty: older than rolling upgrades).
    #[serde(default)]
    pub version: String,
    /// Whether this is the node that answered.
    #[serde(default)]
    pub this_node: bool,
    /// Conversations it owns now (their live sessions run there; issue 12). Always 0 on
    /// SQLite, whose one node owns everything without claiming.
    #[serde(default)]
    pub live_conversations: i64,
}

/// The nodes of the store, oldest first (gone ones too, with `alive: false`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ClusterView {
    /// The node that answered.
    #[schema(value_type = String)]
    pub node_id: crate::NodeId,
    /// `sqlite` or `postgres`.
    pub store: String,
    /// How long a lease lasts without a heartbeat.
    pub lease_ttl_ms: u64,
    pub nodes: Vec<NodeView>,
    /// Work that runs once per cluster and the node doing it (issue 12).
    #[serde(default)]
    pub leaders: Vec<LeaderView>,
}

/// A leader lease: the work it names (`channel:telegram`: that channel's poller or long
/// connection, pump, outbox and sweep) runs on `node_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct LeaderView {
    pub name: String,
    /// The leading node (`""` once released).
    #[schema(value_type = String)]
    pub node_id: crate::NodeId,
    /// Rises with every change of leader.
    pub epoch: i64,
    pub claimed_at_ms: i64,
    /// Whether the leader's node lease still holds (if not, the next node to look takes
    /// the work over).
    pub alive: bool,
}
