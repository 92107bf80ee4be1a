//! Delegation (DESIGN §8): a parent agent (through tether's MCP server) or a person hands
//! a task to another agent. The task is a `delegate` conversation with one session for
//! its whole life; its turns are versioned; continue/close are idempotent through the
//! continuation ledger (per parent conversation, persisted). This module holds the
//! settings, the per-session MCP credentials, and the write side (delegate, continue,
//! close, cancel); `delegation_status` reads, `delegation_watch` reports outcomes.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use tether_agents::McpServer;
use tether_proto::{
    Availability, ConversationKind, ErrorCode, Session, TaskStarted, TaskStatus, TurnOrigin,
    TurnStatus,
};
use tether_store::{DelegationRow, NewDelegation};

use crate::actor::{ActorCmd, Enqueued};
use crate::api::Result;
use crate::ctx::new_id;
use crate::{Runtime, RuntimeError};

/// Largest accepted task or message, in bytes.
const MAX_TASK_BYTES: usize = 256 * 1024;
/// Largest accepted continuation id, in bytes.
const MAX_CONTINUATION_ID_BYTES: usize = 200;

/// Delegation settings (`[delegation]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelegationConfig {
    /// How deep delegation may nest: 1 = a person's agent may delegate, its children may
    /// not (1..=8).
    pub max_depth: u32,
    /// Children of one parent conversation that may run a turn at once (0 = no limit).
    pub max_running_children: usize,
    /// How agents reach tether's MCP server; `None`: no server is injected.
    pub mcp: Option<McpLaunch>,
}

impl Default for DelegationConfig {
    fn default() -> Self {
        DelegationConfig {
            max_depth: 1,
            max_running_children: 4,
            mcp: None,
        }
    }
}

/// The stdio companion every launched agent gets as MCP server `tether`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpLaunch {
    /// The companion program (the `tether` binary) and its arguments (`["mcp"]`).
    pub command: String,
    pub args: Vec<String>,
    /// The daemon's local socket (in a 0700 directory).
    pub socket: PathBuf,
}

/// Environment variable naming the daemon's MCP socket (for `tether mcp`).
pub const MCP_SOCKET_ENV: &str = "TETHER_MCP_SOCKET";
/// Environment variable carrying the per-session MCP token (for `tether mcp`).
pub const MCP_TOKEN_ENV: &str = "TETHER_MCP_TOKEN";
/// Name of the MCP server tether injects.
pub const MCP_SERVER_NAME: &str = "tether";

/// Who calls a delegation operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// An agent session tether launched, through its MCP token.
    Session {
        conversation_id: String,
        session_id: String,
    },
    /// An MCP client holding the API token: its tasks have no parent conversation.
    External,
    /// A person through the API or the web page: may act on any task.
    Person,
}

impl Caller {
    /// Who this caller is, for remembering what it was told.
    pub(crate) fn scope(&self) -> String {
        match self {
            Caller::Session {
                conversation_id, ..
            } => conversation_id.clone(),
            Caller::External => tether_store::EXTERNAL_SCOPE.to_string(),
            Caller::Person => "person".to_string(),
        }
    }
}

/// In-memory delegation state: MCP tokens of launched sessions and the readiness gate.
pub(crate) struct Registry {
    config: DelegationConfig,
    /// token → (conversation id, session id).
    tokens: Mutex<HashMap<String, (String, String)>>,
    /// Session id → its token.
    by_session: Mutex<HashMap<String, String>>,
    ready: AtomicBool,
    /// (caller scope, task id) → the blocking request last reported to that caller, so
    /// a wait can return on a block the caller has not seen yet.
    reported_blocks: Mutex<HashMap<(String, String), String>>,
}

impl Registry {
    pub fn new(config: DelegationConfig) -> Registry {
        Registry {
            config,
            tokens: Mutex::new(HashMap::new()),
            by_session: Mutex::new(HashMap::new()),
            ready: AtomicBool::new(false),
            reported_blocks: Mutex::new(HashMap::new()),
        }
    }

    pub fn config(&self) -> &DelegationConfig {
        &self.config
    }

