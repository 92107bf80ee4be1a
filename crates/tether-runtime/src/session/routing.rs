//! Routing locks: one per conversation, so binding decisions never interleave. An entry
//! lives only while someone holds or waits for it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tether_proto::ConversationId;

/// What a routing lock serialises.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum RoutingScope {
    /// A conversation's binding decisions (and a task's continue/close: a task is its
    /// child conversation).
    Conversation(ConversationId),
    /// A parent conversation's delegations: its running-children cap is checked and
    /// the new turn stored under it.
    Delegations(ConversationId),
}

type LockMap = HashMap<RoutingScope, Arc<tokio::sync::Mutex<()>>>;

/// A held routing lock. Dropping it frees the map entry when nobody else holds or waits
/// for it, so the map is bounded by the requests in flight, not by every id ever seen.
pub(crate) struct RoutingLock {
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
    id: RoutingScope,
    locks: Arc<Mutex<LockMap>>,
}

impl Drop for RoutingLock {
    fn drop(&mut self) {
        // Under the map's mutex nobody can take a new clone of the entry, and every
        // waiter holds one: the map's own reference is the last exactly when nobody does.
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        self.guard = None;
        if locks
            .get(&self.id)
            .is_some_and(|l| Arc::strong_count(l) == 1)
        {
            locks.remove(&self.id);
        }
    }
}

/// The routing locks by scope.
#[derive(Default)]
pub(crate) struct RoutingLocks {
    locks: Arc<Mutex<LockMap>>,
}

impl RoutingLocks {
    fn map(&self) -> std::sync::MutexGuard<'_, LockMap> {
        self.locks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for the lock of `id` and holds it until the returned guard drops.
    pub async fn lock(&self, id: RoutingScope) -> RoutingLock {
        let lock = self.map().entry(id.clone()).or_default().clone();
        RoutingLock {
            guard: Some(lock.lock_owned().await),
            id,
            locks: self.locks.clone(),
        }
    }

    /// Locks currently held or waited for.
    pub fn len(&self) -> usize {
        self.map().len()
    }
}
