//! Continuing a delegated task: a new turn in the same child session, idempotent by
//! `continuation_id` within the task's parent conversation; a dormant session is
//! resumed strictly first, so a failed resume changes nothing.

use tether_proto::{
    Availability, ConversationId, ErrorCode, TaskId, TaskStarted, TaskStatus, TurnId, TurnOrigin,
};
use tether_store::DelegationRow;

use crate::RuntimeError;
use crate::delegation::Delegations;
use crate::delegation::registry::Caller;
use crate::delegation::{check_continuation_id, check_text, err};
use crate::error::Result;
use crate::ids::new_id;

/// The ledger's id for a person's plain message in a delegated conversation: its turn's.
pub(crate) fn person_continuation_id(turn_id: &TurnId) -> String {
    format!("person:{turn_id}")
}

fn still_running(task_id: &TaskId) -> RuntimeError {
    err(
        ErrorCode::SessionStillRunning,
        format!(
            "task {task_id} is still running a turn; wait for it with \
             get_delegation_status (or cancel it) before continuing"
        ),
    )
}

/// A failure to make the child live keeps its own code: `spawn_failed` (cannot start),
/// `start_timeout`, `session_still_running` (busy); only a refused or mismatched resume
/// is `resume_unavailable`.
fn not_live(task_id: &TaskId, code: ErrorCode, msg: &str) -> RuntimeError {
    if code == ErrorCode::SessionStillRunning {
        return still_running(task_id);
    }
    let message = if code == ErrorCode::ResumeUnavailable {
        format!(
            "cannot resume the child's session, nothing was sent: {msg}. \
             Delegate a new task instead"
        )
    } else {
        format!("cannot start the child's agent, nothing was sent: {msg}")
    };
    err(code, message)
}

