//! The live pool: which sessions keep an agent process. Idle live sessions stay within a
//! global cap and a per-owner cap, and are evicted oldest-idle-first and after an idle
//! TTL. Eviction only makes a session dormant; its next turn resumes it. Busy sessions
//! are never evicted (a start may exceed a cap while every live session is busy). The
//! owner of a delegated child is its parent conversation, and the per-owner cap counts
//! those children only: a session with no owner (a conversation's own session) counts
//! towards the global cap alone, so a parent's own session never takes a child's slot.
//!
//! Sessions and processes are counted apart (issue 15): Codex and ACP sessions share
//! processes (`tether_agents::Hosts`, up to `sessions_per_process` each, `max_processes`
//! in all, an empty process ending after `process_idle`); eviction detaches a session
//! from its process. [`Pool::status`] lists the processes with their sessions and memory.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tether_proto::{ConversationId, SessionId};
use tokio::time::Instant;

use crate::session::command::ActorCmd;
use crate::session::mailbox::ActorHandle;
pub use tether_proto::{PoolProcess, PoolStatus};

/// Pool limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    /// Live agent processes in all (0 = no limit).
    pub max_live: usize,
    /// Live delegated children per parent conversation (0 = no limit).
    pub max_live_per_owner: usize,
    /// An idle live session longer than this is evicted (`None`: never).
    pub idle_ttl: Option<Duration>,
    /// Codex and ACP sessions one agent process hosts at most (1 = a process per session,
    /// as Claude always has).
    pub sessions_per_process: usize,
    /// Shared agent processes in all (0 = no limit).
    pub max_processes: usize,
    /// A shared process without sessions ends after this.
    pub process_idle: Duration,
    /// Keep one warm spare process per Claude agent, so a new Claude session attaches
    /// to it instead of a cold start (see `crate::spare`).
    pub claude_spare: bool,
    /// Agent processes of every kind at once, a hard ceiling (0 = no limit): own,
    /// shared and spare processes each take a slot until reaped (issue 24 S6).
    pub process_limit: usize,
}

impl PoolConfig {
    /// The shared-process limits, `None` when every session has a process of its own.
    pub fn host_limits(&self) -> Option<tether_agents::HostLimits> {
        (self.sessions_per_process > 1).then_some(tether_agents::HostLimits {
            sessions_per_process: self.sessions_per_process,
            max_processes: self.max_processes,
            process_idle: self.process_idle,
        })
    }
}

/// The process a live session runs in, as the pool reports it.
#[derive(Debug, Clone)]
pub(crate) struct LiveProcess {
    pub agent: String,
    pub process: tether_agents::ProcessRef,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            max_live: 16,
            max_live_per_owner: 8,
            idle_ttl: Some(Duration::from_secs(1800)),
            sessions_per_process: 32,
            max_processes: 16,
            process_idle: Duration::from_secs(60),
            claude_spare: false,
            process_limit: 64,
        }
    }
}

struct Entry {
    /// The parent conversation of a delegated child; `None` for other sessions.
    owner: Option<ConversationId>,
    /// `Some(since)` when idle.
    idle_since: Option<Instant>,
    actor: tokio::sync::mpsc::WeakSender<ActorCmd>,
    /// `None` while the session is being made live.
    process: Option<LiveProcess>,
}

#[derive(Default)]
struct State {
    entries: HashMap<SessionId, Entry>,
    evictions: u64,
    /// The node drains (issue 31): a session is evicted as soon as it is idle.
    draining: bool,
}

pub(crate) struct Pool {
    config: PoolConfig,
    state: Mutex<State>,
    /// The shared processes (none when every session has its own).
    hosts: Option<tether_agents::Hosts>,
    /// Every agent process's slot (none: `process_limit = 0`).
    ceiling: Option<tether_agents::ProcessCeiling>,
}

impl Pool {
    pub fn new(config: PoolConfig, hosts: Option<tether_agents::Hosts>) -> Pool {
        let ceiling = (config.process_limit > 0)
            .then(|| tether_agents::ProcessCeiling::new(config.process_limit));
        Pool {
            config,
            state: Mutex::new(State::default()),
            hosts,
            ceiling,
        }
    }

