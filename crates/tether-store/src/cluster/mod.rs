//! A cluster of nodes on one PostgreSQL database (issue 12): the node registry
//! (`nodes`), conversation owners and their fencing epochs (`owners`, `sql_fence.rs`),
//! leader leases (`leaders`), commands forwarded to an owner (`commands`, with their
//! wake-ups in `pg_listen`), presence locks (`pg_presence`) and the tail of other nodes'
//! commits (`tail`, `pg_tail.rs`). On SQLite (one node) most of it is trivially true.

pub(crate) mod commands;
pub(crate) mod leaders;
pub(crate) mod nodes;
pub(crate) mod owners;
pub(crate) mod pg_listen;
pub(crate) mod pg_presence;
pub(crate) mod tail;
