//! The store's API by concept: one handle per concept folder (`Conversations`,
//! `Events`, `Requests`, `Recovery`, `Delegation`, `Channels`, `Cluster`,
//! `Attachments`, `People`, `Usage`, `Timers`, `Schedules`), reached by its accessor (`store.events().append_events(..)`). A handle
//! is a borrowed, `Copy` view of the [`Store`](crate::Store); its methods are the
//! forwarders `build.rs` writes from the concept's SQL files (see `backend`) and the few
//! written by hand beside their concept (`cluster/tail.rs`, `events/feed.rs`, …). What
//! is no concept's (opening, health, the clock, counters, the tail's start) stays on
//! `Store`.

include!(concat!(env!("OUT_DIR"), "/store_handles.rs"));
