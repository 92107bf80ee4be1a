//! Delegation end to end: agents calling tether's MCP tools through the fake agent.
//! One binary per theme (issue 27 item 5): each module was a test binary of its own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/delegation_util.rs"]
mod delegation_util;

mod delegation_args;
mod delegation_claude;
mod delegation_contract;
mod delegation_flow;
mod delegation_hardening;
mod delegation_restart;
mod delegation_tokens;
