//! Reading delegated tasks: a turn's outcome in the delegation vocabulary (pure), a
//! task's availability, snapshots, `get_delegation_status` with its waits, and the
//! people-facing continuation view.

use std::collections::HashMap;
use std::time::Duration;

use futures::future::select_all;
use tether_proto::{
    ApprovalStatus, Availability, BlockedKind, BlockedOn, Continuation, ConversationId, ErrorCode,
    EventPayload, QuestionStatus, SessionStatus, TaskId, TaskList, TaskOutcome, TaskSnapshot,
    TaskStatus, Turn, TurnId, TurnStatus,
};
use tether_store::{Batch, DelegationRow, Follower, Scope};

use crate::RuntimeError;
use crate::delegation::Delegations;
use crate::delegation::registry::MAX_WAITS_PER_CALLER;
use crate::delegation::{Caller, err};
use crate::error::Result;

/// Longest bounded wait of `get_delegation_status`.
pub const MAX_WAIT_MS: u64 = 60_000;
/// Waits re-read the store this often even without events (belt and braces).
const RECHECK: Duration = Duration::from_secs(2);

/// A turn's outcome as a delegation result. Pure.
pub fn outcome_of(turn: &Turn, now: i64) -> TaskOutcome {
    let start = turn.started_at_ms.unwrap_or(turn.created_at_ms);
    let duration_ms = Some(turn.ended_at_ms.unwrap_or(now).saturating_sub(start).max(0));
    let text = turn.result_text.clone().filter(|t| !t.trim().is_empty());
    let fail = |code: ErrorCode, message: String| TaskOutcome {
        status: TaskStatus::Failed,
        text: text.clone(),
        error_code: Some(code),
        message: Some(message),
        duration_ms,
    };
    match turn.status {
        TurnStatus::Queued
        | TurnStatus::Running
        | TurnStatus::WaitingApproval
        | TurnStatus::WaitingUser => TaskOutcome {
            status: TaskStatus::Running,
            text: None,
            error_code: None,
            message: None,
            duration_ms,
        },
        TurnStatus::Completed => match turn.stop_reason.as_deref().unwrap_or("end_turn") {
            "end_turn" if text.is_some() => TaskOutcome {
                status: TaskStatus::Completed,
                text: text.clone(),
                error_code: None,
                message: None,
                duration_ms,
            },
            "end_turn" => fail(
                ErrorCode::ChildEmpty,
                "the child ended its turn without any text".to_string(),
            ),
            "refusal" => fail(ErrorCode::ChildRefusal, "the child refused".to_string()),
            "max_tokens" => fail(
                ErrorCode::ChildMaxTokens,
                "the child stopped at its token limit".to_string(),
            ),
            "max_turn_requests" => fail(
                ErrorCode::ChildMaxTurnRequests,
                "the child stopped at its limit of model requests".to_string(),
            ),
            "cancelled" => canceled(duration_ms, text.clone()),
            other => fail(
                ErrorCode::ChildUnknown,
                format!("the child stopped for an unknown reason: {other}"),
            ),
        },
        TurnStatus::Failed => {
            let msg = turn.error_message.clone().unwrap_or_default();
            match turn.error_code {
                Some(ErrorCode::SpawnFailed) => fail(ErrorCode::SpawnFailed, msg),
                Some(ErrorCode::StartTimeout) => fail(ErrorCode::StartTimeout, msg),
                Some(ErrorCode::ResumeUnavailable) => fail(ErrorCode::ResumeUnavailable, msg),
                Some(code) => fail(ErrorCode::SubagentError, format!("{code}: {msg}")),
                None => fail(ErrorCode::SubagentError, msg),
            }
        }
        TurnStatus::Cancelled => canceled(duration_ms, text.clone()),
        TurnStatus::Interrupted => fail(
            ErrorCode::SubagentError,
            format!(
                "interrupted: {}; continue the task to go on",
                turn.error_message
                    .clone()
                    .unwrap_or_else(|| "tether restarted".to_string())
            ),
        ),
    }
}

