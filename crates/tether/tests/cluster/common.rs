//! What the cluster tests share: a node's options, reading the cluster view, a database.

use std::time::Duration;

use serde_json::Value;
use tether_testkit::DaemonOptions;
use tether_testkit::postgres::TestDatabase;

/// A cluster node's options with leases of `lease_secs` (2 s where failover is tested,
/// long where only presence may end a node).
pub fn node_options(lease_secs: u64) -> DaemonOptions {
    DaemonOptions {
        extra_config: format!("\n[cluster]\nlease_ttl_secs = {lease_secs}\n"),
        ..DaemonOptions::default()
    }
}

/// `v[key]` as a string (panics, naming the key, when it is none).
pub fn str_of(v: &Value, key: &str) -> String {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("no {key} in {v}"))
        .to_string()
}

/// The live conversations of node `id` in a `GET /api/v1/cluster` view; `None` when the
/// view has no such node (a node seen gone leaves it).
pub fn live_of(view: &Value, id: &str) -> Option<i64> {
    view["nodes"]
        .as_array()
        .unwrap_or_else(|| panic!("no nodes in {view}"))
        .iter()
        .find(|n| n["id"] == id)
        .map(|n| n["live_conversations"].as_i64().unwrap_or(0))
}

/// A database of its own on the test server.
pub async fn database() -> TestDatabase {
    tokio::time::timeout(Duration::from_secs(120), TestDatabase::create())
        .await
        .expect("timed out creating a test database")
        .expect("create a test database")
}
