//! A new task's first turn runs where the cluster places the task's conversation (issue
//! 12): here, or — this node owning `max_live_per_node` conversations — on the
//! least-loaded live node, which claims it and starts the child's agent there. The
//! parent stays where it is and follows the child through the database: its outcome
//! watcher reads the child's events from the tail, and reporting is once per turn
//! whichever node's watcher sees the end first (the store marks a turn reported in the
//! transaction that appends the report).

use tether_proto::{ConversationId, TaskId, TurnId, TurnStatus};

use crate::RuntimeError;
use crate::call::{Command, Principal};
use crate::delegation::Delegations;
use crate::error::Result;

impl Delegations<'_> {
    /// Starts turn `turn_id` (version 1, stored with the task) of new task `task_id` on
    /// the node its conversation's commands run on. A failure on the way (the chosen node
    /// died before answering, say) fails the turn, so a stored turn never waits forever.
    pub(crate) async fn start_task(&self, task_id: &TaskId, turn_id: &TurnId) -> Result<()> {
        let command = Command::StartTask {
            task_id: task_id.clone(),
            turn_id: turn_id.clone(),
        };
        let res = self.rt.call_as(command, Principal::System).await;
        if let Err(e) = &res {
            // Recorded already when the owner's enqueue failed: then this changes nothing.
            self.fail_unstarted_task(turn_id, e).await;
        }
        res
    }

    /// The first turn, read back from the store, enqueued on this node's actor for the
    /// child's session. A turn no longer queued was started already: nothing to do.
    pub(crate) async fn start_task_here(&self, task_id: &TaskId, turn_id: &TurnId) -> Result<()> {
        let store = &self.rt.ctx().store;
        let row = store
            .delegation()
            .get_delegation(task_id)
            .await?
            .ok_or_else(|| RuntimeError::NotFound {
                what: "delegated task",
                id: task_id.to_string(),
            })?;
        let turn = store
            .conversations()
            .get_turn(turn_id)
            .await?
            .ok_or_else(|| RuntimeError::Internal(format!("turn {turn_id} vanished")))?;
        if turn.status != TurnStatus::Queued {
            return Ok(());
        }
        let session = store
            .conversations()
            .get_session(&row.session_id)
            .await?
            .ok_or_else(|| {
                RuntimeError::Internal(format!("session {} vanished", row.session_id))
            })?;
        if let Some(parent) = &row.parent_conversation_id {
            self.make_room_for_child(parent, &row.session_id).await?;
        }
        let owner: ConversationId = row
            .parent_conversation_id
            .clone()
            .unwrap_or_else(|| task_id.conversation_id());
        self.enqueue_task_turn(&session, &owner, turn_id, &row.task)
            .await
    }
}
