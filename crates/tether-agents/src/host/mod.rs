//! Shared agent processes (issue 15): one `codex app-server` or ACP process hosts many
//! sessions, up to a per-process limit. A start attaches to a running process of the same
//! agent configuration (command, arguments, environment) that has room, and spawns one
//! only when none has ([`Hosts::acquire`]). What the process sends is routed to its
//! session by thread or session id ([`routes`]), so no session sees another's events,
//! approvals or questions. A session that ends only detaches ([`Lease::release`]); a
//! process left without sessions ends after its own idle time. When the process dies,
//! every session on it is told as a lone session is: its pending requests fail with the
//! crash report, and the drivers' close hooks end a running turn.
//!
//! Knows nothing about a protocol's methods: the drivers run the handshake (once per
//! process, [`Host::initialized`]) and open their sessions over [`Host::conn`].

mod parked;
mod routes;
mod rss;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use serde_json::Value;

use crate::driver::AgentError;
use crate::jsonrpc::{Connection, Options};
use crate::launch::spawn_rpc;
use crate::process::{AgentProcess, ProcessSpec};
pub use parked::Parked;
use parked::{Ended, Left};
pub(crate) use routes::{Addressee, IdOf, Route, Routes};
pub use rss::group_rss_bytes;

/// How sessions share processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostLimits {
    /// Sessions one process hosts at most (at least 1).
    pub sessions_per_process: usize,
    /// Shared processes in all (0 = no limit), a hard cap: at the cap a start first ends
    /// a process without sessions; when every process has sessions and none of its
    /// agent has room, the start fails with [`AgentError::ProcessLimit`] (the runtime
    /// then evicts an idle session and tries again; [`Hosts::released`] says when a slot
    /// was given back).
    pub max_processes: usize,
    /// A process without sessions ends after this.
    pub process_idle: Duration,
}

impl Default for HostLimits {
    fn default() -> Self {
        HostLimits {
            sessions_per_process: 32,
            max_processes: 16,
            process_idle: Duration::from_secs(60),
        }
    }
}

/// One shared process as `GET /api/v1/pool` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessView {
    /// The process's number in this daemon (what [`crate::AgentSession::process`] names).
    pub id: u64,
    pub agent: String,
    pub pid: Option<u32>,
    /// Sessions attached (or attaching) now.
    pub sessions: usize,
    /// Resident memory of the process group, when it can be read.
    pub rss_bytes: Option<u64>,
}

/// Which processes may host a session: the same protocol and launch configuration. The
/// working directory is not part of it (each session gives its own).
#[derive(Debug, Clone, PartialEq, Eq)]
struct HostKey {
    dialect: &'static str,
    program: String,
    args: Vec<String>,
    pass_env: Vec<String>,
    env: Vec<(String, String)>,
}

impl HostKey {
    fn of(dialect: &'static str, spec: &ProcessSpec) -> HostKey {
        HostKey {
            dialect,
            program: spec.program.clone(),
            args: spec.args.clone(),
            pass_env: spec.pass_env.clone(),
            env: spec
                .env
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        }
    }
}

/// The registry of shared processes (cheap to clone; one for all drivers of a daemon).
#[derive(Clone, Debug)]
pub struct Hosts {
    inner: Arc<HostsInner>,
}

#[derive(Debug)]
struct HostsInner {
    limits: HostLimits,
    processes: Mutex<Vec<Arc<Host>>>,
    next_id: AtomicU64,
    /// The process each session left last, by its thread or session id: a resume goes
    /// back there while it runs, because the agent may still hold the session (codex
    /// keeps an unsubscribed thread's writer, so another process could not resume it).
    left: Mutex<std::collections::HashMap<String, Left>>,
    /// Bumped whenever a slot is given back.
    released: tokio::sync::watch::Sender<u64>,
}

/// One shared process.
#[derive(Debug)]
pub(crate) struct Host {
    pub id: u64,
    key: HostKey,
    agent: String,
    pub process: AgentProcess,
    pub conn: Connection,
    pub routes: Arc<Routes>,
    /// The handshake's answer (`initialize`), run once per process.
    init: tokio::sync::OnceCell<Value>,
    slots: Mutex<Slots>,
    /// Set when the process ends (what [`Parked`] waits for).
    ended: Ended,
}

#[derive(Debug, Default)]
struct Slots {
    used: usize,
    /// Bumped at every attach, so an idle end scheduled earlier knows it is stale.
    generation: u64,
    /// Out of the registry: takes no more sessions.
    retired: bool,
}