    /// The MCP servers to give an agent starting `session`: tether's companion with
    /// this session's token in its environment (never in argv).
    pub fn mcp_servers(&self, session: &Session) -> Vec<McpServer> {
        let Some(launch) = &self.config.mcp else {
            return Vec::new();
        };
        let token = {
            let mut by_session = self.by_session.lock().unwrap_or_else(|e| e.into_inner());
            by_session
                .entry(session.id.clone())
                .or_insert_with(|| format!("{}{}", new_id(), new_id()))
                .clone()
        };
        self.tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                token.clone(),
                (session.conversation_id.clone(), session.id.clone()),
            );
        let env = BTreeMap::from([
            (
                MCP_SOCKET_ENV.to_string(),
                launch.socket.display().to_string(),
            ),
            (MCP_TOKEN_ENV.to_string(), token),
        ]);
        vec![McpServer {
            name: MCP_SERVER_NAME.to_string(),
            command: launch.command.clone(),
            args: launch.args.clone(),
            env,
        }]
    }

    /// The caller a per-session MCP token stands for.
    pub fn caller_for_token(&self, token: &str) -> Option<Caller> {
        let tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        tokens.get(token).map(|(c, s)| Caller::Session {
            conversation_id: c.clone(),
            session_id: s.clone(),
        })
    }

    /// Forgets a released session's token.
    pub fn revoke(&self, session_id: &str) {
        let token = self
            .by_session
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(session_id);
        if let Some(t) = token {
            self.tokens
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&t);
        }
    }

    /// The blocking request last reported to `scope` for `task_id`.
    pub fn reported_block(&self, scope: &str, task_id: &str) -> Option<String> {
        let map = self
            .reported_blocks
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        map.get(&(scope.to_string(), task_id.to_string())).cloned()
    }

    /// Remembers what was reported to `scope` (`None`: not blocked).
    pub fn set_reported_block(&self, scope: &str, task_id: &str, request: Option<&str>) {
        let mut map = self
            .reported_blocks
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let key = (scope.to_string(), task_id.to_string());
        match request {
            Some(r) => {
                map.insert(key, r.to_string());
            }
            None => {
                map.remove(&key);
            }
        }
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }
}

pub(crate) fn err(code: ErrorCode, message: impl Into<String>) -> RuntimeError {
    RuntimeError::Delegation {
        code,
        message: message.into(),
    }
}

fn check_text(what: &str, text: &str) -> Result<String> {
    let t = text.trim();
    if t.is_empty() {
        return Err(err(
            ErrorCode::InvalidTask,
            format!("{what} must not be empty"),
        ));
    }
    if t.len() > MAX_TASK_BYTES {
        return Err(err(
            ErrorCode::InvalidTask,
            format!("{what} is longer than {MAX_TASK_BYTES} bytes"),
        ));
    }
    Ok(t.to_string())
}

pub(crate) fn check_continuation_id(id: &str) -> Result<()> {
    if id.trim().is_empty() || id.len() > MAX_CONTINUATION_ID_BYTES {
        return Err(RuntimeError::BadRequest(format!(
            "continuation_id must be 1..={MAX_CONTINUATION_ID_BYTES} bytes"
        )));
    }
    Ok(())
}

fn title_of(task: &str) -> String {
    let first = task.lines().next().unwrap_or(task);
    let mut t: String = first.chars().take(80).collect();
    if t.len() < first.len() {
        t.push('…');
    }
    t
}

impl Runtime {
    /// The caller a per-session MCP token stands for (`None`: unknown token).
    pub fn mcp_caller(&self, token: &str) -> Option<Caller> {
        self.ctx().delegation.caller_for_token(token)
    }

    /// Fails with `rebuilding` while start-up recovery of delegations runs.
    pub(crate) fn delegation_gate(&self) -> Result<()> {
        if self.ctx().delegation.is_ready() {
            Ok(())
        } else {
            Err(err(
                ErrorCode::Rebuilding,
                "tether is recovering delegated tasks after a restart; retry in a moment",
            ))
        }
    }

