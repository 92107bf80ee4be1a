//! The Claude warm spare (issue 15): Claude's stream-json mode hosts one session per
//! process, so its sessions cannot share a process as Codex and ACP ones do. Instead one
//! process per Claude agent is started ahead of need, in the default working directory
//! with the agent's default model and a reserved MCP token, and initialised; a **new**
//! session of that agent with the same working directory, model, environment and MCP
//! servers takes it (its session id becomes the session's external id, its token becomes
//! the session's) and a replacement starts at once. A resume never takes it: `--resume
//! <id>` is a start-up argument of the process, and stream-json cannot switch sessions.
//! Spares end with the daemon.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use tether_agents::{AgentDriver, AgentSession, DriverKind, StartRequest};
use tether_proto::PoolSpare;

use crate::RuntimeConfig;
use crate::delegation::registry::{Registry, token_in, without_token};

/// The spares of a daemon (none unless `[pool] claude_spare`).
pub(crate) struct Spares {
    inner: Arc<Inner>,
}

struct Inner {
    driver: Arc<dyn AgentDriver>,
    registry: Arc<Registry>,
    /// Per Claude agent: what its spare is started with (the MCP servers without token;
    /// the working directory as configured, checked again at each start).
    templates: BTreeMap<String, StartRequest>,
    config: RuntimeConfig,
    slots: Mutex<HashMap<String, Slot>>,
    stopped: std::sync::atomic::AtomicBool,
}

enum Slot {
    /// Being started.
    Starting,
    Ready {
        session: Box<dyn AgentSession>,
        /// The start request it was started with (working directory checked).
        req: Box<StartRequest>,
        token: Option<String>,
    },
    /// The last start failed (logged); the next session of the agent starts another.
    Failed,
}

impl Spares {
    pub fn new(
        driver: Arc<dyn AgentDriver>,
        registry: Arc<Registry>,
        config: &RuntimeConfig,
        ceiling: Option<&tether_agents::ProcessCeiling>,
    ) -> Spares {
        let templates = if config.pool.claude_spare {
            config
                .agents
                .values()
                .filter(|spec| spec.driver == DriverKind::Claude)
                .map(|spec| {
                    let req = StartRequest {
                        spec: spec.clone(),
                        cwd: config.default_cwd.clone(),
                        model: None,
                        resume: None,
                        mcp_servers: Vec::new(),
                        ceiling: ceiling.cloned(),
                    };
                    (spec.name.clone(), req)
                })
                .collect()
        } else {
            BTreeMap::new()
        };
        Spares {
            inner: Arc::new(Inner {
                driver,
                registry,
                templates,
                config: config.clone(),
                slots: Mutex::new(HashMap::new()),
                stopped: std::sync::atomic::AtomicBool::new(false),
            }),
        }
    }

    /// Starts a spare for every Claude agent (daemon start-up).
    pub fn fill(&self) {
        for agent in self.inner.templates.keys() {
            Inner::refill(&self.inner, agent);
        }
    }

    /// The ready spare for `req` (already checked: its working directory is canonical),
    /// if `req` is a new session that matches it; a replacement starts at once. The
    /// session's MCP token is swapped for the spare's.
    pub fn take(&self, req: &StartRequest) -> Option<Box<dyn AgentSession>> {
        if req.resume.is_some() || !self.inner.templates.contains_key(&req.spec.name) {
            return None;
        }
        let taken = {
            let mut slots = self.inner.lock();
            match slots.get(&req.spec.name) {
                Some(Slot::Ready { req: spare, .. }) if same_start(spare, req) => {
                    slots.remove(&req.spec.name)
                }
                Some(Slot::Ready { .. } | Slot::Starting) => return None,
                Some(Slot::Failed) | None => {
                    drop(slots);
                    Inner::refill(&self.inner, &req.spec.name);
                    return None;
                }
            }
        };
        let Some(Slot::Ready { session, token, .. }) = taken else {
            return None;
        };
        Inner::refill(&self.inner, &req.spec.name);
        if !session.is_alive() {
            tracing::warn!(agent = %req.spec.name, "the warm spare had exited; starting cold");
            self.inner.discard(session, token);
            return None;
        }
        if let (Some(reserved), Some(own)) = (&token, token_in(&req.mcp_servers))
            && !self.inner.registry.adopt(own, reserved)
        {
            // The session's token is gone (revoked meanwhile): the spare cannot serve it.
            self.inner.discard(session, token);
            return None;
        }
        tracing::debug!(agent = %req.spec.name, "a new session takes the warm spare");
        Some(session)
    }

