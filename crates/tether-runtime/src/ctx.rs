//! Shared context of the runtime: the store (which also publishes events to their
//! followers, see `tether_store::Events::follow`), the configuration, the agent drivers
//! and the clock (the last two given, see `seams`).

use std::sync::Arc;

use std::sync::atomic::{AtomicU64, Ordering};
use tokio::time::Instant;

use tether_agents::{AgentError, AgentSession, GroupRecords, StartRequest};
use tether_store::Store;

use crate::RuntimeConfig;
use crate::seams::{Clock, Drivers, Seams};
use crate::session::pool::Pool;

pub(crate) struct Ctx {
    pub store: Store,
    pub config: RuntimeConfig,
    pub pool: Pool,
    /// Delegation: MCP tokens of launched sessions, the readiness gate.
    pub delegation: Arc<crate::delegation::registry::Registry>,
    /// The Claude warm spares (`[pool] claude_spare`).
    pub spares: crate::spare::Spares,
    /// The delegation outcome watcher's list of tasks to follow.
    pub delegation_watch: crate::delegation::watch_list::WatchList,
    /// Streamed agent events stored, and the store transactions they took.
    pub streamed: StreamedFigures,
    /// The wall clock: approval and question deadlines and their expiry.
    pub clock: Arc<dyn Clock>,
    /// The conversations this node owns (issue 12; on SQLite: all, unclaimed).
    pub ownership: crate::ownership::Ownership,
    /// Since when this node drains (issue 31).
    pub drain: crate::drain_mark::DrainMark,
    /// The running turns' trace contexts (issue 31).
    pub turn_traces: crate::trace::TurnTraces,
    drivers: Drivers,
}

impl Ctx {
    pub fn new(
        store: Store,
        config: RuntimeConfig,
        records: Option<GroupRecords>,
        seams: Seams,
    ) -> Arc<Ctx> {
        // Shared processes only for the real drivers: given drivers start what they like.
        let hosts = match &seams.drivers {
            Some(_) => None,
            None => config.pool.host_limits().map(tether_agents::Hosts::new),
        };
        let drivers = seams
            .drivers
            .unwrap_or_else(|| Drivers::real(config.start_timeout, records, hosts.clone()));
        let pool = Pool::new(config.pool.clone(), hosts);
        let delegation = Arc::new(crate::delegation::registry::Registry::new(
            config.delegation.clone(),
        ));
        let spares = crate::spare::Spares::new(
            drivers.claude.clone(),
            delegation.clone(),
            &config,
            pool.ceiling(),
        );
        let ownership = crate::ownership::Ownership::new(
            store.clone(),
            config.cluster.node_id.clone(),
            seams.clock.clone(),
        );
        Arc::new(Ctx {
            store,
            ownership,
            drain: crate::drain_mark::DrainMark::default(),
            turn_traces: crate::trace::TurnTraces::default(),
            delegation,
            spares,
            delegation_watch: crate::delegation::watch_list::WatchList::new(),
            streamed: StreamedFigures::default(),
            config,
            pool,
            clock: seams.clock,
            drivers,
        })
    }

    /// Starts (or strictly resumes) an agent session with the driver of its kind, in its
    /// working directory checked again now (it may have been swapped since it was chosen).
    pub async fn start_agent(
        &self,
        mut req: StartRequest,
    ) -> Result<Box<dyn AgentSession>, AgentError> {
        let asked = Instant::now();
        req.cwd = crate::cwd::recheck(&req.cwd, &self.config)?;
        if let Some(spare) = self.spares.take(&req) {
            return Ok(spare);
        }
        let (agent, resume) = (req.spec.name.clone(), req.resume.is_some());
        let started = self.start_cold(req).await;
        tracing::debug!(%agent, resume, took_us = asked.elapsed().as_micros() as u64,
            ok = started.is_ok(), "agent session start");
        started
    }

    /// [`Ctx::start_agent`] without a spare.
    async fn start_cold(&self, req: StartRequest) -> Result<Box<dyn AgentSession>, AgentError> {
        let driver = self.drivers.get(req.spec.driver);
        let (hosts, ceiling) = (self.pool.hosts(), self.pool.ceiling());
        if hosts.is_none() && ceiling.is_none() {
            return driver.start(req).await;
        }
        // The shared-process cap and the process ceiling are hard: at either, room is made
        // (an empty shared process ended, idle sessions evicted) and the start is tried
        // again as they leave; with nothing to end it fails.
        let mut deadline = None;
        loop {
            let mut released = hosts.map(tether_agents::Hosts::released);
            let mut freed = ceiling.map(tether_agents::ProcessCeiling::freed);
            let e = match driver.start(req.clone()).await {
                Err(e @ (AgentError::ProcessLimit { .. } | AgentError::ProcessCeiling { .. })) => e,
                other => return other,
            };
            // At the ceiling a shared process without sessions ends now, not after its idle
            // time (each retry may end another one).
            let ended = matches!(e, AgentError::ProcessCeiling { .. })
                && hosts.is_some_and(tether_agents::Hosts::end_one_empty);
            // Evict once per start (then wait for those to leave), so a start never evicts
            // more than the room it needs.
            let until = match deadline {
                Some(until) => until,
                None if ended || self.make_room(&req.spec.name, &e) => {
                    *deadline.insert(Instant::now() + MAKE_ROOM_WAIT)
                }
                None => return Err(e),
            };
            // The evicted sessions detach first (each bounded by the agent's ack); an
            // ended process gives its slot back once reaped.
            let room = async {
                tokio::select! {
                    _ = async { match &mut released { Some(r) => r.changed().await, None => std::future::pending().await } } => {}
                    _ = async { match &mut freed { Some(f) => f.changed().await, None => std::future::pending().await } } => {}
                }
            };
            if tokio::time::timeout_at(until, room).await.is_err() {
                return Err(e);
            }
        }
    }

    /// Evicts idle sessions for a start that met `limit`: at the shared-process cap one
    /// of the same agent's shared slots; at the ceiling any idle session's process.
    fn make_room(&self, agent: &str, limit: &AgentError) -> bool {
        match limit {
            AgentError::ProcessCeiling { .. } => self.pool.evict_for_ceiling(),
            _ => self.pool.evict_for_process(agent),
        }
    }
}

/// How long a start at the process cap waits for the sessions it evicted to give their
/// slots back.
const MAKE_ROOM_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

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
