//! Every command that acts on a conversation comes through [`Runtime::routed`]: it runs
//! here when this node is (or becomes) the conversation's owner, else on the owner, whose
//! reply it returns. A forwarded command runs the very same public method on the owner,
//! with the number of nodes it passed in a task-local, so the owner claims without a cap
//! and a command never travels in circles.

use std::future::Future;

use serde::de::DeserializeOwned;
use tether_proto::{ConversationId, ErrorCode};

use super::forward::Sent;
use super::place::Place;
use super::wire::{Envelope, Forwarded, Known, Reply, rebuild};
use crate::error::Result;
use crate::{Runtime, RuntimeError};

tokio::task_local! {
    /// Set while a command forwarded from another node runs: how many nodes it passed.
    static FORWARDED: u8;
}

/// Most nodes a command passes (a conversation claimed elsewhere while it travelled).
const MAX_HOPS: u8 = 3;
/// Most times a command is routed again after its node died before taking it.
const MAX_REROUTES: u32 = 3;

impl Runtime {
    /// Runs `here` when conversation `conv`'s commands run on this node, else sends
    /// `command()` to the node where they do and returns its reply. `conv` `None` (an
    /// unknown approval, say): here, which answers the error.
    pub(crate) async fn routed<T, F, Fut>(
        &self,
        conv: Option<&ConversationId>,
        command: impl FnOnce() -> Forwarded,
        here: F,
    ) -> Result<T>
    where
        T: DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let (true, Some(conv)) = (self.cluster().enabled(), conv) else {
            return here().await;
        };
        let hops = FORWARDED.try_with(|h| *h).ok();
        let mut command = Some(command);
        let mut built: Option<Forwarded> = None;
        let mut reroutes = 0;
        loop {
            let node = match self.place(conv, hops.is_some()).await? {
                Place::Here { claimed } => {
                    let out = here().await;
                    if claimed {
                        self.release_if_idle(conv).await;
                    }
                    return out;
                }
                Place::There(node) => node,
            };
            let hop = hops.unwrap_or(0) + 1;
            if hop > MAX_HOPS {
                return Err(RuntimeError::Internal(format!(
                    "conversation {conv}'s command was passed between nodes {MAX_HOPS} times"
                )));
            }
            let cmd = match (&built, command.take()) {
                (Some(c), _) => c.clone(),
                (None, Some(make)) => built.insert(make()).clone(),
                (None, None) => {
                    return Err(RuntimeError::Internal("command built twice".to_owned()));
                }
            };
            let env = Envelope {
                hops: hop,
                command: cmd,
            };
            match self.send_to(&node, Some(conv), &env).await? {
                Sent::Replied(Reply::Ok(value)) => {
                    return serde_json::from_value(value).map_err(|e| {
                        RuntimeError::Internal(format!("unreadable reply of node {node}: {e}"))
                    });
                }
                Sent::Replied(Reply::Err { code, message }) => {
                    return Err(self.rebuilt(code, message, &env.command).await);
                }
                Sent::Reroute if reroutes < MAX_REROUTES => reroutes += 1,
                Sent::Reroute => {
                    return Err(RuntimeError::Internal(format!(
                        "conversation {conv}'s owners kept dying before taking its command"
                    )));
                }
            }
        }
    }

    /// The owner's error as this node's (see `wire::rebuild`).
    async fn rebuilt(&self, code: ErrorCode, message: String, cmd: &Forwarded) -> RuntimeError {
        use tether_core::approval::ResolveError;
        let store = &self.ctx().store;
        let resolved = match (code, cmd) {
            (ErrorCode::ApprovalAlreadyResolved, Forwarded::AnswerApproval { approval_id, .. }) => {
                match store.get_approval(approval_id).await {
                    Ok(Some(a)) => Some(ResolveError::AlreadyResolved { status: a.status }),
                    Ok(None) | Err(_) => None,
                }
            }
            (ErrorCode::QuestionAlreadyResolved, Forwarded::AnswerQuestion { question_id, .. }) => {
                match store.get_question(question_id).await {
                    Ok(Some(q)) => Some(ResolveError::QuestionAlreadyResolved { status: q.status }),
                    Ok(None) | Err(_) => None,
                }
            }
            _ => None,
        };
        let conversation_id = cmd.conversation_id();
        rebuild(
            code,
            message,
            Known {
                conversation_id: conversation_id.as_ref(),
                resolved,
            },
        )
    }

    /// A conversation this command claimed and left without an actor (a `/status`, an
    /// answer nobody waited for) is given up again, under its routing lock so a message
    /// routed meanwhile keeps it.
    async fn release_if_idle(&self, conv: &ConversationId) {
        let _guard = self.lock_conversation(conv).await;
        let store = &self.ctx().store;
        let busy = async {
            // A session actor or a routing message holds it (see `ownership`).
            if self.ctx().ownership.in_use(conv) {
                return Ok::<bool, tether_store::StoreError>(true);
            }
            let row = store.get_conversation(conv).await?;
            let bound = row.and_then(|r| r.bound_session_id);
            if bound.is_some_and(|s| self.existing_actor(&s).is_some()) {
                return Ok::<bool, tether_store::StoreError>(true);
            }
            Ok(!store.open_turns(conv).await?.is_empty())
        };
        match busy.await {
            Ok(true) => {}
            Ok(false) => {
                if let Some(epoch) = store.held_epoch(conv)
                    && let Err(e) = store
                        .release_conversation(conv, self.cluster().node_id(), epoch)
                        .await
                {
                    tracing::warn!(conversation = %conv, error = %e, "cannot release a conversation");
                }
            }
            Err(e) => {
                tracing::warn!(conversation = %conv, error = %e, "cannot read a conversation")
            }
        }
    }

    /// Runs a command another node forwarded here, as that node's caller would have.
    pub(crate) async fn execute(&self, env: Envelope) -> Result<serde_json::Value> {
        FORWARDED
            .scope(env.hops, self.execute_command(env.command))
            .await
    }

    async fn execute_command(&self, cmd: Forwarded) -> Result<serde_json::Value> {
        match cmd {
            Forwarded::SendMessage {
                conversation_id,
                message,
                by,
                turn_id: None,
            } => json(self.send_message(&conversation_id, message, &by).await?),
            Forwarded::SendMessage {
                conversation_id,
                message,
                by,
                turn_id: Some(turn_id),
            } => json(
                self.send_message_once(&conversation_id, message, &by, &turn_id)
                    .await?,
            ),
            Forwarded::Stop { conversation_id } => json(self.stop(&conversation_id).await?),
            Forwarded::NewSession { conversation_id } => {
                json(self.new_session(&conversation_id).await?)
            }
            Forwarded::Detach { conversation_id } => json(self.detach(&conversation_id).await?),
            Forwarded::UpdateConversation {
                conversation_id,
                update,
            } => json(self.update_conversation(&conversation_id, update).await?),
            Forwarded::AnswerApproval {
                approval_id,
                decision,
                by,
            } => json(self.answer_approval(&approval_id, decision, &by).await?),
            Forwarded::AnswerQuestion {
                question_id,
                answer,
                by,
            } => json(self.answer_question(&question_id, &answer, &by).await?),
            Forwarded::ContinueTask {
                caller,
                task_id,
                message,
                continuation_id,
            } => json(
                self.continue_task(&caller.into(), &task_id, &message, &continuation_id)
                    .await?,
            ),
            Forwarded::CloseTask {
                caller,
                task_id,
                continuation_id,
            } => json(
                self.close_task(&caller.into(), &task_id, &continuation_id)
                    .await?,
            ),
            Forwarded::CancelTask { caller, task_id } => {
                json(self.cancel_task(&caller.into(), &task_id).await?)
            }
            Forwarded::StartTask { task_id, turn_id } => {
                json(self.start_forwarded_task(&task_id, &turn_id).await?)
            }
            Forwarded::ReportTurn { turn_id, .. } => json(self.write_report(&turn_id).await?),
            Forwarded::EvictIdle { conversation_id } => {
                json(self.evict_idle_here(&conversation_id).await?)
            }
        }
    }
}

fn json(value: impl serde::Serialize) -> Result<serde_json::Value> {
    serde_json::to_value(value).map_err(|e| RuntimeError::Internal(e.to_string()))
}

impl Forwarded {
    /// The conversation the command acts on, when the command names it.
    fn conversation_id(&self) -> Option<ConversationId> {
        match self {
            Forwarded::SendMessage {
                conversation_id, ..
            }
            | Forwarded::Stop { conversation_id }
            | Forwarded::NewSession { conversation_id }
            | Forwarded::Detach { conversation_id }
            | Forwarded::UpdateConversation {
                conversation_id, ..
            }
            | Forwarded::ReportTurn {
                conversation_id, ..
            }
            | Forwarded::EvictIdle { conversation_id } => Some(conversation_id.clone()),
            Forwarded::ContinueTask { task_id, .. }
            | Forwarded::CloseTask { task_id, .. }
            | Forwarded::CancelTask { task_id, .. }
            | Forwarded::StartTask { task_id, .. } => Some(task_id.conversation_id()),
            Forwarded::AnswerApproval { .. } | Forwarded::AnswerQuestion { .. } => None,
        }
    }
}
