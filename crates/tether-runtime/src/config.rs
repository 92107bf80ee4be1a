//! Runtime settings, filled by the binary from its config file.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use tether_agents::AgentSpec;

#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Configured agents by name.
    pub agents: BTreeMap<String, AgentSpec>,
    /// Agent used by conversations that do not choose one.
    pub default_agent: String,
    /// Working directories must lie under one of these.
    pub workspace_roots: Vec<PathBuf>,
    /// Working directory of conversations that do not choose one.
    pub default_cwd: PathBuf,
    /// tether's data directory: never an agent's working directory; agents' process
    /// groups are recorded in `run/agents` inside it.
    pub data_dir: PathBuf,
    /// Files and directories file-out (`/file`, a turn's file content) never reads,
    /// besides the data directory and the attachment store: the config file, the agents'
    /// credentials, key stores ([`crate::home_secrets`]).
    pub private_paths: Vec<PathBuf>,
    /// How long an approval or question waits for a person.
    pub approval_timeout: Duration,
    /// Messages that may wait behind a running turn, per conversation.
    pub queue_cap: usize,
    /// How long an agent may take to start and initialise.
    pub start_timeout: Duration,
    /// A turn running longer than this fails with `turn_timeout` (`None`: no limit).
    pub turn_timeout: Option<Duration>,
    /// How long a running turn's streamed events may wait for an unreachable store
    /// before the turn is stopped and ends `interrupted` (issue 25).
    pub store_outage_limit: Duration,
    /// Live pool limits.
    pub pool: crate::PoolConfig,
    /// Delegation limits and the MCP server given to agents.
    pub delegation: crate::DelegationConfig,
    /// How streamed agent events are coalesced into store transactions.
    pub coalesce: CoalesceConfig,
    /// Size limits of attachments.
    pub attachments: crate::AttachmentLimits,
    /// This node and the cluster it belongs to (issue 12).
    pub cluster: ClusterConfig,
    /// Prices and accounts of the usage ledger (issue 29).
    pub usage: UsageConfig,
    /// Scheduled turns (issue 30).
    pub schedules: SchedulesConfig,
    /// `[worktrees]`: isolated worktrees (issue 32).
    pub worktrees: WorktreesConfig,
}

/// Isolated worktrees (`[worktrees]`, issue 32).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorktreesConfig {
    /// Conversations whose directory lies under one of these start isolated.
    pub isolate_roots: Vec<std::path::PathBuf>,
    /// Run in a new worktree before its first turn (`sh -c`).
    pub setup: Option<String>,
    pub setup_timeout: Duration,
    /// An archived conversation's worktree directory is removed this long after the
    /// archiving (its snapshot and branch stay; unarchived, it comes back).
    pub archive_grace: Duration,
    /// The disk tether's worktrees may take: past it, idle ones are removed (least
    /// recently used first, after a snapshot; restored at their next turn).
    pub disk_budget_bytes: u64,
    /// How often one node cleans up: stale directories, then the budget.
    pub sweep_interval: Duration,
    /// A worktree unused this long (no turn ended in it) may go for the budget.
    pub sweep_idle: Duration,
}

impl Default for WorktreesConfig {
    fn default() -> Self {
        WorktreesConfig {
            isolate_roots: Vec::new(),
            setup: None,
            setup_timeout: Duration::from_secs(600),
            archive_grace: Duration::from_secs(7 * 24 * 3600),
            disk_budget_bytes: 20 << 30,
            sweep_interval: Duration::from_secs(3600),
            sweep_idle: Duration::from_secs(900),
        }
    }
}

/// Scheduled turns (`[schedules]`, issue 30).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulesConfig {
    /// No schedule runs more often than this (60 s).
    pub min_interval: Duration,
    /// Schedules per conversation (20).
    pub max_per_conversation: usize,
    /// A schedule pauses after this many failed runs in a row (3; 0 never).
    pub max_failures: u32,
    /// A run found later than this after its time was missed (the daemon or the cluster
    /// was down): the schedule's missed-run policy decides (60 s).
    pub missed_after: Duration,
    /// The time zone of schedules that name none (the server's).
    pub time_zone: String,
}

