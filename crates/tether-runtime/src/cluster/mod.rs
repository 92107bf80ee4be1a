//! The cluster (issue 12, design point 4): where a command runs, and how it gets there.
//! A conversation's commands run on its owner node only (its routing lock and its actors
//! are there); a node that is not the owner forwards the command through the database
//! (`commands` rows, a `NOTIFY` as the wake-up, polling as the fallback) and answers with
//! the owner's reply. An unowned conversation is claimed by the node that got the
//! command, unless that node is at `[cluster] max_live_per_node`; then the least-loaded
//! live node gets it. On SQLite the runtime is the whole cluster: nothing here runs.
//!
//! - `place`: the decision (here, or which node).
//! - `forward`: sending a command and waiting for its reply; the worker that takes this
//!   node's commands; the listener that turns notices into wake-ups.
//! - `routed`: where every call goes (here or the owner), and running a forwarded one.
//! - `wire`: the command and reply as stored.
//! - `membership`: this node in the node registry (its lease, heartbeat and presence).
//! - `service`: the placement service and the cluster view.

mod forward;
pub(crate) mod membership;
mod place;
mod routed;
pub(crate) mod service;
mod wire;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::config::ClusterConfig;

pub(crate) use routed::forwarded;

/// How often a node looks for commands and replies without a notice (the fallback that
/// alone still works).
const POLL: Duration = Duration::from_millis(500);

/// This node's part of the cluster.
pub(crate) struct Cluster {
    /// Whether there can be other nodes (the store is PostgreSQL).
    enabled: bool,
    config: ClusterConfig,
    /// Wakes the worker: a command waits for this node.
    work: Notify,
    /// Wakes the senders waiting for these commands' replies.
    waiters: Mutex<HashMap<String, Arc<Notify>>>,
}

impl Cluster {
    pub fn new(config: ClusterConfig, store: &tether_store::Store) -> Cluster {
        Cluster {
            enabled: store.topology() == tether_store::Topology::Cluster,
            config,
            work: Notify::new(),
            waiters: Mutex::new(HashMap::new()),
        }
    }

    /// Whether commands may have to go to another node.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    pub fn node_id(&self) -> &tether_proto::NodeId {
        &self.config.node_id
    }

    fn waiters(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Notify>>> {
        self.waiters.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wakes whoever waits for the reply of command `id` (nobody: nothing to do).
    fn replied(&self, id: &str) {
        if let Some(n) = self.waiters().get(id) {
            n.notify_one();
        }
    }

    /// Wakes every sender and the worker: notices may have been missed.
    fn wake_all(&self) {
        self.work.notify_one();
        for n in self.waiters().values() {
            n.notify_one();
        }
    }
}

/// A sender's registration for its command's wake-ups; dropped, it is gone.
struct Waiter<'a> {
    cluster: &'a Cluster,
    id: String,
    notify: Arc<Notify>,
}

impl<'a> Waiter<'a> {
    fn new(cluster: &'a Cluster, id: &str) -> Waiter<'a> {
        let notify = Arc::new(Notify::new());
        cluster.waiters().insert(id.to_owned(), notify.clone());
        Waiter {
            cluster,
            id: id.to_owned(),
            notify,
        }
    }
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        self.cluster.waiters().remove(&self.id);
    }
}
