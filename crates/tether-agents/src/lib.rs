//! tether-agents: runs agent CLIs as supervised child processes and speaks their
//! protocols (ACP now; Codex app-server and Claude stream-json next), normalising what
//! they say into [`AgentEvent`]s.
//!
//! Must not depend on the store, the channels or the web server: it knows nothing about
//! conversations, only about one agent session at a time.

pub mod acp;
pub mod claude;
pub mod codex;
mod driver;
pub mod jsonrpc;
mod launch;
mod ndjson;
pub mod process;
mod turn;

pub use acp::AcpDriver;
pub use claude::ClaudeDriver;
pub use codex::CodexDriver;
pub use driver::*;