    /// The spares now, for `GET /api/v1/pool`.
    pub fn views(&self) -> Vec<PoolSpare> {
        let slots = self.inner.lock();
        let mut out: Vec<PoolSpare> = slots
            .iter()
            .map(|(agent, slot)| {
                let pid = match slot {
                    Slot::Ready { session, .. } => session.process().pid,
                    Slot::Starting | Slot::Failed => None,
                };
                PoolSpare {
                    agent: agent.clone(),
                    pid,
                    ready: matches!(slot, Slot::Ready { .. }),
                    rss_bytes: pid.and_then(tether_agents::host::group_rss_bytes),
                }
            })
            .collect();
        out.sort_by(|a, b| a.agent.cmp(&b.agent));
        out
    }

    /// Ends every spare (daemon shutdown); none starts after this.
    pub async fn shutdown(&self) {
        self.inner
            .stopped
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let slots: Vec<Slot> = self.inner.lock().drain().map(|(_, s)| s).collect();
        for slot in slots {
            if let Slot::Ready { session, token, .. } = slot {
                session.shutdown().await;
                if let Some(t) = token {
                    self.inner.registry.unreserve(&t);
                }
            }
        }
    }
}

/// Whether a session started with `req` can take a spare started with `spare`: a new
/// session of the same agent configuration (command, arguments, environment), working
/// directory, model and MCP servers (tokens aside).
fn same_start(spare: &StartRequest, req: &StartRequest) -> bool {
    req.resume.is_none()
        && spare.spec == req.spec
        && spare.cwd == req.cwd
        && spare.model == req.model
        && without_token(&spare.mcp_servers) == without_token(&req.mcp_servers)
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Slot>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn stopped(&self) -> bool {
        self.stopped.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Starts a spare for `agent` in a task, unless one is ready or starting.
    fn refill(inner: &Arc<Inner>, agent: &str) {
        let Some(template) = inner.templates.get(agent) else {
            return;
        };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        {
            let mut slots = inner.lock();
            if inner.stopped()
                || matches!(slots.get(agent), Some(Slot::Ready { .. } | Slot::Starting))
            {
                return;
            }
            slots.insert(agent.to_owned(), Slot::Starting);
        }
        let mut req = template.clone();
        let inner = Arc::clone(inner);
        let agent = agent.to_owned();
        rt.spawn(async move {
            let checked = crate::cwd::recheck(&req.cwd, &inner.config);
            let started = match checked {
                Ok(cwd) => {
                    req.cwd = cwd;
                    req.mcp_servers = inner.registry.reserved_servers();
                    inner.driver.start(req.clone()).await
                }
                Err(e) => Err(e),
            };
            let token = token_in(&req.mcp_servers).map(str::to_owned);
            match started {
                Ok(session) => {
                    let mut slots = inner.lock();
                    // Under the lock: a shutdown that began meanwhile has drained the
                    // slots already and would never end this one.
                    if inner.stopped() {
                        drop(slots);
                        inner.discard(session, token);
                        return;
                    }
                    tracing::debug!(%agent, pid = ?session.process().pid, "warm spare ready");
                    slots.insert(
                        agent,
                        Slot::Ready {
                            session,
                            req: Box::new(req),
                            token,
                        },
                    );
                }
                Err(e) => {
                    tracing::warn!(%agent, error = %e,
                        "cannot start the warm spare; the next session of this agent tries again");
                    if let Some(t) = token {
                        inner.registry.unreserve(&t);
                    }
                    inner.lock().insert(agent, Slot::Failed);
                }
            }
        });
    }

    /// Ends a spare that will not be used, in a task.
    fn discard(&self, session: Box<dyn AgentSession>, token: Option<String>) {
        if let Some(t) = token {
            self.registry.unreserve(&t);
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move { session.shutdown().await });
        }
    }
}
