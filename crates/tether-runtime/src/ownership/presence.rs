//! Nodes seen gone before their lease ends (issue 12): every node holds its presence
//! lock while it runs (`tether_store::Presence`), and the server frees it the moment the
//! node's process dies. The failover sweep looks at every other live node's lock; one
//! found free [`LOOKS`] looks in a row (about a second: a reconnecting node holds it
//! again well within that) counts as gone — that run of it: a node restarted under the
//! same id (a new `started_at`) starts with a clean slate — — its conversations are taken over then, and
//! commands stop going to it — without waiting for its lease. A paused or cut-off node
//! keeps its lock, so for those the lease decides; fencing keeps either verdict safe.

use super::Ownership;

/// Looks in a row that find a node's lock free before it counts as gone.
const LOOKS: u32 = 3;

impl Ownership {
    /// Looks at the presence of every other node whose lease holds; returns those that
    /// count as gone now.
    pub(crate) async fn look_at_nodes(&self) -> tether_store::Result<Vec<tether_proto::NodeId>> {
        let state = &self.0;
        let now = self.0.clock.now_ms();
        let mut seen = Vec::new();
        for node in state.store.cluster().nodes().await? {
            if node.id == state.node_id || !node.alive(now) {
                continue;
            }
            let present = state.store.cluster().node_present(&node.id).await?;
            seen.push((node.id, node.started_at_ms, present));
        }
        let mut absent = lock(&state.absent);
        // Nodes no longer listed (or whose lease ended) are the lease's business.
        absent.retain(|id, _| seen.iter().any(|(n, _, _)| n == id));
        let mut gone = Vec::new();
        for (id, started, present) in seen {
            if present {
                absent.remove(&id);
                continue;
            }
            let entry = absent.entry(id.clone()).or_insert((started, 0));
            if entry.0 != started {
                *entry = (started, 0);
            }
            entry.1 += 1;
            if entry.1 == LOOKS {
                tracing::info!(node = %id, "a node's presence lock is free: it is gone");
            }
            if entry.1 >= LOOKS {
                gone.push(id);
            }
        }
        Ok(gone)
    }

    /// Whether node `id`'s run that started at `started_at_ms` counts as gone by its
    /// presence (its lease may still hold). `None`: the node has no row (the lease says).
    pub fn seen_gone(&self, id: &str, started_at_ms: Option<i64>) -> bool {
        let Some(started) = started_at_ms else {
            return false;
        };
        lock(&self.0.absent)
            .get(id)
            .is_some_and(|(s, looks)| *s == started && *looks >= LOOKS)
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
