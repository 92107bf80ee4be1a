//! Which conversations this node owns (issue 12, design points 1–3): a conversation's
//! live session runs on its owner only. Before this node runs anything for a
//! conversation (a turn, making its session live) it claims it in the store
//! ([`Ownership::claim`]); the store remembers the epoch, and every write on the
//! conversation's behalf is fenced by it (`tether_store`'s `fence`). Each session actor
//! holds an [`OwnerGuard`]; when the last guard of a conversation goes (its actors
//! retired dormant), the conversation is released, so the next message is claimed by
//! whichever node receives it. A fenced actor and a daemon shutting down keep the row:
//! the first lost it already, the second leaves open turns for recovery (its own after a
//! restart, or a survivor's once its lease ends).
//!
//! On SQLite the node is alone and owns everything: nothing is claimed, guards are
//! `None` and nothing here touches the store.

pub(crate) mod failover;
pub(crate) mod presence;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tether_proto::ConversationId;
use tether_store::{Claim, Store};

use crate::seams::Clock;

use crate::RuntimeError;

/// This node's claims on conversations.
#[derive(Clone)]
pub(crate) struct Ownership(Arc<State>);

struct State {
    store: Store,
    node_id: tether_proto::NodeId,
    /// Claims, leases and presence verdicts compare with its time.
    clock: Arc<dyn Clock>,
    /// PostgreSQL: a cluster of nodes may share the store. SQLite: this node alone.
    clustered: bool,
    /// Per conversation: the guards alive and the gate that orders claims and releases.
    users: Mutex<HashMap<ConversationId, Users>>,
    /// Other nodes whose presence lock was free, and how many looks in a row (see
    /// `presence`).
    /// By node id: the run's `started_at` and the looks.
    absent: Mutex<HashMap<tether_proto::NodeId, (i64, u32)>>,
}

struct Users {
    count: usize,
    gate: Arc<tokio::sync::Mutex<()>>,
}

impl Ownership {
    pub fn new(store: Store, node_id: tether_proto::NodeId, clock: Arc<dyn Clock>) -> Ownership {
        let clustered = store.topology() == tether_store::Topology::Cluster;
        Ownership(Arc::new(State {
            store,
            node_id,
            clock,
            clustered,
            users: Mutex::new(HashMap::new()),
            absent: Mutex::new(HashMap::new()),
        }))
    }

    /// Whether other nodes may share the store (PostgreSQL).
    pub fn clustered(&self) -> bool {
        self.0.clustered
    }

    /// Whether something on this node holds conversation `id` (a guard lives).
    pub fn in_use(&self, id: &ConversationId) -> bool {
        self.0.lock().get(id).is_some_and(|u| u.count > 0)
    }

    /// Claims conversation `id` for this node before it runs something for it: a guard
    /// while it is this node's (`None` on SQLite, where it always is), or
    /// `owned_elsewhere` when another live node owns it.
    pub async fn claim(&self, id: &ConversationId) -> Result<Option<OwnerGuard>, RuntimeError> {
        if !self.0.clustered {
            return Ok(None);
        }
        // Counted before the gate: a release that runs meanwhile sees this claim coming
        // and leaves the row alone.
        let gate = self.0.count_in(id);
        let mut guard = OwnerGuard {
            state: self.0.clone(),
            conversation_id: id.clone(),
            epoch: 0,
            keep: false,
        };
        let _gate = gate.lock().await;
        match self
            .0
            .store
            .cluster()
            .claim_conversation(id, &self.0.node_id, self.0.clock.now_ms())
            .await?
        {
            Claim::Claimed { epoch } | Claim::Held { epoch } => {
                guard.epoch = epoch;
                Ok(Some(guard))
            }
            Claim::Owned(row) => Err(RuntimeError::OwnedElsewhere {
                conversation_id: id.clone(),
                node_id: row.node_id,
            }),
        }
    }

    /// Holds conversation `id`'s gate while a take-over recovers it and releases it
    /// (`failover`): a claim on this node meanwhile waits, then claims the released row
    /// anew, so nothing runs on a conversation before its recovery and nothing holds an
    /// epoch the release is about to give up. Counted among the conversation's users like
    /// a guard, so neither a release nor a guard going keeps the entry's gate from the
    /// claims that come meanwhile.
    pub(crate) async fn gate(&self, id: &ConversationId) -> Gated {
        let gate = self.0.count_in(id);
        let held = gate.clone().lock_owned().await;
        Gated {
            state: self.0.clone(),
            conversation_id: id.clone(),
            release: false,
            _held: held,
        }
    }
}

