//! Reliability end to end: agent starts, dying agents, hostile input, database outages, load and crash loops (the last three run alone, see `.config/nextest.toml`).
//! One binary per theme (issue 27 item 5): each module was a test binary of its own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/reliability_util.rs"]
mod reliability_util;

mod agent_start;
mod reliability_agents;
mod reliability_channels;
mod reliability_cluster_crash_loop;
mod reliability_crash_loop;
mod reliability_database;
mod reliability_hostile;
mod reliability_load;
mod reliability_slack;
