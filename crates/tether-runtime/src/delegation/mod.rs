//! Delegation (architecture.md §7): a parent agent (through tether's MCP server) or a person hands
//! a task to another agent. The task is a `delegate` conversation with one session for
//! its whole life; its turns are versioned; continue/close are idempotent through the
//! continuation ledger (per parent conversation, persisted). This module creates tasks
//! and holds the shared checks; `registry` has the settings and the in-memory
//! state, `continuation` continues, `close` cancels and releases,
//! `status` reads, `watch` reports outcomes.

pub(crate) mod claims;
pub(crate) mod close;
pub(crate) mod continuation;
pub(crate) mod live_cap;
pub(crate) mod registry;
pub(crate) mod start;
pub(crate) mod status;
pub(crate) mod watch;
pub(crate) mod watch_list;

use tether_proto::{
    ConversationId, ConversationKind, ErrorCode, Session, SessionId, TaskId, TaskStarted,
    TaskStatus, TurnId, TurnStatus,
};
use tether_store::{DelegationRow, NewDelegation};

use crate::RuntimeError;
pub(crate) use crate::delegation::registry::Caller;
use crate::error::Result;
use crate::ids::new_id;
use crate::session::command::Enqueued;
use crate::session::ending::TurnEnding;

/// Largest accepted task or message, in bytes.
const MAX_TASK_BYTES: usize = 256 * 1024;
/// Largest accepted continuation id, in bytes.
const MAX_CONTINUATION_ID_BYTES: usize = 200;

pub(crate) fn err(code: ErrorCode, message: impl Into<String>) -> RuntimeError {
    RuntimeError::Delegation {
        code,
        message: message.into(),
    }
}

pub(crate) fn check_text(what: &str, text: &str) -> Result<String> {
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

/// The delegation service: tasks, their turns, continuation, close, status and reports. A
/// view of the runtime (cheap, `Copy`), reached through `Runtime::delegations()`.
#[derive(Clone, Copy)]
pub(crate) struct Delegations<'a> {
    pub(crate) rt: &'a crate::Runtime,
}

impl<'a> Delegations<'a> {
    pub(crate) fn new(rt: &'a crate::Runtime) -> Self {
        Delegations { rt }
    }
}

