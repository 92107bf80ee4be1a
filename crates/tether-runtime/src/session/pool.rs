//! The live pool: which sessions keep an agent process. Idle live sessions stay within a
//! global cap and a per-owner cap, and are evicted oldest-idle-first and after an idle
//! TTL. Eviction only makes a session dormant; its next turn resumes it. Busy sessions
//! are never evicted (a start may exceed a cap while every live session is busy). The
//! owner of a delegated child is its parent conversation, and the per-owner cap counts
//! those children only: a session with no owner (a conversation's own session) counts
//! towards the global cap alone, so a parent's own session never takes a child's slot.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tether_proto::{ConversationId, SessionId};
use tokio::time::Instant;

use crate::session::command::ActorCmd;
use crate::session::mailbox::ActorHandle;
pub use tether_proto::PoolStatus;

/// Pool limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    /// Live agent processes in all (0 = no limit).
    pub max_live: usize,
    /// Live delegated children per parent conversation (0 = no limit).
    pub max_live_per_owner: usize,
    /// An idle live session longer than this is evicted (`None`: never).
    pub idle_ttl: Option<Duration>,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            max_live: 16,
            max_live_per_owner: 8,
            idle_ttl: Some(Duration::from_secs(1800)),
        }
    }
}

struct Entry {
    /// The parent conversation of a delegated child; `None` for other sessions.
    owner: Option<ConversationId>,
    /// `Some(since)` when idle.
    idle_since: Option<Instant>,
    actor: tokio::sync::mpsc::WeakSender<ActorCmd>,
}

#[derive(Default)]
struct State {
    entries: HashMap<SessionId, Entry>,
    evictions: u64,
}

pub(crate) struct Pool {
    config: PoolConfig,
    state: Mutex<State>,
}

impl Pool {
    pub fn new(config: PoolConfig) -> Pool {
        Pool {
            config,
            state: Mutex::new(State::default()),
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

    /// The session has a live process and runs a turn.
    pub fn busy(
        &self,
        session_id: &SessionId,
        owner: Option<&ConversationId>,
        actor: tokio::sync::mpsc::WeakSender<ActorCmd>,
    ) {
        let mut st = self.lock();
        st.entries.insert(
            session_id.clone(),
            Entry {
                owner: owner.cloned(),
                idle_since: None,
                actor,
            },
        );
    }

    /// The session's process is kept but no turn runs.
    pub fn idle(&self, session_id: &SessionId) {
        if let Some(e) = self.lock().entries.get_mut(session_id) {
            e.idle_since = Some(Instant::now());
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

    pub fn status(&self) -> PoolStatus {
        let st = self.lock();
        let idle = st
            .entries
            .values()
            .filter(|e| e.idle_since.is_some())
            .count();
        PoolStatus {
            live: st.entries.len(),
            busy: st.entries.len() - idle,
            idle,
            max_live: self.config.max_live,
            max_live_per_owner: self.config.max_live_per_owner,
            idle_ttl_secs: self.config.idle_ttl.map(|d| d.as_secs()),
            evictions: st.evictions,
        }
    }
}
