//! tether-runtime: session actors (one owner per runtime session, one turn at a time,
//! queue, approvals and questions), the router that applies the binding rules, start-up
//! recovery, and the way to follow events live ([`Runtime::follow`]).
//!
//! Must not depend on a web framework or a channel: adapters call [`Runtime`].

mod access;
mod accounts;
mod answering;
mod api;
mod attachments;
mod audit;
mod boot;
mod call;
mod cluster;
mod commands;
mod config;
mod conversations;
mod ctx;
mod cwd;
mod delegation;
mod dispatch;
mod drain;
mod drain_mark;
mod error;
mod feed;
mod gauges;
mod ids;
mod listing;
pub mod metrics;
mod ownership;
mod parking;
mod people;
mod schedules;
mod seams;
mod session;
mod sign_in;
mod spare;
mod timer_retry;
mod timers;
pub mod trace;
mod usage;
mod usage_view;
mod views;
mod worktree;

pub use accounts::{AccountStatus, LINK_CODE_TTL_MS};
pub use answering::RequestPage;
pub use attachments::file_out::{FileOutError, home_secrets};
pub use attachments::prompt::{ATTACHMENTS_DIR, copies_dir};
pub use attachments::rules::{AttachmentError, AttachmentLimits, sanitize_name};
pub use attachments::{AttachmentName, NewAttachment};
pub use audit::MAX_AUDIT_PAGE;
pub use boot::Runtime;
pub use call::{Call, Command, Identity, Principal, Reply, TraceContext};
pub use cluster::membership::Membership;
pub use config::{
    ClusterConfig, CoalesceConfig, LimitsConfig, RuntimeConfig, SchedulesConfig, UsageConfig,
    WorktreesConfig,
};
pub use delegation::registry::{
    Caller, DelegationConfig, MAX_WAITS_PER_CALLER, MCP_SERVER_NAME, MCP_SOCKET_ENV, MCP_TOKEN_ENV,
    McpLaunch,
};
pub use delegation::status::{MAX_WAIT_MS, outcome_of};
pub use drain::{DrainProgress, Ops};
pub use error::RuntimeError;
pub use listing::{ConversationPage, TurnPage};
pub use people::People;
pub use schedules::Schedules;
pub use seams::{Clock, Drivers, Seams, SystemClock, Wait};
pub use session::pool::{PoolConfig, PoolStatus};
pub use sign_in::{SignedIn, VerifiedUser};
pub use tether_store::Bucket as UsageBucket;
pub use tether_store::{Batch, Follower, SESSION_PREFIX, Scope, TOKEN_PREFIX};
pub use usage_view::{Usage, UsageAsk};
pub use worktree::{WorktreeError, Worktrees};