    /// `delegate_to_agent`: creates the task and starts its first turn; returns at once.
    pub async fn delegate(
        &self,
        caller: &Caller,
        agent_type: &str,
        task: &str,
        working_dir: Option<&str>,
        tool_call_id: Option<&str>,
    ) -> Result<TaskStarted> {
        self.delegation_gate()?;
        let cfg = &self.ctx().config;
        let dcfg = self.ctx().delegation.config();
        let (parent_conv, parent_session) = match caller {
            Caller::Session {
                conversation_id,
                session_id,
            } => (
                Some(self.conversation_row(conversation_id).await?),
                Some(session_id.clone()),
            ),
            Caller::External | Caller::Person => (None, None),
        };
        let task = check_text("task", task)?;
        if !cfg.agents.contains_key(agent_type) {
            return Err(err(
                ErrorCode::InvalidAgentType,
                format!(
                    "unknown agent_type {agent_type:?}; configured agents: {}",
                    self.agent_names().join(", ")
                ),
            ));
        }
        let cwd = match working_dir.map(str::trim).filter(|w| !w.is_empty()) {
            Some(w) => crate::cwd::validate(w, &cfg.workspace_roots)
                .map_err(|e| err(ErrorCode::InvalidWorkingDir, e.to_string()))?,
            None => match &parent_conv {
                Some(p) => p.cwd.clone(),
                None => cfg.default_cwd.display().to_string(),
            },
        };
        let parent_depth = match &parent_conv {
            Some(p) if p.kind == ConversationKind::Delegate => self
                .ctx()
                .store
                .get_delegation(&p.id)
                .await?
                .map(|d| d.depth)
                .unwrap_or(1),
            _ => 0,
        };
        let depth = parent_depth + 1;
        if depth > dcfg.max_depth {
            return Err(err(
                ErrorCode::DepthLimit,
                format!(
                    "delegation depth limit reached: this session is at depth {parent_depth} \
                     and the limit is {}; do the work yourself",
                    dcfg.max_depth
                ),
            ));
        }
        let parent_id = parent_conv.as_ref().map(|p| p.id.clone());
        let _cap_guard = match &parent_id {
            Some(p) => Some(self.lock_conversation(&format!("delegations:{p}")).await),
            None => None,
        };
        if let Some(p) = &parent_id
            && dcfg.max_running_children > 0
        {
            let running = self.ctx().store.running_children(p).await?;
            if running >= dcfg.max_running_children {
                return Err(err(
                    ErrorCode::ConcurrencyLimit,
                    format!(
                        "{running} delegated tasks of this conversation are still running \
                         (limit {}); collect or cancel one first",
                        dcfg.max_running_children
                    ),
                ));
            }
        }
        let parent_turn_id = match (&parent_id, &parent_session) {
            (Some(p), Some(s)) => self.running_turn_of(p, s).await?,
            _ => None,
        };
        let d = NewDelegation {
            task_id: new_id(),
            title: title_of(&task),
            parent_conversation_id: parent_id.clone(),
            parent_session_id: parent_session,
            parent_turn_id,
            parent_tool_call_id: tool_call_id.map(str::to_string),
            depth,
            agent: agent_type.to_string(),
            cwd: cwd.clone(),
            task: task.clone(),
            session_id: new_id(),
            turn_id: new_id(),
        };
        let (session, events) = self.ctx().store.create_delegation(&d).await?;
        self.ctx().publish(events);
        let owner = parent_id.unwrap_or_else(|| d.task_id.clone());
        self.enqueue_task_turn(&session, &owner, &d.turn_id, &task)
            .await?;
        Ok(TaskStarted {
            task_id: d.task_id,
            status: TaskStatus::Running,
            turn_version: 1,
            turn_id: d.turn_id,
            agent_type: d.agent,
            working_dir: cwd,
        })
    }

    /// The running (not queued) turn of a session in a conversation.
    async fn running_turn_of(&self, conv: &str, session: &str) -> Result<Option<String>> {
        let open = self.ctx().store.open_turns(conv).await?;
        Ok(open
            .into_iter()
            .find(|t| t.session_id == session && t.status != TurnStatus::Queued)
            .map(|t| t.id))
    }

