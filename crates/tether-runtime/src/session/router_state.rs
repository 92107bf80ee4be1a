//! The router's state, owned by the runtime and used only through the [`Router`]
//! service (`router_entry.rs`): the session actors by session id and the routing locks
//! (one per conversation, so binding decisions never interleave).
//!
//! [`Router`]: crate::session::router_entry::Router

use std::sync::Arc;

use crate::session::actor::Actor;
use crate::session::actors::Actors;
use crate::session::routing::RoutingLocks;

/// The router's state: the session actors and the routing locks.
pub(crate) struct RouterState {
    /// Session actors by session id (only sessions with a process or work have one).
    pub(super) actors: Arc<Actors>,
    /// One routing lock per conversation: binding decisions never interleave.
    pub(super) locks: RoutingLocks,
}

impl RouterState {
    pub(crate) fn new() -> RouterState {
        RouterState {
            actors: Arc::new(Actors::new(Actor::spawn)),
            locks: RoutingLocks::default(),
        }
    }
}