fn canceled(duration_ms: Option<i64>, text: Option<String>) -> TaskOutcome {
    TaskOutcome {
        status: TaskStatus::Canceled,
        text,
        error_code: Some(ErrorCode::Canceled),
        message: Some("the turn was cancelled".to_string()),
        duration_ms,
    }
}

fn revoked_error() -> RuntimeError {
    err(
        ErrorCode::Unauthorized,
        "this MCP token was revoked: its session ended, was replaced or its conversation \
         was archived",
    )
}

/// Whether a task that was running has ended or is blocked on a request the caller
/// was not told about.
fn changed_from(running: &HashMap<TaskId, Option<String>>, snaps: &[TaskSnapshot]) -> bool {
    snaps.iter().any(|t| match running.get(&t.task_id) {
        Some(told) => {
            t.status != TaskStatus::Running
                || t.blocked_on
                    .as_ref()
                    .is_some_and(|b| Some(&b.request_id) != told.as_ref())
        }
        None => false,
    })
}

/// Events that can end a wait: a terminal turn event or a new request for a person.
/// The next events of any of `feeds` (never, when there are none).
async fn next_of(feeds: &mut [Follower]) -> tether_store::Result<std::sync::Arc<Batch>> {
    if feeds.is_empty() {
        return std::future::pending().await;
    }
    select_all(feeds.iter_mut().map(|f| Box::pin(f.next())))
        .await
        .0
}

fn matters(p: &EventPayload) -> bool {
    p.is_turn_terminal()
        || matches!(
            p,
            EventPayload::ApprovalRequested { .. } | EventPayload::QuestionAsked { .. }
        )
}