    async fn enqueue_task_turn(
        &self,
        session: &Session,
        owner: &str,
        turn_id: &str,
        input: &str,
    ) -> Result<()> {
        let res = self
            .enqueue_task_turn_inner(session, owner, turn_id, input)
            .await;
        if let Err(e) = &res {
            // Never leave a stored turn that will not run.
            let message = e.to_string();
            let end = tether_store::TurnEnd {
                status: TurnStatus::Failed,
                result_text: None,
                stop_reason: None,
                error: Some((e.code(), message.clone())),
                usage: None,
            };
            let ev = tether_proto::EventPayload::TurnFailed {
                code: e.code(),
                message,
            };
            if let Ok(Some(ev)) = self.ctx().store.finish_turn(turn_id, &end, &ev, None).await {
                self.ctx().publish([ev]);
            }
        }
        res
    }

    async fn enqueue_task_turn_inner(
        &self,
        session: &Session,
        owner: &str,
        turn_id: &str,
        input: &str,
    ) -> Result<()> {
        let actor = self.actor(session, owner)?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let cmd = ActorCmd::Enqueue {
            turn_id: turn_id.to_string(),
            input: input.to_string(),
            reply: tx,
        };
        if actor.tx.send(cmd).is_err() {
            return Err(RuntimeError::Internal("session actor is gone".to_string()));
        }
        match rx.await {
            Ok(Enqueued::Started | Enqueued::Queued(_)) => Ok(()),
            Ok(Enqueued::Full(cap)) => Err(RuntimeError::QueueFull { cap }),
            Err(_) => Err(RuntimeError::Internal("session actor is gone".to_string())),
        }
    }

    /// The task if the caller may see it: a session sees its conversation's children, an
    /// external client the tasks without a parent, a person every task.
    pub(crate) async fn visible_task(
        &self,
        caller: &Caller,
        task_id: &str,
    ) -> Result<Option<DelegationRow>> {
        let Some(row) = self.ctx().store.get_delegation(task_id).await? else {
            return Ok(None);
        };
        let visible = match caller {
            Caller::Session {
                conversation_id, ..
            } => row.parent_conversation_id.as_deref() == Some(conversation_id),
            Caller::External => row.parent_conversation_id.is_none(),
            Caller::Person => true,
        };
        Ok(visible.then_some(row))
    }

    pub(crate) async fn task_or_not_found(
        &self,
        caller: &Caller,
        task_id: &str,
    ) -> Result<DelegationRow> {
        self.visible_task(caller, task_id)
            .await?
            .ok_or_else(|| RuntimeError::NotFound {
                what: "delegated task",
                id: task_id.to_string(),
            })
    }

    /// `continue_with_session` and `POST .../continue`: a new turn in the same child
    /// session. Idempotent by `continuation_id` within the task's parent conversation.
    pub async fn continue_task(
        &self,
        caller: &Caller,
        task_id: &str,
        message: &str,
        continuation_id: &str,
    ) -> Result<TaskStarted> {
        self.delegation_gate()?;
        let row = self.task_or_not_found(caller, task_id).await?;
        let _guard = self.lock_conversation(task_id).await;
        let origin = match caller {
            Caller::Person => TurnOrigin::Person,
            Caller::Session { .. } | Caller::External => TurnOrigin::Parent,
        };
        let parent_turn = match caller {
            Caller::Session {
                conversation_id,
                session_id,
            } => self.running_turn_of(conversation_id, session_id).await?,
            Caller::External | Caller::Person => None,
        };
        self.continue_locked(&row, message, Some(continuation_id), origin, parent_turn)
            .await
    }