    /// The ceiling every agent process takes a slot of.
    pub fn ceiling(&self) -> Option<&tether_agents::ProcessCeiling> {
        self.ceiling.as_ref()
    }

    /// Ends the shared processes (daemon shutdown, after the sessions left them).
    pub async fn end_processes(&self) {
        if let Some(hosts) = &self.hosts {
            hosts.shutdown().await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A session is about to start a process: make room by evicting idle sessions
    /// (oldest first) over the global cap and, for a child, over its owner's cap.
    pub fn admit(&self, session_id: &SessionId, owner: Option<&ConversationId>) {
        let mut st = self.lock();
        let mut victims = Vec::new();
        let others = |st: &State, owner: Option<&ConversationId>| -> Vec<(SessionId, Instant)> {
            let mut idle: Vec<(SessionId, Instant)> = st
                .entries
                .iter()
                .filter(|(id, e)| {
                    *id != session_id && owner.is_none_or(|o| e.owner.as_ref() == Some(o))
                })
                .filter_map(|(id, e)| e.idle_since.map(|t| (id.clone(), t)))
                .collect();
            idle.sort_by_key(|(_, t)| *t);
            idle
        };
        if let Some(owner) = owner
            && self.config.max_live_per_owner > 0
        {
            let count = st
                .entries
                .iter()
                .filter(|(id, e)| e.owner.as_ref() == Some(owner) && *id != session_id)
                .count();
            let over = (count + 1).saturating_sub(self.config.max_live_per_owner);
            victims.extend(
                others(&st, Some(owner))
                    .into_iter()
                    .take(over)
                    .map(|(id, _)| id),
            );
        }
        if self.config.max_live > 0 {
            let count = st
                .entries
                .keys()
                .filter(|id| *id != session_id && !victims.contains(id))
                .count();
            let over = (count + 1).saturating_sub(self.config.max_live);
            let more: Vec<SessionId> = others(&st, None)
                .into_iter()
                .map(|(id, _)| id)
                .filter(|id| !victims.contains(id))
                .take(over)
                .collect();
            victims.extend(more);
        }
        for id in victims {
            Self::evict_locked(&mut st, &id, "the live pool is full");
        }
    }

    fn evict_locked(st: &mut State, session_id: &SessionId, why: &str) {
        if let Some(e) = st.entries.remove(session_id) {
            st.evictions += 1;
            // Under the pool's lock: never wait for room in the mailbox.
            if let Some(tx) = e.actor.upgrade() {
                ActorHandle { tx }.send_now(ActorCmd::Evict {
                    reason: why.to_string(),
                });
            }
        }
    }

    /// The shared processes, when sessions share them.
    pub fn hosts(&self) -> Option<&tether_agents::Hosts> {
        self.hosts.as_ref()
    }

    /// A start of `agent` met the hard process cap (every shared process at its session
    /// limit): evicts the least recently used idle session on a process of `agent` (its
    /// slot is then free), else, when there is none, every session of the shared process
    /// whose sessions are all idle and least recently used (the process then empties and
    /// the start ends it). False when no session could be evicted: every one is busy.
    pub fn evict_for_process(&self, agent: &str) -> bool {
        let mut st = self.lock();
        let idle_shared = |e: &Entry| -> Option<(u64, Instant, bool)> {
            let p = e.process.as_ref()?;
            Some((p.process.shared?, e.idle_since?, p.agent == agent))
        };
        let same_agent = st
            .entries
            .iter()
            .filter_map(|(id, e)| {
                idle_shared(e)
                    .filter(|(_, _, same)| *same)
                    .map(|(_, t, _)| (id, t))
            })
            .min_by_key(|(_, t)| *t)
            .map(|(id, _)| vec![id.clone()]);
        let victims = same_agent.or_else(|| Self::idle_shared_process(&st));
        let Some(victims) = victims else {
            return false;
        };
        for id in victims {
            Self::evict_locked(&mut st, &id, "the agent processes are full");
        }
        true
    }

    /// A start met the process ceiling: evicts the least recently used idle session that
    /// has a process of its own (the process then ends and gives its slot back), else
    /// every session of the shared process whose sessions are all idle (it then empties
    /// and the start ends it). False when every session is busy.
    pub fn evict_for_ceiling(&self) -> bool {
        let mut st = self.lock();
        let own = st
            .entries
            .iter()
            .filter(|(_, e)| {
                e.process
                    .as_ref()
                    .is_some_and(|p| p.process.shared.is_none())
            })
            .filter_map(|(id, e)| e.idle_since.map(|t| (id.clone(), t)))
            .min_by_key(|(_, t)| *t)
            .map(|(id, _)| vec![id]);
        let Some(victims) = own.or_else(|| Self::idle_shared_process(&st)) else {
            return false;
        };
        for id in victims {
            Self::evict_locked(&mut st, &id, "tether's agent processes are at their limit");
        }
        true
    }

    /// The sessions of the least recently used shared process whose sessions are all idle.
    fn idle_shared_process(st: &State) -> Option<Vec<SessionId>> {
        let mut by_process: HashMap<u64, (Vec<SessionId>, Option<Instant>)> = HashMap::new();
        for (id, e) in &st.entries {
            let Some(shared) = e.process.as_ref().and_then(|p| p.process.shared) else {
                continue;
            };
            let slot = by_process
                .entry(shared)
                .or_insert_with(|| (Vec::new(), e.idle_since));
            slot.0.push(id.clone());
            slot.1 = match (slot.1, e.idle_since) {
                (Some(a), Some(b)) => Some(a.max(b)),
                _ => None,
            };
        }
        by_process
            .into_values()
            .filter_map(|(ids, last)| last.map(|t| (ids, t)))
            .min_by_key(|(_, t)| *t)
            .map(|(ids, _)| ids)
    }

    /// `[pool] max_live_per_owner` (0: no limit).
    pub fn max_live_per_owner(&self) -> usize {
        self.config.max_live_per_owner
    }

    /// How many children of `owner` are live here, `except` not counted.
    pub fn live_children(&self, owner: &ConversationId, except: &SessionId) -> usize {
        self.lock()
            .entries
            .iter()
            .filter(|(id, e)| e.owner.as_ref() == Some(owner) && *id != except)
            .count()
    }

    /// Asks every live session's actor to look at its claim (some were lost).
    pub fn check_claims(&self) {
        let st = self.lock();
        for e in st.entries.values() {
            if let Some(tx) = e.actor.upgrade() {
                ActorHandle { tx }.send_now(ActorCmd::CheckClaim);
            }
        }
    }

    /// Evicts the session if it is live here and idle; `true` when it was.
    pub fn evict_if_idle(&self, session_id: &SessionId, why: &str) -> bool {
        let mut st = self.lock();
        let idle = st
            .entries
            .get(session_id)
            .is_some_and(|e| e.idle_since.is_some());
        if idle {
            Self::evict_locked(&mut st, session_id, why);
        }
        idle
    }

    /// The session has a live process and runs a turn.
    pub fn busy(
        &self,
        session_id: &SessionId,
        owner: Option<&ConversationId>,
        actor: tokio::sync::mpsc::WeakSender<ActorCmd>,
        process: Option<LiveProcess>,
    ) {
        let mut st = self.lock();
        st.entries.insert(
            session_id.clone(),
            Entry {
                owner: owner.cloned(),
                idle_since: None,
                actor,
                process,
            },
        );
    }

    /// The session's process is kept but no turn runs (while the node drains: it is
    /// evicted at once).
    pub fn idle(&self, session_id: &SessionId) {
        let mut st = self.lock();
        if st.draining {
            Self::evict_locked(&mut st, session_id, "this node drains");
        } else if let Some(e) = st.entries.get_mut(session_id) {
            e.idle_since = Some(Instant::now());
        }
    }

    /// The node drains (issue 31): evicts every idle session now, and every other one as
    /// soon as it is idle.
    pub fn drain(&self) {
        let mut st = self.lock();
        st.draining = true;
        let idle: Vec<SessionId> = st
            .entries
            .iter()
            .filter(|(_, e)| e.idle_since.is_some())
            .map(|(id, _)| id.clone())
            .collect();
        for id in idle {
            Self::evict_locked(&mut st, &id, "this node drains");
        }
    }

    /// The session has no process any more.
    pub fn gone(&self, session_id: &SessionId) {
        self.lock().entries.remove(session_id);
    }

    /// Evicts sessions idle for longer than the TTL.
    pub fn sweep(&self) {
        let Some(ttl) = self.config.idle_ttl else {
            return;
        };
        let mut st = self.lock();
        let now = Instant::now();
        let expired: Vec<SessionId> = st
            .entries
            .iter()
            .filter(|(_, e)| e.idle_since.is_some_and(|t| now.duration_since(t) >= ttl))
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            Self::evict_locked(&mut st, &id, "idle for longer than the idle TTL");
        }
    }

    /// How often [`Pool::sweep`] should run.
    pub fn sweep_interval(&self) -> Option<Duration> {
        self.config
            .idle_ttl
            .map(|t| (t / 4).clamp(Duration::from_millis(50), Duration::from_secs(30)))
    }

    /// Whether session `session_id` is live (its agent admitted, not evicted).
    pub fn is_live(&self, session_id: &SessionId) -> bool {
        self.lock().entries.contains_key(session_id)
    }

    pub fn status(&self) -> PoolStatus {
        let st = self.lock();
        let idle = st
            .entries
            .values()
            .filter(|e| e.idle_since.is_some())
            .count();
        let processes = self.processes(&st);
        PoolStatus {
            process_count: processes.len(),
            processes,
            sessions_per_process: self.config.sessions_per_process.max(1),
            max_processes: self.config.max_processes,
            process_limit: self.config.process_limit,
            agent_processes: self.ceiling.as_ref().map_or(0, |c| c.running()),
            live: st.entries.len(),
            busy: st.entries.len() - idle,
            idle,
            max_live: self.config.max_live,
            max_live_per_owner: self.config.max_live_per_owner,
            idle_ttl_secs: self.config.idle_ttl.map(|d| d.as_secs()),
            evictions: st.evictions,
            spares: Vec::new(),
        }
    }
}

impl Pool {
    /// Every agent process of a live session, and the shared ones without sessions (they
    /// end after their idle time): own processes one per session, shared ones with all of
    /// theirs.
    fn processes(&self, st: &State) -> Vec<PoolProcess> {
        let mut out: Vec<PoolProcess> = Vec::new();
        let shared = self
            .hosts
            .as_ref()
            .map(tether_agents::Hosts::processes)
            .unwrap_or_default();
        for view in shared {
            let mut sessions: Vec<SessionId> = st
                .entries
                .iter()
                .filter(|(_, e)| {
                    e.process
                        .as_ref()
                        .is_some_and(|p| p.process.shared == Some(view.id))
                })
                .map(|(id, _)| id.clone())
                .collect();
            sessions.sort();
            out.push(PoolProcess {
                agent: view.agent,
                pid: view.pid,
                shared: true,
                sessions,
                rss_bytes: view.rss_bytes,
            });
        }
        let mut own: Vec<PoolProcess> = st
            .entries
            .iter()
            .filter_map(|(id, e)| {
                let p = e.process.as_ref().filter(|p| p.process.shared.is_none())?;
                Some(PoolProcess {
                    agent: p.agent.clone(),
                    pid: p.process.pid,
                    shared: false,
                    sessions: vec![id.clone()],
                    rss_bytes: p.process.pid.and_then(tether_agents::host::group_rss_bytes),
                })
            })
            .collect();
        own.sort_by(|a, b| a.sessions.cmp(&b.sessions));
        out.extend(own);
        out
    }
}
