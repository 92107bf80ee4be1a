//! A cluster of nodes on one PostgreSQL database (issue 12): the node registry
//! (`nodes`), conversation owners and their fencing epochs (`owners`, `sql_fence.rs`),
//! leader leases (`leaders`), commands forwarded to an owner (`commands`, with their
//! wake-ups in `pg_listen`), presence locks (`pg_presence`) and the tail of other nodes'
//! commits (`tail`, `pg_tail.rs`). On SQLite (one node) most of it is trivially true.
//!
//! Its calls are on the [`Cluster`](crate::Cluster) handle (`store.cluster()`): the
//! forwarders of its SQL files, the claims in `tail`, and the ones below.

pub(crate) mod commands;
pub(crate) mod leaders;
pub(crate) mod nodes;
pub(crate) mod owners;
pub(crate) mod pg_listen;
pub(crate) mod pg_presence;
pub(crate) mod tail;

use tether_proto::ConversationId;

use crate::backend::Backend;
use crate::{Presence, Result, Wakeups};

impl crate::Cluster<'_> {
    /// The epoch this node holds for conversation `id` (what its last claim, take-over
    /// or release through this store left; the database is the truth).
    pub fn held_epoch(self, id: &ConversationId) -> Option<i64> {
        self.store.shared().held.get(id)
    }

    /// A `LISTEN` connection for forwarded commands' wake-ups (issue 12): `None` on
    /// SQLite, which has no notices and no other node.
    pub async fn command_wakeups(self) -> Result<Option<Wakeups>> {
        match &self.store.backend {
            Backend::Sqlite(_) => Ok(None),
            Backend::Postgres(db) => db.wakeups().await.map(Some),
        }
    }

    /// Holds node `id`'s presence lock on a connection of its own while the returned
    /// value lives (see `pg_presence`): `None` on SQLite, which has one node.
    pub async fn hold_presence(self, id: &str) -> Result<Option<Presence>> {
        match &self.store.backend {
            Backend::Sqlite(_) => Ok(None),
            Backend::Postgres(db) => db.presence(id).await.map(Some),
        }
    }

    /// Whether node `id` is present: its presence lock is held (on SQLite: always). A
    /// node whose process died is not, at once; a paused one still is.
    pub async fn node_present(self, id: &str) -> Result<bool> {
        match &self.store.backend {
            Backend::Sqlite(_) => Ok(true),
            Backend::Postgres(db) => db.node_present(id).await,
        }
    }

    /// Whether a write on behalf of conversation `id` was refused because the epoch this
    /// node holds for it is stale (another node took it over).
    pub fn is_fenced(self, id: &ConversationId) -> bool {
        self.store.shared().held.is_stale(id)
    }

    /// The conversations this node holds (its belief; the owners rows are the truth),
    /// with their epochs, except those known lost.
    pub fn held_conversations(self) -> Vec<(ConversationId, i64)> {
        self.store.shared().held.list()
    }

    /// Another node took conversation `id` over from this node's claim under `epoch`
    /// (found by reading the owners rows): its writes are refused from now on.
    pub fn mark_lost(self, id: &ConversationId, epoch: i64) {
        self.store.shared().held.lost(id, epoch);
    }
}