impl Host {
    fn lock(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn usable(&self) -> bool {
        self.process.is_alive() && self.conn.closed().is_none() && !self.lock().retired
    }

    /// The handshake's answer; `handshake` runs on the first call only (a failed one is
    /// tried again by the next caller, on a process that is then most likely gone).
    pub async fn initialized<F, Fut>(&self, handshake: F) -> Result<Value, AgentError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Value, AgentError>>,
    {
        self.init.get_or_try_init(handshake).await.cloned()
    }
}

impl Hosts {
    pub fn new(limits: HostLimits) -> Hosts {
        let limits = HostLimits {
            sessions_per_process: limits.sessions_per_process.max(1),
            ..limits
        };
        Hosts {
            inner: Arc::new(HostsInner {
                limits,
                processes: Mutex::new(Vec::new()),
                next_id: AtomicU64::new(1),
                left: Mutex::new(std::collections::HashMap::new()),
                released: tokio::sync::watch::Sender::new(0),
            }),
        }
    }

    pub fn limits(&self) -> &HostLimits {
        &self.inner.limits
    }

    /// A slot on a process of `spec` (dialect `dialect`): an existing one with room, else a
    /// new process whose messages `id_of` routes. The slot is the caller's until the
    /// [`Lease`] is released or dropped.
    /// A resume (`resume`: the session's id) goes back to the process it left while that
    /// one runs, even when it is full.
    pub(crate) fn acquire(
        &self,
        dialect: &'static str,
        spec: &ProcessSpec,
        options: Options,
        id_of: IdOf,
        resume: Option<&str>,
    ) -> Result<Lease, AgentError> {
        let key = HostKey::of(dialect, spec);
        let limit = self.inner.limits.sessions_per_process;
        let mut retire = Vec::new();
        {
            let mut processes = self.inner.lock();
            processes.retain(|h| {
                let keep = h.usable();
                if !keep {
                    h.lock().retired = true;
                }
                keep
            });
            let left = resume.and_then(|id| self.inner.left_lock().remove(id));
            let (home, home_config) = match left {
                Some(l) => (l.host.upgrade(), l.config),
                None => (None, None),
            };
            let home = home.filter(|h| h.key == key && processes.iter().any(|p| Arc::ptr_eq(p, h)));
            let home_config = home_config.filter(|_| home.is_some());
            let room = home.as_ref().or_else(|| {
                processes.iter().find(|h| {
                    let slots = h.lock();
                    h.key == key && !slots.retired && slots.used < limit
                })
            });
            if let Some(host) = room {
                let host = Arc::clone(host);
                {
                    let mut slots = host.lock();
                    slots.used += 1;
                    slots.generation += 1;
                    host.routes.set_users(slots.used);
                }
                let at_home = home.as_ref().is_some_and(|h| Arc::ptr_eq(h, &host));
                let mut lease = self.lease(host);
                if at_home {
                    lease.home_config = home_config;
                }
                return Ok(lease);
            }
            let cap = self.inner.limits.max_processes;
            if cap > 0 && processes.len() >= cap {
                // Make room by ending a process without sessions, if there is one.
                let Some(i) = processes.iter().position(|h| h.lock().used == 0) else {
                    return Err(AgentError::ProcessLimit {
                        sessions_per_process: limit,
                        max_processes: cap,
                    });
                };
                let host = processes.remove(i);
                host.lock().retired = true;
                retire.push(host);
            }
        }
        for host in retire {
            end_process(host);
        }
        let routes = Arc::new(Routes::new(id_of));
        routes.set_users(1);
        let closing = Arc::clone(&routes);
        let ended = Ended::new();
        let ending = ended.clone();
        let (process, conn) = spawn_rpc(spec, options, routes.handler(), move |info| {
            closing.closed(info);
            ending.set();
        })?;
        let host = Arc::new(Host {
            id: self.inner.next_id.fetch_add(1, Ordering::Relaxed),
            key,
            agent: spec.agent.clone(),
            process,
            conn,
            routes,
            init: tokio::sync::OnceCell::new(),
            slots: Mutex::new(Slots {
                used: 1,
                generation: 1,
                retired: false,
            }),
            ended,
        });
        self.inner.lock().push(Arc::clone(&host));
        Ok(self.lease(host))
    }

    fn lease(&self, host: Arc<Host>) -> Lease {
        Lease {
            host,
            hosts: Arc::downgrade(&self.inner),
            route: Mutex::new(None),
            released: std::sync::atomic::AtomicBool::new(false),
            config: Mutex::new(None),
            home_config: None,
        }
    }