    /// The body of a continuation, under the task's lock. `continuation_id` `None`: a
    /// person's plain message (no ledger entry).
    pub(crate) async fn continue_locked(
        &self,
        row: &DelegationRow,
        message: &str,
        continuation_id: Option<&str>,
        origin: TurnOrigin,
        parent_turn_id: Option<String>,
    ) -> Result<TaskStarted> {
        let store = &self.ctx().store;
        if let Some(cid) = continuation_id {
            check_continuation_id(cid)?;
            if let Some(e) = store.ledger_entry(row.scope(), cid).await? {
                let same = e.task_id == row.task_id
                    && e.action == "continue"
                    && e.message.as_deref() == Some(message.trim());
                if !same {
                    return Err(conflict(cid, &e));
                }
                return serde_json::from_value(e.result)
                    .map_err(|e| RuntimeError::Internal(format!("corrupt ledger entry: {e}")));
            }
        }
        let message = check_text("message", message)?;
        match self.availability(row).await? {
            Availability::Released => return Err(released(&row.task_id)),
            Availability::Running => {
                return Err(err(
                    ErrorCode::SessionStillRunning,
                    format!(
                        "task {} is still running a turn; wait for it with \
                         get_delegation_status (or cancel it) before continuing",
                        row.task_id
                    ),
                ));
            }
            Availability::NotContinuable => {
                return Err(err(
                    ErrorCode::NotContinuable,
                    format!(
                        "task {} can not be continued: its agent never started a session \
                         (or is no longer configured); delegate a new task instead",
                        row.task_id
                    ),
                ));
            }
            Availability::ContinuableLive | Availability::ContinuableResume => {}
        }
        let session = self.get_session(&row.session_id).await?;
        let owner = row
            .parent_conversation_id
            .clone()
            .unwrap_or_else(|| row.task_id.clone());
        let actor = self.actor(&session, &owner)?;
        // Make the session live first (strict resume): a failure changes nothing.
        let (tx, rx) = tokio::sync::oneshot::channel();
        if actor.tx.send(ActorCmd::EnsureLive { reply: tx }).is_err() {
            return Err(RuntimeError::Internal("session actor is gone".to_string()));
        }
        match rx.await {
            Ok(Ok(())) => {}
            Ok(Err((_, msg))) => {
                return Err(err(
                    ErrorCode::ResumeUnavailable,
                    format!(
                        "cannot resume the child's session, nothing was sent: {msg}. \
                         Delegate a new task instead"
                    ),
                ));
            }
            Err(_) => return Err(RuntimeError::Internal("session actor is gone".to_string())),
        }
        let turn_id = new_id();
        let started = |version: i64| TaskStarted {
            task_id: row.task_id.clone(),
            status: TaskStatus::Running,
            turn_version: version,
            turn_id: turn_id.clone(),
            agent_type: row.agent.clone(),
            working_dir: row.cwd.clone(),
        };
        let ledger = match continuation_id {
            Some(cid) => Some(tether_store::LedgerEntry {
                scope: row.scope().to_string(),
                continuation_id: cid.to_string(),
                task_id: row.task_id.clone(),
                action: "continue".to_string(),
                message: Some(message.clone()),
                result: serde_json::to_value(started(0))
                    .map_err(|e| RuntimeError::Internal(e.to_string()))?,
            }),
            None => None,
        };
        let version = store
            .add_delegation_turn(
                &tether_store::NewDelegationTurn {
                    task_id: row.task_id.clone(),
                    session_id: row.session_id.clone(),
                    turn_id: turn_id.clone(),
                    message: message.clone(),
                    origin,
                    parent_turn_id,
                },
                ledger.as_ref(),
            )
            .await?;
        self.enqueue_task_turn(&session, &owner, &turn_id, &message)
            .await?;
        Ok(started(version))
    }
}

pub(crate) fn released(task_id: &str) -> RuntimeError {
    err(
        ErrorCode::SessionReleased,
        format!("task {task_id} was closed (released); delegate a new task instead"),
    )
}

fn conflict(cid: &str, e: &tether_store::LedgerEntry) -> RuntimeError {
    err(
        ErrorCode::ContinuationConflict,
        format!(
            "continuation_id {cid:?} was already used for a {} of task {} with other \
             arguments; use a new continuation_id for a new request",
            e.action, e.task_id
        ),
    )
}