/// A conversation's gate, held (see [`Ownership::gate`]). Dropped without
/// [`Gated::done`] (the daemon stops before the recovery succeeded), the row stays this
/// node's, as a guard's `keep`: its recovery is the sweep's after a restart, or a
/// survivor's once this node's lease ends.
pub(crate) struct Gated {
    state: Arc<State>,
    conversation_id: ConversationId,
    /// Given up as by a last guard when dropped (see [`Gated::done`]).
    release: bool,
    _held: tokio::sync::OwnedMutexGuard<()>,
}

impl Gated {
    /// The take-over is over (recovered and released, lost, or claimed by another node
    /// first): when nothing else here holds the conversation, it goes as when its last
    /// guard goes, so a release that waited for this gate is not lost.
    pub(crate) fn done(mut self) {
        self.release = true;
    }
}

impl Drop for Gated {
    fn drop(&mut self) {
        // The gate is still held here (fields drop after this).
        self.state.user_gone(&self.conversation_id, self.release);
    }
}

impl State {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ConversationId, Users>> {
        // A panic while holding this lock leaves a consistent map.
        self.users.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts one more user of `id` (before it waits for the gate, so a release that runs
    /// meanwhile sees it coming and leaves the row alone); the gate to wait for.
    fn count_in(&self, id: &ConversationId) -> Arc<tokio::sync::Mutex<()>> {
        let mut users = self.lock();
        let u = users.entry(id.clone()).or_insert_with(|| Users {
            count: 0,
            gate: Arc::default(),
        });
        u.count += 1;
        u.gate.clone()
    }

    /// One user of `id` went (a guard, or a take-over's gate): when it was the last, the
    /// conversation is given up (`give_up`, see [`State::release`]), or else only its
    /// entry is forgotten (kept: fenced, the daemon stopping, a recovery not done; a
    /// later claim makes a new one).
    fn user_gone(self: &Arc<Self>, id: &ConversationId, give_up: bool) {
        let last = {
            let mut users = self.lock();
            match users.get_mut(id) {
                Some(u) => {
                    u.count = u.count.saturating_sub(1);
                    u.count == 0
                }
                None => false,
            }
        };
        if !last {
            return;
        }
        if give_up {
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(self.clone().release(id.clone()));
            }
            return;
        }
        let mut users = self.lock();
        if users.get(id).is_some_and(|u| u.count == 0) {
            users.remove(id);
        }
    }

    /// The last guard of `id` went: give the conversation up, unless a claim came
    /// meanwhile or this node's epoch is stale (fenced: nothing of ours to release).
    async fn release(self: Arc<Self>, id: ConversationId) {
        let Some(gate) = self.lock().get(&id).map(|u| u.gate.clone()) else {
            return;
        };
        let _gate = gate.lock().await;
        if self.lock().get(&id).is_none_or(|u| u.count != 0) {
            return;
        }
        // The entry (and its gate) stays until the row is released: a claim that comes
        // meanwhile counts itself on it and waits for this gate, then claims the released
        // row anew. Removed first, a claim would make a new gate and race the release
        // (seeing the row still ours, then released: "owned by node ''").
        if !self.store.cluster().is_fenced(&id)
            && let Some(epoch) = self.store.cluster().held_epoch(&id)
            && let Err(e) = self
                .store
                .cluster()
                .release_conversation(&id, &self.node_id, epoch)
                .await
        {
            tracing::warn!(conversation = %id, error = %e,
                "cannot release the conversation; it is taken over once this node's lease ends");
        }
        let mut users = self.lock();
        if users
            .get(&id)
            .is_some_and(|u| u.count == 0 && Arc::ptr_eq(&u.gate, &gate))
        {
            users.remove(&id);
        }
    }
}

/// This node runs something for a conversation (held by its session actor, or by the
/// router while it routes a message): while any guard of a conversation lives, it stays
/// this node's.
pub(crate) struct OwnerGuard {
    state: Arc<State>,
    conversation_id: ConversationId,
    /// The epoch the claim returned.
    epoch: i64,
    /// Do not release when dropped (fenced, or the daemon stops).
    keep: bool,
}

impl OwnerGuard {
    /// Whether this node lost the conversation since the claim: a write under its epoch
    /// was refused, or a newer claim replaced the epoch (this guard's holder is stale).
    pub fn lost(&self) -> bool {
        let store = &self.state.store;
        store.cluster().is_fenced(&self.conversation_id)
            || store.cluster().held_epoch(&self.conversation_id) != Some(self.epoch)
    }

    /// Drops the guard without giving the conversation up.
    pub fn keep(mut self) {
        self.keep = true;
    }
}

impl Drop for OwnerGuard {
    fn drop(&mut self) {
        self.state.user_gone(&self.conversation_id, !self.keep);
    }
}
