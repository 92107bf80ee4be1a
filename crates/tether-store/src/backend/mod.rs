//! One [`Store`](crate::Store) over two backends. The SQL is written once, in the
//! concept folders' `sql.rs` and `sql_*.rs` files, and compiled once per backend: the
//! list below ([`backend_modules`]) is included by `sqlite.rs` and `pg.rs`, each giving
//! the files its own sqlx types (`Sql`, `SqlRow`, …) and its `dialect`.
//!
//! Each public method is declared once, as a method of the backend's `Db` in one of
//! those files; the build script (`build.rs`) reads the same list and writes the
//! method that runs it on the backend the store was opened on (counted by
//! `Store::calls`; on PostgreSQL within the query time-out, see [`UNBOUNDED`]), on the
//! handle of the file's concept folder (`store.events()`, see `handles`). The
//! compiler checks the result against both backends: a method missing on one, or of
//! another type, does not build. A `match` per call is all the SQLite path pays for it.

// The SQL files compiled per backend: the one list (read by `build.rs` too). The paths
// are relative to this folder; the module names are what the files call each other by
// (`super::events::append`). Both backends include it, on purpose (the SQL is written
// once, compiled once per backend), which is why `pg` and `sqlite` allow `duplicate_mod`.
macro_rules! backend_modules {
    () => {
        #[path = "../events/sql_append.rs"]
        mod append;
        #[path = "../events/sql_append_at_once.rs"]
        mod append_at_once;
        #[path = "../attachments/sql.rs"]
        mod attachments;
        #[path = "../usage/sql_budgets.rs"]
        mod budgets;
        #[path = "../channels/sql.rs"]
        mod channels;
        #[path = "../channels/sql_inbound.rs"]
        mod channels_inbound;
        #[path = "../channels/sql_pairing.rs"]
        mod channels_pairing;
        #[path = "../cluster/sql_commands.rs"]
        mod commands;
        #[path = "sql_conns.rs"]
        mod conns;
        #[path = "../conversations/sql.rs"]
        mod conversations;
        #[path = "../delegation/sql.rs"]
        mod delegation;
        #[path = "../delegation/sql_ledger.rs"]
        mod delegation_ledger;
        #[path = "../events/sql.rs"]
        mod events;
        #[path = "../events/sql_feed.rs"]
        mod feed;
        #[path = "../cluster/sql_fence.rs"]
        mod fence;
        #[path = "../cluster/sql_leaders.rs"]
        mod leaders;
        #[path = "../cluster/sql_nodes.rs"]
        mod nodes;
        #[path = "sql_ops.rs"]
        mod ops;
        #[path = "../channels/sql_outbox_claims.rs"]
        mod outbox_claims;
        #[path = "../cluster/sql_owners.rs"]
        mod owners;
        #[path = "../conversations/sql_pages.rs"]
        mod pages;
        #[path = "../people/sql.rs"]
        mod people;
        #[path = "../people/sql_accounts.rs"]
        mod people_accounts;
        #[path = "../people/sql_audit.rs"]
        mod people_audit;
        #[path = "../people/sql_sessions.rs"]
        mod people_sessions;
        #[path = "../recovery/sql.rs"]
        mod recovery;
        #[path = "../requests/sql.rs"]
        mod requests;
        #[path = "sql_rows.rs"]
        mod rows;
        #[path = "../schedules/sql.rs"]
        mod schedules;
        #[path = "sql_schema.rs"]
        mod sql_schema;
        #[path = "../timers/sql.rs"]
        mod timers;
        #[path = "../conversations/sql_turns.rs"]
        mod turns;
        #[path = "../conversations/sql_turns_at_once.rs"]
        mod turns_at_once;
        #[path = "../conversations/sql_turns_fenced.rs"]
        mod turns_fenced;
        #[path = "sql_tx.rs"]
        mod tx;
        #[path = "../usage/sql.rs"]
        mod usage;
        #[path = "../conversations/sql_view_parts.rs"]
        mod view_parts;
        #[path = "../usage/sql_windows.rs"]
        mod windows;
        #[path = "../worktrees/sql.rs"]
        mod worktrees;
    };
}

pub(crate) mod health;
#[allow(clippy::duplicate_mod)]
pub(crate) mod pg;
pub(crate) mod schema;
#[allow(clippy::duplicate_mod)]
pub(crate) mod sqlite;

/// The backend a store was opened on.
#[derive(Clone)]
pub(crate) enum Backend {
    Sqlite(sqlite::Db),
    Postgres(pg::Db),
}

impl crate::Store {
    pub(crate) fn backend(&self) -> &Backend {
        &self.backend
    }
}

/// Calls that PostgreSQL's query time-out does not bound as a whole: a group commit
/// bounds its own steps (its outcome may be unknown and is read back); recovery may take
/// long on a large store. `build.rs` reads this list and refuses a name no `Db` method
/// has.
pub(crate) const UNBOUNDED: &[&str] = &["append_events", "recover", "recover_conversation"];

// The forwarders written by `build.rs`: one per `pub` / `pub(crate)` async method of
// `Db` in the files above, on its concept's handle (a file of this folder: on `Store`),
// with its documentation and visibility (except the ones `build.rs` lists in `BY_HAND`,
// whose store side is written by hand).
include!(concat!(env!("OUT_DIR"), "/store_forwarders.rs"));
