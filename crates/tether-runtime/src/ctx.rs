//! Shared context of the runtime: the store (which also publishes events to their
//! followers, see `tether_store::Store::follow`), the configuration and the agent drivers.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tether_agents::{
    AcpDriver, AgentDriver, AgentError, AgentSession, ClaudeDriver, CodexDriver, DriverKind,
    GroupRecords, StartRequest,
};
use tether_store::Store;

use crate::RuntimeConfig;
use crate::session::pool::Pool;

pub(crate) struct Ctx {
    pub store: Store,
    pub config: RuntimeConfig,
    pub pool: Pool,
    /// Delegation: MCP tokens of launched sessions, the readiness gate.
    pub delegation: crate::delegation::Registry,
    /// The delegation outcome watcher's list of tasks to follow.
    pub delegation_watch: crate::delegation::watch::WatchList,
    /// Streamed agent events stored, and the store transactions they took.
    pub streamed: StreamedFigures,
    acp: AcpDriver,
    codex: CodexDriver,
    claude: ClaudeDriver,
}

impl Ctx {
    pub fn new(store: Store, config: RuntimeConfig, records: Option<GroupRecords>) -> Arc<Ctx> {
        let acp = AcpDriver {
            start_timeout: config.start_timeout,
            records: records.clone(),
        };
        let codex = CodexDriver {
            start_timeout: config.start_timeout,
            records: records.clone(),
        };
        let claude = ClaudeDriver {
            start_timeout: config.start_timeout,
            records,
        };
        let pool = Pool::new(config.pool.clone());
        let delegation = crate::delegation::Registry::new(config.delegation.clone());
        Arc::new(Ctx {
            store,
            delegation,
            delegation_watch: crate::delegation::watch::WatchList::new(),
            streamed: StreamedFigures::default(),
            config,
            pool,
            acp,
            codex,
            claude,
        })
    }

    /// Starts (or strictly resumes) an agent session with the driver of its kind, in its
    /// working directory checked again now (it may have been swapped since it was chosen).
    pub async fn start_agent(
        &self,
        mut req: StartRequest,
    ) -> Result<Box<dyn AgentSession>, AgentError> {
        req.cwd = crate::cwd::recheck(&req.cwd, &self.config)?;
        match req.spec.driver {
            DriverKind::Acp => self.acp.start(req).await,
            DriverKind::Codex => self.codex.start(req).await,
            DriverKind::Claude => self.claude.start(req).await,
        }
    }
}

/// Counters of the session actors' coalesced writes, for `GET /api/v1/runtime`.
#[derive(Default)]
pub(crate) struct StreamedFigures {
    events: AtomicU64,
    batches: AtomicU64,
}

impl StreamedFigures {
    /// One stored batch of `events` streamed events.
    pub fn batch(&self, events: usize) {
        self.events.fetch_add(events as u64, Ordering::Relaxed);
        self.batches.fetch_add(1, Ordering::Relaxed);
    }

    /// (events, batches) stored since start-up.
    pub fn get(&self) -> (u64, u64) {
        (
            self.events.load(Ordering::Relaxed),
            self.batches.load(Ordering::Relaxed),
        )
    }
}

/// Where agents' process groups are recorded, after ending the groups an earlier run of
/// this daemon left behind (it was killed before it could end them). Runs at start-up,
/// before recovery. `None` (logged) when the directory cannot be used.
pub(crate) fn end_leftover_agents(config: &RuntimeConfig) -> Option<GroupRecords> {
    let dir = config.data_dir.join("run").join("agents");
    match GroupRecords::open(&dir) {
        Ok(records) => {
            let left = records.end_leftovers();
            if !left.ended.is_empty() {
                tracing::warn!(groups = ?left.ended, "ended agent processes left by an earlier run");
            }
            Some(records)
        }
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e,
                "cannot record agent process groups; leftovers of a crash will not be ended");
            None
        }
    }
}

/// A new random id (32 hex digits).
pub(crate) fn new_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}
