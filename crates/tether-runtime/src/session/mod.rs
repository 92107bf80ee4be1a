//! Session actors: one owner per runtime session, its mailbox and
//! handle, the pool of live agents, and the router that applies the binding rules.

pub(crate) mod actor;
pub(crate) mod actors;
pub(crate) mod answers;
pub(crate) mod command;
pub(crate) mod ending;
pub(crate) mod handle;
pub(crate) mod mailbox;
pub(crate) mod pool;
pub(crate) mod router;
pub(crate) mod router_entry;
pub(crate) mod router_hand;
pub(crate) mod router_state;
pub(crate) mod routing;
pub(crate) mod turn_step;
