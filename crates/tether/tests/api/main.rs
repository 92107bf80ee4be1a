//! The HTTP API end to end: real `tether serve` daemons with the fake agent (run a second time with every store on PostgreSQL by `scripts/test`).
//! One binary per theme (issue 27 item 5): each module was a test binary of its own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/delegation_util.rs"]
mod delegation_util;
#[path = "../support/reliability_util.rs"]
mod reliability_util;

mod api_approvals;
mod api_attachments;
mod api_backup;
mod api_binding;
mod api_binding_rules;
mod api_claude_spare;
mod api_dormant;
mod api_drain;
mod api_feed;
mod api_hardening;
mod api_http;
mod api_json_logs;
mod api_limits;
mod api_list;
mod api_metrics;
mod api_pool;
mod api_process_cap;
mod api_recovery;
mod api_schedules;
mod api_shared_process;
mod api_streaming;
mod api_teams;
mod api_teams_matrix;
mod api_upgrade;
mod api_usage;
mod api_windows;
mod api_worktrees;
mod api_worktrees_sweep;