impl Delegations<'_> {
    /// Exactly one availability for a task.
    pub(crate) async fn availability(&self, row: &DelegationRow) -> Result<Availability> {
        if row.released_at_ms.is_some() {
            return Ok(Availability::Released);
        }
        let store = &self.rt.ctx().store;
        if !store
            .conversations()
            .open_turns(&row.task_id.conversation_id())
            .await?
            .is_empty()
        {
            return Ok(Availability::Running);
        }
        let session = self.rt.conversations().get_session(&row.session_id).await?;
        let configured = self.rt.ctx().config.agents.contains_key(&row.agent);
        Ok(match session.status {
            SessionStatus::Closed => Availability::Released,
            _ if !configured || session.external_id.is_none() => Availability::NotContinuable,
            SessionStatus::Live | SessionStatus::Starting => Availability::ContinuableLive,
            SessionStatus::Dormant => Availability::ContinuableResume,
        })
    }

    pub(crate) async fn snapshot(&self, row: &DelegationRow) -> Result<TaskSnapshot> {
        let store = &self.rt.ctx().store;
        // Availability first: it is `continuable_live` only when no turn of the task is
        // open, so the turn read after it never looks older than the availability (read
        // the other way round, a turn ending in between gave `running` + `continuable_live`);
        // a turn found ended after `running` was read has its availability read again
        // (else `canceled` came with `running`).
        let mut availability = self.availability(row).await?;
        let latest = store
            .delegation()
            .latest_delegation_turn(&row.task_id)
            .await?;
        let turn = match &latest {
            Some(dt) => store.conversations().get_turn(&dt.turn_id).await?,
            None => None,
        };
        let (Some(dt), Some(turn)) = (latest, turn) else {
            return Err(RuntimeError::Internal(format!(
                "task {} has no turn",
                row.task_id
            )));
        };
        let outcome = outcome_of(&turn, self.rt.ctx().clock.now_ms());
        if availability == Availability::Running && outcome.status.is_terminal() {
            // The turn ended between the two reads: what is true after its end.
            availability = self.availability(row).await?;
        }
        let blocked_on = if outcome.status == TaskStatus::Running {
            self.blocked_on(&row.task_id, &turn.id).await?
        } else {
            None
        };
        Ok(TaskSnapshot {
            task_id: row.task_id.clone(),
            status: outcome.status,
            turn_version: dt.turn_version,
            availability: Some(availability),
            agent_type: Some(row.agent.clone()),
            origin: Some(dt.origin),
            turn_id: Some(turn.id),
            text: outcome.text,
            error_code: outcome.error_code,
            message: outcome.message,
            duration_ms: outcome.duration_ms,
            blocked_on,
        })
    }

    async fn blocked_on(&self, task_id: &TaskId, turn_id: &TurnId) -> Result<Option<BlockedOn>> {
        let store = &self.rt.ctx().store;
        let conversation_id = task_id.conversation_id();
        let approvals = store
            .requests()
            .list_approvals(Some(ApprovalStatus::Pending), Some(&conversation_id))
            .await?;
        if let Some(a) = approvals.into_iter().find(|a| a.turn_id == *turn_id) {
            return Ok(Some(BlockedOn {
                kind: BlockedKind::Approval,
                request_id: a.id.into(),
                title: a.title,
            }));
        }
        let questions = store
            .requests()
            .list_questions(Some(QuestionStatus::Pending), Some(&conversation_id))
            .await?;
        Ok(questions
            .into_iter()
            .find(|q| q.turn_id == *turn_id)
            .map(|q| BlockedOn {
                kind: BlockedKind::Question,
                request_id: q.id.into(),
                title: q.prompt,
            }))
    }

    async fn snapshots(&self, caller: &Caller, ids: &[TaskId]) -> Result<Vec<TaskSnapshot>> {
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            out.push(match self.visible_task(caller, id).await? {
                Some(row) => self.snapshot(&row).await?,
                None => TaskSnapshot::unknown(id),
            });
        }
        Ok(out)
    }

    /// The snapshot of one task the caller may see.
    pub(crate) async fn task_snapshot(
        &self,
        caller: &Caller,
        task_id: &TaskId,
    ) -> Result<TaskSnapshot> {
        self.caller_gate(caller).await?;
        let row = self.task_or_not_found(caller, task_id).await?;
        self.snapshot(&row).await
    }

    /// `get_delegation_status`: snapshots in request order. `wait_ms` `None`: at once;
    /// `Some(0)`: wait without a time limit; `Some(n)`: up to `min(n, 60 s)`. A wait ends
    /// when a listed running task ends or becomes newly blocked on a person (at once when
    /// none is running), when tether begins to shut down (with the snapshots as they
    /// are), or when the caller's MCP token is revoked (`unauthorized`). A caller that
    /// goes away drops the call, which ends the wait. Each caller has at most
    /// [`MAX_WAITS_PER_CALLER`] waits in flight; more answer `concurrency_limit`.
    pub(crate) async fn delegation_status(
        &self,
        caller: &Caller,
        task_ids: &[TaskId],
        wait_ms: Option<u64>,
    ) -> Result<TaskList> {
        self.caller_gate(caller).await?;
        if task_ids.is_empty() {
            return Err(RuntimeError::BadRequest(
                "task_ids must name at least one task".to_string(),
            ));
        }
        let Some(wait_ms) = wait_ms else {
            let first = self.snapshots(caller, task_ids).await?;
            return Ok(self.reported(caller, first));
        };
        // Follow the tasks before the first snapshot, so no change falls in between (a
        // task id that names no conversation never delivers anything).
        let mut feeds: HashMap<&TaskId, Follower> = HashMap::new();
        for id in task_ids {
            if !feeds.contains_key(id) {
                let f = self
                    .rt
                    .ctx()
                    .store
                    .events()
                    .follow_from_now(Scope::Conversation(id.conversation_id()))
                    .await?;
                feeds.insert(id, f);
            }
        }
        let first = self.snapshots(caller, task_ids).await?;
        let reg = &self.rt.ctx().delegation;
        let scope = caller.scope();
        // Blocks count as new until this caller was told about them.
        let running: HashMap<TaskId, Option<String>> = first
            .iter()
            .filter(|t| t.status == TaskStatus::Running)
            .map(|t| (t.task_id.clone(), reg.reported_block(&scope, &t.task_id)))
            .collect();
        if running.is_empty() || changed_from(&running, &first) {
            return Ok(self.reported(caller, first));
        }
        feeds.retain(|id, _| running.contains_key(*id));
        let mut feeds: Vec<Follower> = feeds.into_values().collect();
        let Some(_slot) = reg.begin_wait(&scope) else {
            return Err(err(
                ErrorCode::ConcurrencyLimit,
                format!(
                    "this caller already has {MAX_WAITS_PER_CALLER} get_delegation_status \
                     waits in flight; wait in one call for several task_ids instead"
                ),
            ));
        };
        let revoked = match caller {
            Caller::Session { session_id, .. } => {
                Some(reg.revocation(session_id).ok_or_else(revoked_error)?)
            }
            Caller::External | Caller::Person => None,
        };
        let deadline = (wait_ms > 0)
            .then(|| tokio::time::Instant::now() + Duration::from_millis(wait_ms.min(MAX_WAIT_MS)));
        let changed = |snaps: &[TaskSnapshot]| changed_from(&running, snaps);
        loop {
            let sleep = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            let revoked = async {
                match &revoked {
                    Some(r) => r.cancelled().await,
                    None => std::future::pending().await,
                }
            };
            let recheck = tokio::select! {
                got = next_of(&mut feeds) => match got {
                    Ok(batch) => batch.events().iter().any(|e| matters(&e.payload)),
                    Err(e) => return Err(e.into()),
                },
                _ = tokio::time::sleep(RECHECK) => true,
                () = sleep => break,
                () = reg.stopping().cancelled() => break,
                // A draining node answers outside callers' waits (issue 31).
                () = self.rt.ops().drain_ends_wait(caller) => break,
                () = revoked => return Err(revoked_error()),
            };
            if recheck {
                let snaps = self.snapshots(caller, task_ids).await?;
                if changed(&snaps) {
                    return Ok(self.reported(caller, snaps));
                }
            }
        }
        let snaps = self.snapshots(caller, task_ids).await?;
        Ok(self.reported(caller, snaps))
    }

    /// Remembers which blocks `caller` is being told about.
    fn reported(&self, caller: &Caller, tasks: Vec<TaskSnapshot>) -> TaskList {
        let scope = caller.scope();
        for t in &tasks {
            if t.status != TaskStatus::Unknown {
                let block = t.blocked_on.as_ref().map(|b| b.request_id.as_str());
                self.rt
                    .ctx()
                    .delegation
                    .set_reported_block(&scope, &t.task_id, block);
            }
        }
        TaskList { tasks }
    }

    /// The delegated tasks of a parent conversation, oldest first.
    pub(crate) async fn delegations_of(
        &self,
        parent_conversation_id: &ConversationId,
    ) -> Result<Vec<Continuation>> {
        self.rt
            .conversations()
            .readable_row(parent_conversation_id)
            .await?;
        let mut out = Vec::new();
        for row in self
            .rt
            .ctx()
            .store
            .delegation()
            .children_of(parent_conversation_id)
            .await?
        {
            out.push(self.continuation(&row.task_id).await?);
        }
        Ok(out)
    }

    /// `GET /api/v1/conversations/{id}/continuation`.
    pub(crate) async fn continuation(&self, task_id: &TaskId) -> Result<Continuation> {
        self.delegation_gate()?;
        let task_conversation = task_id.conversation_id();
        self.rt.access().read(&task_conversation).await?;
        let row = self.task_or_not_found(&Caller::Person, task_id).await?;
        let snap = self.snapshot(&row).await?;
        Ok(Continuation {
            task_id: row.task_id.clone(),
            availability: snap.availability.unwrap_or(Availability::NotContinuable),
            turn_version: snap.turn_version,
            status: snap.status,
            agent_type: row.agent.clone(),
            working_dir: row.cwd.clone(),
            parent_conversation_id: row.parent_conversation_id.clone(),
            parent_session_id: row.parent_session_id.clone(),
            parent_turn_id: row.parent_turn_id.clone(),
            parent_tool_call_id: row.parent_tool_call_id.clone(),
            depth: row.depth,
            blocked_on: snap.blocked_on,
        })
    }
}

#[cfg(test)]
#[path = "status_tests.rs"]
mod tests;