    /// Changes whenever a session gives its slot back (subscribe before making room, then
    /// wait for a change).
    pub fn released(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.released.subscribe()
    }

    /// Ends one shared process that hosts no session (it would end after its idle time)
    /// now: the runtime makes room at the process ceiling. False when every one hosts one.
    pub fn end_one_empty(&self) -> bool {
        let host = {
            let mut processes = self.inner.lock();
            let Some(i) = processes.iter().position(|h| h.lock().used == 0) else {
                return false;
            };
            let host = processes.remove(i);
            host.lock().retired = true;
            host
        };
        end_process(host);
        true
    }

    /// The shared processes now, with their sessions and memory.
    pub fn processes(&self) -> Vec<ProcessView> {
        let processes: Vec<Arc<Host>> = self.inner.lock().clone();
        processes
            .iter()
            .filter(|h| h.process.is_alive())
            .map(|h| ProcessView {
                id: h.id,
                agent: h.agent.clone(),
                pid: h.process.pid(),
                sessions: h.lock().used,
                rss_bytes: h.process.pid().and_then(rss::group_rss_bytes),
            })
            .collect()
    }

    /// Ends every shared process now (daemon shutdown).
    pub async fn shutdown(&self) {
        let processes: Vec<Arc<Host>> = std::mem::take(&mut *self.inner.lock());
        let ends = processes.into_iter().map(|h| async move {
            h.lock().retired = true;
            h.conn.close().await;
            h.process.shutdown().await;
            h.ended.set();
        });
        futures::future::join_all(ends).await;
    }
}

impl HostsInner {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Host>>> {
        self.processes.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn left_lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, Left>> {
        self.left.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes `host` out of the registry if nothing attached since `generation`; under the
    /// registry's lock, so no start can attach meanwhile.
    fn remove_if_idle(&self, host: &Arc<Host>, generation: u64) -> bool {
        let mut processes = self.lock();
        let mut slots = host.lock();
        if slots.used > 0 || slots.generation != generation {
            return false;
        }
        slots.retired = true;
        drop(slots);
        processes.retain(|h| !Arc::ptr_eq(h, host));
        true
    }

    /// Takes `host` out of the registry (it hosts nothing more).
    fn remove(&self, host: &Arc<Host>) {
        self.lock().retain(|h| !Arc::ptr_eq(h, host));
        host.lock().retired = true;
    }
}

/// Closes a process's stdin and stops it, in a task.
fn end_process(host: Arc<Host>) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        // Without a runtime the process group is killed when the last handle drops.
        return;
    };
    rt.spawn(async move {
        host.conn.close().await;
        host.process.shutdown().await;
        host.ended.set();
    });
}

/// A session's slot on a shared process, and its route. Released once: explicitly, or
/// when dropped.
#[derive(Debug)]
pub(crate) struct Lease {
    pub host: Arc<Host>,
    hosts: Weak<HostsInner>,
    route: Mutex<Option<String>>,
    released: std::sync::atomic::AtomicBool,
    /// The configuration the session's thread was opened with here (see
    /// [`Lease::opened_with`]), remembered for its resume when it leaves.
    config: Mutex<Option<String>>,
    /// A resume back on the process the session left: the configuration its thread
    /// had there.
    home_config: Option<String>,
}

impl Lease {
    /// Routes what the process sends for `id` to `route` (see [`Routes::add`]); an id
    /// another session of the process holds is [`AgentError::Protocol`].
    pub fn route(&self, id: &str, route: Route) -> Result<(), crate::AgentError> {
        if !self.host.routes.add(id, route) {
            return Err(crate::AgentError::Protocol {
                message: format!(
                    "the agent gave session id {id}, which another session on the same \
                     process holds; refused (one agent session id, one session)"
                ),
            });
        }
        let previous = self
            .route
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(id.to_owned());
        if let Some(previous) = previous.filter(|p| p != id) {
            self.host.routes.remove(&previous);
        }
        Ok(())
    }

    /// Whether the process still runs.
    pub fn is_alive(&self) -> bool {
        self.host.process.is_alive()
    }

    /// Records the configuration (a driver's fingerprint) the session's thread was
    /// opened with on this process.
    pub fn opened_with(&self, config: String) {
        *self.config.lock().unwrap_or_else(|e| e.into_inner()) = Some(config);
    }

