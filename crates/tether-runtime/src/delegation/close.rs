//! Ending delegated work: `cancel_delegation` (stop the running turn, return the final
//! result), `close_session` (release for good, idempotent by continuation id), the stop
//! cascade from a parent's turn, and releasing every child of a parent.

use std::time::Duration;

use tether_proto::{
    Availability, ConversationId, ConversationKind, ErrorCode, MessageOutcome, MessageOutcomeKind,
    TaskClosed, TaskId, TaskSnapshot, TaskStatus, TurnId, TurnOrigin,
};
use tether_store::{ConversationRow, DelegationRow, LedgerEntry, Scope};

use crate::RuntimeError;
use crate::delegation::Delegations;
use crate::delegation::continuation::released;
use crate::delegation::{Caller, check_continuation_id, err};
use crate::error::Result;
use crate::session::actors::To;

/// How long cancel/close wait for a stopped turn to end (the actor's own grace is 5 s).
const END_WAIT: Duration = Duration::from_secs(10);

impl Delegations<'_> {
    pub(crate) async fn cancel_here(
        &self,
        caller: &Caller,
        task_id: &TaskId,
    ) -> Result<TaskSnapshot> {
        self.caller_gate(caller).await?;
        let row = self.task_or_not_found(caller, task_id).await?;
        let _guard = self
            .rt
            .router()
            .lock_conversation(&task_id.conversation_id())
            .await;
        self.stop_task_turn(&row).await?;
        self.snapshot(&row).await
    }

    /// Stops the task's running turn, if any, and waits (bounded) until it has ended.
    /// Returns whether a turn was running.
    async fn stop_task_turn(&self, row: &DelegationRow) -> Result<bool> {
        let conversation_id = row.task_id.conversation_id();
        let open = self
            .rt
            .ctx()
            .store
            .conversations()
            .open_turns(&conversation_id)
            .await?;
        if open.is_empty() {
            return Ok(false);
        }
        // Followed before the stop, so its terminal event cannot slip past.
        let mut feed = self
            .rt
            .feed()
            .follow_from_now(Scope::Conversation(conversation_id.clone()))
            .await?;
        let to = To::Running(&row.session_id);
        if let Err(e) = self.rt.router().actor(to).stop().await {
            tracing::warn!(task_id = %row.task_id, error = %e, "cannot stop the task's turn");
        }
        let wait = async {
            loop {
                if self
                    .rt
                    .ctx()
                    .store
                    .conversations()
                    .open_turns(&conversation_id)
                    .await?
                    .is_empty()
                {
                    return Ok::<(), RuntimeError>(());
                }
                // Look again when a turn of the task ended.
                loop {
                    let batch = feed.next().await?;
                    if batch.events().iter().any(|e| e.payload.is_turn_terminal()) {
                        break;
                    }
                }
            }
        };
        match tokio::time::timeout(END_WAIT, wait).await {
            Ok(r) => r?,
            Err(_) => tracing::warn!(task_id = %row.task_id, "stopped turn did not end in time"),
        }
        Ok(true)
    }

    pub(crate) async fn close_here(
        &self,
        caller: &Caller,
        task_id: &TaskId,
        continuation_id: &str,
    ) -> Result<TaskClosed> {
        self.caller_gate(caller).await?;
        check_continuation_id(continuation_id)?;
        let row = self.task_or_not_found(caller, task_id).await?;
        // As for a continuation: the continuation id (claimed in the store with the
        // ledger read, for every node), then the task. The ledger is read before the turn
        // is cancelled or the process ended, and no other request on any node can record
        // this id before this one does, so a close is never left half done.
        let (_held, recorded) = self.hold_continuation(row.scope(), continuation_id).await?;
        let _guard = self
            .rt
            .router()
            .lock_conversation(&task_id.conversation_id())
            .await;
        let store = &self.rt.ctx().store;
        if let Some(e) = recorded {
            if e.task_id == row.task_id && e.action == "close" {
                return serde_json::from_value(e.result)
                    .map_err(|e| RuntimeError::Internal(format!("corrupt ledger entry: {e}")));
            }
            return Err(err(
                ErrorCode::ContinuationConflict,
                format!(
                    "continuation_id {continuation_id:?} was already used for a {} of task {}; \
                     use a new continuation_id",
                    e.action, e.task_id
                ),
            ));
        }
        // Re-read under the lock: a racing close may have released it.
        let row = store
            .delegation()
            .get_delegation(task_id)
            .await?
            .unwrap_or(row);
        if row.released_at_ms.is_some() {
            return Err(released(task_id));
        }
        let canceled = self.stop_task_turn(&row).await?;
        let to = To::Running(&row.session_id);
        if let Err(e) = self.rt.router().actor(to).close().await {
            tracing::warn!(task_id = %row.task_id, error = %e, "cannot end the task's process");
        }
        let version = store
            .delegation()
            .latest_delegation_turn(task_id)
            .await?
            .map(|t| t.turn_version)
            .unwrap_or(0);
        let result = TaskClosed {
            task_id: task_id.clone(),
            availability: Availability::Released,
            turn_version: version,
            canceled_running_turn: canceled,
        };
        let entry = LedgerEntry {
            scope: row.scope().to_string(),
            continuation_id: continuation_id.to_string(),
            task_id: task_id.clone(),
            action: "close".to_string(),
            message: None,
            result: serde_json::to_value(&result)
                .map_err(|e| RuntimeError::Internal(e.to_string()))?,
        };
        let note = "closed: the delegated session was released; its history is kept";
        store
            .delegation()
            .release_delegation(task_id, note, Some(&entry))
            .await?;
        self.forget_task(task_id);
        self.rt.ctx().delegation.revoke(&row.session_id);
        Ok(result)
    }

    /// Stopping a parent's turn cancels the child turns that turn started (only those).
    pub(crate) async fn cancel_children_of_turn(&self, parent_turn_id: &TurnId) {
        let open = match self
            .rt
            .ctx()
            .store
            .delegation()
            .open_turns_started_in(parent_turn_id)
            .await
        {
            Ok(o) => o,
            Err(e) => {
                tracing::error!(error = %e, "cannot list the children of a stopped turn");
                return;
            }
        };
        for dt in open {
            // A child lives where its owner is, on any node (issue 26 item 4): the cancel
            // is routed there like any command, in the background (the parent's `/stop`
            // does not wait for its children's ends).
            let rt = self.rt.trusted();
            tokio::spawn(async move {
                match rt.cancel_task(&Caller::Person, &dt.task_id).await {
                    Ok(_) => {}
                    Err(e) if e.code() == ErrorCode::SessionReleased => {}
                    Err(e) => {
                        tracing::warn!(task_id = %dt.task_id, error = %e, "cannot stop a child's turn")
                    }
                }
            });
        }
    }

    /// Releases every child of a parent conversation (for when the parent goes away).
    pub(crate) async fn release_children(
        &self,
        parent_conversation_id: &ConversationId,
    ) -> Result<usize> {
        let children = self
            .rt
            .ctx()
            .store
            .delegation()
            .children_of(parent_conversation_id)
            .await?;
        let mut n = 0;
        for row in children.into_iter().filter(|r| r.released_at_ms.is_none()) {
            // The close any caller makes, under an id of its own (`archive:<task>`), so
            // it is in the ledger like every other close.
            let cid = format!("archive:{}", row.task_id);
            match self
                .rt
                .close_task(&Caller::Person, &row.task_id, &cid)
                .await
            {
                Ok(_) => n += 1,
                Err(e) if e.code() == ErrorCode::SessionReleased => {}
                Err(e) => {
                    tracing::warn!(task_id = %row.task_id, error = %e, "cannot release child")
                }
            }
        }
        Ok(n)
    }

    /// A person's plain message in a delegated conversation: a continuation with origin
    /// `person` (the caller holds the conversation lock).
    pub(crate) async fn route_delegate_prompt(
        &self,
        conv: &ConversationRow,
        text: String,
    ) -> Result<MessageOutcome> {
        debug_assert_eq!(conv.kind, ConversationKind::Delegate);
        self.delegation_gate()?;
        let row = self
            .rt
            .ctx()
            .store
            .delegation()
            .get_delegation(&TaskId::of_conversation(&conv.id))
            .await?
            .ok_or_else(|| RuntimeError::NotFound {
                what: "delegated task",
                id: conv.id.to_string(),
            })?;
        let started = self
            .continue_locked(&row, &text, None, TurnOrigin::Person, None)
            .await?;
        debug_assert_eq!(started.status, TaskStatus::Running);
        Ok(MessageOutcome {
            outcome: MessageOutcomeKind::Started,
            turn_id: Some(started.turn_id),
            session_id: Some(row.session_id),
            new_session: None,
            queue_position: None,
            reply: None,
            attachments: Vec::new(),
        })
    }
}
