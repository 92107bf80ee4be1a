//! tether-agents: runs agent CLIs as supervised child processes and speaks their
//! protocols (ACP, Codex app-server, Claude stream-json), normalising what they say into
//! [`AgentEvent`]s. Agents get an explicit environment ([`env`]), die with tether
//! (parent-death signal, recorded process groups: [`groups`]).
//!
//! Must not depend on the store, the channels or the web server: it knows nothing about
//! conversations, only about agent sessions (several may share one process: [`host`]).

pub mod acp;
mod ceiling;
pub mod claude;
pub mod codex;
mod driver;
pub mod env;
pub mod groups;
pub mod host;
pub mod jsonrpc;
mod launch;
mod ndjson;
pub mod process;
mod spawner;
mod turn;
pub mod usage;
pub mod windows;

pub use acp::AcpDriver;
pub use ceiling::{ProcessCeiling, ProcessSlot};
pub use claude::ClaudeDriver;
pub use codex::CodexDriver;
pub use driver::*;
pub use groups::GroupRecords;
pub use host::{HostLimits, Hosts, Parked, ProcessView};
