//! The cluster end to end: several `tether serve` nodes on one PostgreSQL database.
//! One binary per theme (issue 27 item 5): each module was a test binary of its own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/delegation_util.rs"]
mod delegation_util;

mod common;

mod cluster_budget;
mod cluster_nodes;
mod cluster_owner;
mod cluster_partition;
mod cluster_presence;
mod cluster_route;
mod cluster_route_tasks;
mod cluster_schedules;
mod cluster_single;
mod cluster_tail;
mod cluster_traces;
mod cluster_upgrade;
mod cluster_worktrees;
mod store_postgres;