impl Default for SchedulesConfig {
    fn default() -> Self {
        SchedulesConfig {
            min_interval: Duration::from_secs(60),
            max_per_conversation: 20,
            max_failures: 3,
            missed_after: Duration::from_secs(60),
            time_zone: "UTC".to_owned(),
        }
    }
}

/// What the usage ledger records beside the tokens (issue 29).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageConfig {
    /// The price table (`[prices]` over [`Prices::defaults`]).
    ///
    /// [`Prices::defaults`]: tether_core::usage::Prices::defaults
    pub prices: tether_core::usage::Prices,
    /// The vendor account each agent runs on (`[agents.NAME] account`; by default the
    /// agent's name): usage and limits are per account.
    pub accounts: BTreeMap<String, String>,
    /// Turns parked at a vendor's limit (`[limits]`).
    pub limits: LimitsConfig,
}

/// How a turn stopped by a vendor's usage limit is continued (issue 29).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitsConfig {
    /// When the vendor does not say when its limit resets: wait this long.
    pub unknown_reset_wait: Duration,
    /// Continuations of one parked turn before tether gives up (2).
    pub attempts: u32,
    /// A reset further away than this is not waited for (the person is told).
    pub horizon: Duration,
    /// Sessions parked on one account wake this far apart.
    pub stagger: Duration,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            unknown_reset_wait: Duration::from_secs(300),
            attempts: 2,
            horizon: Duration::from_secs(24 * 3600),
            stagger: Duration::from_secs(3),
        }
    }
}

impl Default for UsageConfig {
    fn default() -> Self {
        UsageConfig {
            prices: tether_core::usage::Prices::defaults(),
            accounts: BTreeMap::new(),
            limits: LimitsConfig::default(),
        }
    }
}

impl UsageConfig {
    /// The account `agent` runs on.
    pub fn account(&self, agent: &str) -> String {
        self.accounts
            .get(agent)
            .cloned()
            .unwrap_or_else(|| agent.to_owned())
    }
}

/// This node in a cluster of nodes sharing one PostgreSQL store (issue 12; on SQLite the
/// cluster is this node alone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// This node's id in the store's `nodes` and `owners` tables: stable across restarts
    /// of the same data directory (`<data_dir>/node_id`).
    pub node_id: tether_proto::NodeId,
    /// A node without a heartbeat for this long counts as gone; its conversations are
    /// taken over.
    pub lease_ttl: Duration,
    /// Live conversations this node takes on before a new one goes to the least-loaded
    /// node (0 = no limit).
    pub max_live_per_node: usize,
    /// Where attachment files live when not in `<data_dir>/attachments`: a directory every
    /// node of a cluster mounts, so a file uploaded to one node reaches an agent on another.
    pub attachments_dir: Option<PathBuf>,
    /// Whether the nodes wake each other with the database's commit notices (`LISTEN` /
    /// `NOTIFY`); off, polling alone finds other nodes' commits and commands (`[cluster]
    /// notices = false`, for proving that fallback).
    pub notices: bool,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            node_id: tether_proto::NodeId::new("local"),
            lease_ttl: Duration::from_secs(10),
            max_live_per_node: 0,
            attachments_dir: None,
            notices: true,
        }
    }
}

/// Coalesced writes: a session actor stores streamed agent events (message and thought
/// deltas, tool calls and their updates) in one transaction of up to `max_events`,
/// waiting at most `window` after the first of them for more. Any other event flushes
/// the batch first, so nothing is reordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoalesceConfig {
    /// Most events in one transaction (at least 1).
    pub max_events: usize,
    /// Longest a streamed event waits for company before it is stored (zero: only
    /// events already received are batched).
    pub window: Duration,
}

impl Default for CoalesceConfig {
    fn default() -> Self {
        CoalesceConfig {
            max_events: 64,
            window: Duration::from_millis(4),
        }
    }
}