pub(crate) fn released(task_id: &TaskId) -> RuntimeError {
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

impl Delegations<'_> {
    pub(crate) async fn continue_here(
        &self,
        caller: &Caller,
        task_id: &TaskId,
        message: &str,
        continuation_id: &str,
    ) -> Result<TaskStarted> {
        self.caller_gate(caller).await?;
        check_continuation_id(continuation_id)?;
        let row = self.task_or_not_found(caller, task_id).await?;
        // The continuation id first (one request per id at a time, whatever its task),
        // then the task: the ledger is read before anything happens and written by the
        // same request.
        let (_held, _) = self.hold_continuation(row.scope(), continuation_id).await?;
        let _guard = self
            .rt
            .router()
            .lock_conversation(&task_id.conversation_id())
            .await;
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

    /// The body of a continuation, under the task's lock (and the continuation id's,
    /// when given). `continuation_id` `None`: a person's plain message, recorded under
    /// [`person_continuation_id`] of its turn.
    pub(crate) async fn continue_locked(
        &self,
        row: &DelegationRow,
        message: &str,
        continuation_id: Option<&str>,
        origin: TurnOrigin,
        parent_turn_id: Option<TurnId>,
    ) -> Result<TaskStarted> {
        let store = &self.rt.ctx().store;
        if let Some(cid) = continuation_id {
            check_continuation_id(cid)?;
            if let Some(e) = store.delegation().ledger_entry(row.scope(), cid).await? {
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
        // Re-read under the lock: a close may have released it meanwhile.
        let row = &store
            .delegation()
            .get_delegation(&row.task_id)
            .await?
            .unwrap_or_else(|| row.clone());
        match self.availability(row).await? {
            Availability::Released => return Err(released(&row.task_id)),
            Availability::Running => return Err(still_running(&row.task_id)),
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
        // The running-children cap, under the lock `delegate` takes for it too, held
        // until the new turn is stored (and so counted).
        let _cap_guard = self
            .lock_task_scope(row.parent_conversation_id.as_ref())
            .await;
        self.check_running_children(row.parent_conversation_id.as_ref())
            .await?;
        let session = self.rt.conversations().get_session(&row.session_id).await?;
        let owner = row
            .parent_conversation_id
            .clone()
            .unwrap_or_else(|| row.task_id.conversation_id());
        if let Some(parent) = &row.parent_conversation_id {
            self.make_room_for_child(parent, &row.session_id).await?;
        }
        // Make the session live first (strict resume): a failure changes nothing.
        let to = crate::session::actors::To::Session {
            session: &session,
            owner: &owner,
        };
        match self.rt.router().actor(to).ensure_live().await? {
            Some(Ok(())) => {}
            Some(Err((code, msg))) => return Err(not_live(&row.task_id, code, &msg)),
            None => return Err(RuntimeError::Internal("session actor is gone".to_string())),
        }
        let turn_id: TurnId = new_id();
        let started = |version: i64| TaskStarted {
            task_id: row.task_id.clone(),
            status: TaskStatus::Running,
            turn_version: version,
            turn_id: turn_id.clone(),
            agent_type: row.agent.clone(),
            working_dir: row.cwd.clone(),
        };
        // Every continuation is in the ledger (issue 26 item 6): a person's plain message
        // under an id of its own turn, `person:<turn id>`.
        let ledger = tether_store::LedgerEntry {
            scope: row.scope().to_string(),
            continuation_id: continuation_id
                .map(str::to_owned)
                .unwrap_or_else(|| person_continuation_id(&turn_id)),
            task_id: row.task_id.clone(),
            action: "continue".to_string(),
            message: Some(message.clone()),
            result: serde_json::to_value(started(0))
                .map_err(|e| RuntimeError::Internal(e.to_string()))?,
        };
        let version = store
            .delegation()
            .add_delegation_turn(
                &tether_store::NewDelegationTurn {
                    task_id: row.task_id.clone(),
                    session_id: row.session_id.clone(),
                    turn_id: turn_id.clone(),
                    message: message.clone(),
                    origin,
                    parent_turn_id,
                    max_running_children: Some(
                        self.rt.ctx().delegation.config().max_running_children,
                    )
                    .filter(|max| *max > 0),
                },
                Some(&ledger),
            )
            .await
            .map_err(|e| match e {
                tether_store::StoreError::ChildrenCap { running, max } => err(
                    ErrorCode::ConcurrencyLimit,
                    format!(
                        "{running} delegated tasks of this parent are still running on the \
                         cluster's nodes (limit {max}); collect or cancel one first"
                    ),
                ),
                other => other.into(),
            })?;
        self.enqueue_task_turn(&session, &owner, &turn_id, &message)
            .await?;
        Ok(started(version))
    }

    /// `concurrency_limit` when the parent already runs `max_running_children` children;
    /// the tasks API-token clients started (no parent, the external scope) count as one
    /// parent's (issue 24 S6). The caller holds the scope's lock ([`Runtime::lock_task_scope`]).
    pub(crate) async fn check_running_children(
        &self,
        parent: Option<&ConversationId>,
    ) -> Result<()> {
        let max = self.rt.ctx().delegation.config().max_running_children;
        if max == 0 {
            return Ok(());
        }
        let running = self
            .rt
            .ctx()
            .store
            .delegation()
            .running_children(parent)
            .await?;
        if running >= max {
            let whose = match parent {
                Some(_) => "of this conversation",
                None => "started over the API (the external scope)",
            };
            return Err(err(
                ErrorCode::ConcurrencyLimit,
                format!(
                    "{running} delegated tasks {whose} are still running \
                     (limit {max}); collect or cancel one first"
                ),
            ));
        }
        Ok(())
    }

    /// The lock under which a scope's running tasks are counted and a new turn stored: the
    /// parent's `delegations:` lock, or the external scope's.
    pub(crate) async fn lock_task_scope(
        &self,
        parent: Option<&ConversationId>,
    ) -> crate::session::routing::RoutingLock {
        let external = ConversationId::from(tether_store::EXTERNAL_SCOPE);
        self.rt
            .router()
            .lock_delegations_of(parent.unwrap_or(&external))
            .await
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use tether_proto::{ErrorCode, TaskId};

    use crate::{Caller, DelegationConfig, PoolConfig, Runtime, RuntimeConfig};

    #[tokio::test]
    async fn requests_during_start_up_recovery_are_rebuilding() {
        let dir = tempfile::tempdir().unwrap();
        let store = tether_store::Store::open(dir.path()).await.unwrap();
        let config = RuntimeConfig {
            agents: BTreeMap::new(),
            default_agent: "none".to_string(),
            workspace_roots: vec![dir.path().to_path_buf()],
            default_cwd: dir.path().to_path_buf(),
            data_dir: dir.path().to_path_buf(),
            private_paths: Vec::new(),
            approval_timeout: Duration::from_secs(60),
            queue_cap: 4,
            start_timeout: Duration::from_secs(5),
            turn_timeout: None,
            store_outage_limit: std::time::Duration::from_secs(300),
            pool: PoolConfig::default(),
            delegation: DelegationConfig::default(),
            coalesce: crate::CoalesceConfig::default(),
            attachments: crate::AttachmentLimits::default(),
            cluster: crate::ClusterConfig::default(),
            usage: crate::UsageConfig::default(),
            schedules: crate::SchedulesConfig::default(),
            worktrees: crate::WorktreesConfig::default(),
        };
        let rt = Runtime::start(config, store).await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), async {
            while !rt.ctx().delegation.is_ready() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap();
        rt.ctx().delegation.set_rebuilding();
        let p = Caller::Person;
        let t = TaskId::from("t");
        let codes = [
            rt.continue_task(&p, &t, "m", "c").await.unwrap_err().code(),
            rt.close_task(&p, &t, "c").await.unwrap_err().code(),
            rt.cancel_task(&p, &t).await.unwrap_err().code(),
            rt.delegation_status(&p, std::slice::from_ref(&t), None)
                .await
                .unwrap_err()
                .code(),
            rt.delegate(&Caller::External, "x", "y", None, None)
                .await
                .unwrap_err()
                .code(),
            rt.continuation(&t).await.unwrap_err().code(),
        ];
        assert!(
            codes.iter().all(|c| *c == ErrorCode::Rebuilding),
            "{codes:?}"
        );
        rt.ctx().delegation.set_ready();
        let e = rt.continue_task(&p, &t, "m", "c").await.unwrap_err();
        assert_eq!(e.code(), ErrorCode::NotFound);
        let list = rt
            .delegation_status(&p, std::slice::from_ref(&t), Some(0))
            .await
            .unwrap();
        assert_eq!(list.tasks[0].status, tether_proto::TaskStatus::Unknown);
    }
}