impl Delegations<'_> {
    /// The caller a per-session MCP token stands for (`None`: unknown token).
    pub(crate) fn mcp_caller(&self, token: &str) -> Option<Caller> {
        self.rt.ctx().delegation.caller_for_token(token)
    }

    /// Whether the MCP endpoints let a connection with `token` in: a live session's token,
    /// or one reserved for a spare agent process that has no session yet (it may list the
    /// tools; its calls are refused until a session adopts it).
    pub(crate) fn mcp_admits(&self, token: &str) -> bool {
        self.rt.ctx().delegation.admits(token)
    }

    /// The daemon begins to shut down: waits of `get_delegation_status` end now (with
    /// the snapshots as they are), so they never hold the shutdown up. Idempotent.
    pub(crate) fn begin_shutdown(&self) {
        self.rt.ctx().delegation.stopping().cancel();
    }

    /// Fails with `rebuilding` while start-up recovery of delegations runs.
    pub(crate) fn delegation_gate(&self) -> Result<()> {
        if self.rt.ctx().delegation.is_ready() {
            Ok(())
        } else {
            Err(err(
                ErrorCode::Rebuilding,
                "tether is recovering delegated tasks after a restart; retry in a moment",
            ))
        }
    }

    /// [`Self::delegation_gate`], and refuses a session whose conversation was archived
    /// (`conversation_archived`): an archived conversation's agents delegate no more.
    pub(crate) async fn caller_gate(&self, caller: &Caller) -> Result<()> {
        self.delegation_gate()?;
        if let Caller::Session {
            conversation_id, ..
        } = caller
        {
            let conv = self
                .rt
                .conversations()
                .conversation_row(conversation_id)
                .await?;
            if conv.archived {
                return Err(RuntimeError::Archived(conversation_id.clone()));
            }
        }
        Ok(())
    }

    /// `delegate_to_agent`: creates the task and starts its first turn; returns at once.
    pub(crate) async fn delegate_here(
        &self,
        caller: &Caller,
        owner: &tether_proto::PersonId,
        agent_type: &str,
        task: &str,
        working_dir: Option<&str>,
        tool_call_id: Option<&str>,
    ) -> Result<TaskStarted> {
        self.caller_gate(caller).await?;
        let cfg = &self.rt.ctx().config;
        let dcfg = self.rt.ctx().delegation.config();
        let (parent_conv, parent_session) = match caller {
            Caller::Session {
                conversation_id,
                session_id,
            } => (
                Some(
                    self.rt
                        .conversations()
                        .conversation_row(conversation_id)
                        .await?,
                ),
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
                    self.rt.agent_names().join(", ")
                ),
            ));
        }
        let cwd = match working_dir.map(str::trim).filter(|w| !w.is_empty()) {
            Some(w) => crate::cwd::validate(w, cfg)
                .map_err(|e| err(ErrorCode::InvalidWorkingDir, e.to_string()))?,
            None => match &parent_conv {
                Some(p) => p.cwd.clone(),
                None => cfg.default_cwd.display().to_string(),
            },
        };
        let parent_depth = match &parent_conv {
            Some(p) if p.kind == ConversationKind::Delegate => self
                .rt
                .ctx()
                .store
                .delegation()
                .get_delegation(&TaskId::of_conversation(&p.id))
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
        let _cap_guard = self.lock_task_scope(parent_id.as_ref()).await;
        self.check_running_children(parent_id.as_ref()).await?;
        let parent_turn_id = match (&parent_id, &parent_session) {
            (Some(p), Some(s)) => self.running_turn_of(p, s).await?,
            _ => None,
        };
        let task_id: TaskId = new_id();
        // The task of an isolated parent works in a worktree branched from the parent's
        // state (issue 32), unless the caller named a directory.
        let isolated = match (
            &parent_conv,
            working_dir.map(str::trim).filter(|w| !w.is_empty()),
        ) {
            (Some(p), None) => {
                self.rt
                    .worktrees()
                    .for_child(&p.id, &task_id.conversation_id())
                    .await?
            }
            _ => None,
        };
        let cwd = isolated.as_ref().map_or(cwd, |w| w.path.clone());
        let d = NewDelegation {
            task_id,
            title: title_of(&task),
            parent_conversation_id: parent_id,
            parent_session_id: parent_session,
            parent_turn_id,
            parent_tool_call_id: tool_call_id.map(str::to_string),
            depth,
            agent: agent_type.to_string(),
            cwd: cwd.clone(),
            task: task.clone(),
            session_id: new_id(),
            turn_id: new_id(),
            owner_id: Some(owner.clone()),
        };
        let created = self.rt.ctx().store.delegation().create_delegation(&d).await;
        if let Err(e) = created {
            if let Some(w) = &isolated {
                crate::worktree::abandon(w).await;
            }
            return Err(e.into());
        }
        if let Some(w) = &isolated {
            let store = &self.rt.ctx().store;
            store.worktrees().save_worktree(w).await?;
            store
                .worktrees()
                .set_isolated(&w.conversation_id, true)
                .await?;
        }
        // Followed before its turn can run, so its end is reported.
        self.watch_task(&d.task_id).await?;
        // Here, or on another node when this one is at its cap (issue 12).
        self.start_task(&d.task_id, &d.turn_id).await?;
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
    pub(crate) async fn running_turn_of(
        &self,
        conv: &ConversationId,
        session: &SessionId,
    ) -> Result<Option<TurnId>> {
        let open = self.rt.ctx().store.conversations().open_turns(conv).await?;
        Ok(open
            .into_iter()
            .find(|t| t.session_id == *session && t.status != TurnStatus::Queued)
            .map(|t| t.id))
    }

    pub(crate) async fn enqueue_task_turn(
        &self,
        session: &Session,
        owner: &ConversationId,
        turn_id: &TurnId,
        input: &str,
    ) -> Result<()> {
        let res = self
            .enqueue_task_turn_inner(session, owner, turn_id, input)
            .await;
        if let Err(e) = &res {
            self.fail_unstarted_task(turn_id, e).await;
        }
        res
    }

    /// Never leaves a stored turn that will not run: fails it with `e` (nothing changes
    /// when it ended already).
    pub(crate) async fn fail_unstarted_task(&self, turn_id: &TurnId, e: &RuntimeError) {
        let ending = TurnEnding::unstarted(e.code(), e.to_string());
        if let Err(e) = ending.record(self.rt.ctx(), turn_id, &[]).await {
            tracing::error!(%turn_id, error = %e, "cannot fail an unstarted task turn");
        }
    }

    async fn enqueue_task_turn_inner(
        &self,
        session: &Session,
        owner: &ConversationId,
        turn_id: &TurnId,
        input: &str,
    ) -> Result<()> {
        let to = crate::session::actors::To::Session { session, owner };
        let enqueued = self.rt.router().actor(to).enqueue(turn_id, input).await?;
        match enqueued {
            Some(Enqueued::Started | Enqueued::Queued(_)) => Ok(()),
            Some(Enqueued::Full(cap)) => Err(RuntimeError::QueueFull { cap }),
            None => Err(RuntimeError::Internal("session actor is gone".to_string())),
        }
    }

    /// The task if the caller may see it: a session sees its conversation's children, an
    /// external client the tasks without a parent, a person every task.
    pub(crate) async fn visible_task(
        &self,
        caller: &Caller,
        task_id: &TaskId,
    ) -> Result<Option<DelegationRow>> {
        let Some(row) = self
            .rt
            .ctx()
            .store
            .delegation()
            .get_delegation(task_id)
            .await?
        else {
            return Ok(None);
        };
        let visible = match caller {
            Caller::Session {
                conversation_id, ..
            } => row.parent_conversation_id.as_ref() == Some(conversation_id),
            Caller::External => row.parent_conversation_id.is_none(),
            Caller::Person => true,
        };
        // And the person acting may read it (issue 28): someone else's private task is
        // unknown to them, like one that does not exist.
        if !visible {
            return Ok(None);
        }
        match self.rt.access().read(&task_id.conversation_id()).await {
            Ok(()) => Ok(Some(row)),
            Err(RuntimeError::NotFound { .. } | RuntimeError::Denied(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub(crate) async fn task_or_not_found(
        &self,
        caller: &Caller,
        task_id: &TaskId,
    ) -> Result<DelegationRow> {
        self.visible_task(caller, task_id)
            .await?
            .ok_or_else(|| RuntimeError::NotFound {
                what: "delegated task",
                id: task_id.to_string(),
            })
    }
}