    /// On a resume back on the process the session left, while it still runs: the
    /// configuration its thread was opened with there.
    pub fn home_config(&self) -> Option<&str> {
        self.home_config.as_deref()
    }

    /// Ends when this process does.
    pub fn parked(&self) -> Parked {
        self.host.ended.parked(self.host.id)
    }

    /// The process cannot be used (its handshake failed): no new session attaches, and it
    /// ends when its last session leaves.
    pub fn retire(&self) {
        if let Some(hosts) = self.hosts.upgrade() {
            hosts.remove(&self.host);
        }
    }

    /// A session could not be opened: when no other session uses the process, it is
    /// ended with the slot (as a lone session's failed start ends its process), so the
    /// next start meets a fresh one.
    pub fn failed(&self) {
        if self.host.lock().used <= 1 {
            self.retire();
        }
    }

    /// Gives the slot back: the route goes, and a process left without sessions ends after
    /// its idle time (at once when retired).
    pub fn release(&self) {
        if self.released.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Some(id) = self.route.lock().unwrap_or_else(|e| e.into_inner()).take() {
            self.host.routes.remove(&id);
            if let Some(hosts) = self.hosts.upgrade() {
                let mut left = hosts.left_lock();
                left.retain(|_, l| l.host.strong_count() > 0);
                let config = self.config.lock().unwrap_or_else(|e| e.into_inner()).take();
                left.insert(
                    id,
                    Left {
                        host: Arc::downgrade(&self.host),
                        config,
                    },
                );
            }
        }
        let (empty, generation, retired) = {
            let mut slots = self.host.lock();
            slots.used = slots.used.saturating_sub(1);
            self.host.routes.set_users(slots.used);
            (slots.used == 0, slots.generation, slots.retired)
        };
        if let Some(hosts) = self.hosts.upgrade() {
            hosts.released.send_modify(|n| *n = n.wrapping_add(1));
        }
        if !empty {
            return;
        }
        let host = Arc::clone(&self.host);
        if retired {
            end_process(host);
            return;
        }
        let Some(hosts) = self.hosts.upgrade() else {
            end_process(host);
            return;
        };
        let idle = hosts.limits.process_idle;
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        rt.spawn(async move {
            tokio::time::sleep(idle).await;
            if hosts.remove_if_idle(&host, generation) {
                host.conn.close().await;
                host.process.shutdown().await;
                host.ended.set();
            }
        });
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.release();
    }
}

/// The process a session runs in: its own, or a slot on a shared one.
#[derive(Debug)]
pub(crate) enum Attached {
    Own(AgentProcess),
    Shared(Lease),
}

impl Attached {
    pub fn is_alive(&self) -> bool {
        match self {
            Attached::Own(p) => p.is_alive(),
            Attached::Shared(lease) => lease.is_alive(),
        }
    }

    pub fn process_ref(&self) -> crate::driver::ProcessRef {
        match self {
            Attached::Own(p) => crate::driver::ProcessRef {
                shared: None,
                pid: p.pid(),
            },
            Attached::Shared(lease) => crate::driver::ProcessRef {
                shared: Some(lease.host.id),
                pid: lease.host.process.pid(),
            },
        }
    }

    /// Ends the session: cancels what waits for a person, then either closes the agent's
    /// stdin (`close`) and stops its own process, or tells the shared process the session
    /// leaves (`detach`, bounded by [`DETACH_WAIT`]) and gives the slot back. `unfinished`:
    /// the agent never ended the session's last prompt (it hung, and the caller gave up);
    /// a shared process is then retired, so the session's resume starts a fresh process
    /// instead of meeting its own wedged prompt (the others on it go on).
    pub async fn end(
        &self,
        cancels: &crate::turn::Cancels,
        close: impl Future<Output = ()>,
        detach: impl Future<Output = ()>,
        unfinished: bool,
    ) {
        match self {
            Attached::Own(p) => crate::turn::shutdown(cancels, close, p).await,
            Attached::Shared(lease) => {
                if unfinished {
                    tracing::warn!(
                        pid = ?lease.host.process.pid(),
                        "a session left a prompt the agent never ended: no new session \
                         attaches to this process"
                    );
                    lease.retire();
                }
                cancels.cancel_all();
                if lease.is_alive() {
                    let _ = tokio::time::timeout(DETACH_WAIT, detach).await;
                }
                lease.release();
            }
        }
    }
}

/// How long a leaving session waits for the shared process to acknowledge it.
pub(crate) const DETACH_WAIT: Duration = Duration::from_secs(2);
