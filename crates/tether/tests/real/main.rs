//! The real agent CLIs (codex, claude, an ACP agent) against the mock model server: the slow tier.
//! One binary per theme (issue 27 item 5): each module was a test binary of its own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/reliability_util.rs"]
mod reliability_util;

mod delegation_real;
mod real_acp;
mod real_attachments;
mod real_claude;
mod real_claude_spare;
mod real_cluster;
mod real_codex;
mod real_daemon_kill;
mod real_limits;
mod real_pool;
mod real_shared;
mod real_usage;
