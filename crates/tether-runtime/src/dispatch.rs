//! [`Runtime::call`]: the one way in for everything that changes something. A call is
//! placed (here, or forwarded to the conversation's owner, `cluster/routed.rs`) and then
//! run here by the one exhaustive match in [`Runtime::run_here`]. The typed methods
//! below (`send_message`, `answer_approval` …) are that call with its reply type.

use futures::future::BoxFuture;
use tether_proto::{
    Approval, ApprovalId, Conversation, ConversationId, CreateConversation, Decision,
    MessageOutcome, Question, QuestionId, SendMessage, TaskClosed, TaskId, TaskSnapshot,
    TaskStarted, TurnId, UpdateConversation,
};

use crate::call::{Call, Command, Principal, Reply};
use crate::delegation::registry::Caller;
use crate::error::Result;
use crate::session::answers;
use crate::{Runtime, RuntimeError};

impl Runtime {
    /// Runs `call` where the conversation it acts on runs (this node, or its owner).
    /// Boxed: a call may make calls (archiving closes the children's tasks).
    pub fn call(&self, call: Call) -> BoxFuture<'_, Result<Reply>> {
        Box::pin(async move {
            let conv = if self.cluster().enabled() {
                self.conversation_of(&call.command).await?
            } else {
                // One node: everything runs here; nothing to look up.
                None
            };
            self.routed(conv.as_ref(), call).await
        })
    }

    /// [`Runtime::call`] with its reply taken out as `T`.
    pub(crate) async fn call_as<T>(&self, command: Command, by: Principal) -> Result<T>
    where
        T: TryFrom<Reply, Error = RuntimeError>,
    {
        T::try_from(self.call(Call::new(command, by)).await?)
    }

    /// The conversation whose owner runs `cmd` (`None`: wherever it arrived).
    async fn conversation_of(&self, cmd: &Command) -> Result<Option<ConversationId>> {
        let store = &self.ctx().store;
        Ok(match cmd {
            Command::AnswerApproval { approval_id, .. } => store
                .get_approval(approval_id)
                .await?
                .map(|a| a.conversation_id),
            Command::AnswerQuestion { question_id, .. } => store
                .get_question(question_id)
                .await?
                .map(|q| q.conversation_id),
            other => other.named_conversation(),
        })
    }

    /// Runs `call` on this node, which runs its conversation's commands now.
    pub(crate) async fn run_here(&self, call: Call) -> Result<Reply> {
        let Call { command, by, .. } = call;
        let name = by.name();
        Ok(match command {
            Command::CreateConversation { request } => self.create_here(request).await?.into(),
            Command::UpdateConversation {
                conversation_id,
                update,
            } => self.update_here(&conversation_id, update).await?.into(),
            Command::SendMessage {
                conversation_id,
                message,
                turn_id,
            } => self
                .send_here(&conversation_id, message, &name, turn_id.as_ref())
                .await?
                .into(),
            Command::NewSession { conversation_id } => self
                .send_here(&conversation_id, typed("/new"), &name, None)
                .await?
                .into(),
            Command::Detach { conversation_id } => self
                .send_here(&conversation_id, typed("/detach"), &name, None)
                .await?
                .into(),
            Command::Stop { conversation_id } => {
                let (_guard, _) = self.lock_existing(&conversation_id).await?;
                self.stop_running(&conversation_id).await?.into()
            }
            Command::AnswerApproval {
                approval_id,
                decision,
            } => {
                // The actor that waits for it runs here (this node owns the conversation).
                let approval = self.ctx().store.get_approval(&approval_id).await?;
                let actor = approval.and_then(|a| self.existing_actor(&a.session_id));
                answers::answer_approval(self.ctx(), actor.as_ref(), &approval_id, decision, &name)
                    .await?
                    .into()
            }
            Command::AnswerQuestion {
                question_id,
                answer,
            } => {
                let question = self.ctx().store.get_question(&question_id).await?;
                let actor = question.and_then(|q| self.existing_actor(&q.session_id));
                answers::answer_question(self.ctx(), actor.as_ref(), &question_id, &answer, &name)
                    .await?
                    .into()
            }
            Command::Delegate {
                agent_type,
                task,
                working_dir,
                tool_call_id,
            } => self
                .delegate_here(
                    &by.caller(),
                    &agent_type,
                    &task,
                    working_dir.as_deref(),
                    tool_call_id.as_deref(),
                )
                .await?
                .into(),
            Command::ContinueTask {
                task_id,
                message,
                continuation_id,
            } => self
                .continue_here(&by.caller(), &task_id, &message, &continuation_id)
                .await?
                .into(),
            Command::CloseTask {
                task_id,
                continuation_id,
            } => self
                .close_here(&by.caller(), &task_id, &continuation_id)
                .await?
                .into(),
            Command::CancelTask { task_id } => {
                self.cancel_here(&by.caller(), &task_id).await?.into()
            }
            Command::StartTask { task_id, turn_id } => {
                if crate::cluster::forwarded() {
                    // Sent by the parent's node: the task is followed here too, so its end
                    // is reported even when that node is gone by then (once, whichever
                    // node's watcher is first).
                    self.watch_task(&task_id).await?;
                }
                self.start_task_here(&task_id, &turn_id).await?;
                Reply::Done
            }
            Command::EvictIdle { conversation_id } => {
                Reply::Evicted(self.evict_idle_here(&conversation_id).await?)
            }
            Command::ReportTurn { turn_id, .. } => {
                self.write_report(&turn_id).await?;
                Reply::Done
            }
        })
    }

    pub async fn create_conversation(&self, req: CreateConversation) -> Result<Conversation> {
        let command = Command::CreateConversation { request: req };
        self.call_as(command, Principal::person("api")).await
    }

    pub async fn update_conversation(
        &self,
        id: &ConversationId,
        update: UpdateConversation,
    ) -> Result<Conversation> {
        let command = Command::UpdateConversation {
            conversation_id: id.clone(),
            update,
        };
        self.call_as(command, Principal::person("api")).await
    }

    /// A person's message: a command, an answer to a pending question, or a prompt that
    /// starts a turn (or queues behind the running one). `by` names the sender.
    pub async fn send_message(
        &self,
        id: &ConversationId,
        message: SendMessage,
        by: &str,
    ) -> Result<MessageOutcome> {
        let command = Command::SendMessage {
            conversation_id: id.clone(),
            message,
            turn_id: None,
        };
        self.call_as(command, Principal::person(by)).await
    }

    /// [`Runtime::send_message`] for a message that may be delivered again (a channel
    /// replaying an update after a crash): a prompt's turn gets the caller's stable,
    /// unique `turn_id`, and when that turn is stored already the message is not routed
    /// again (outcome `started`, no reply). Commands and answers to questions are routed
    /// as usual.
    pub async fn send_message_once(
        &self,
        id: &ConversationId,
        message: SendMessage,
        by: &str,
        turn_id: &TurnId,
    ) -> Result<MessageOutcome> {
        let command = Command::SendMessage {
            conversation_id: id.clone(),
            message,
            turn_id: Some(turn_id.clone()),
        };
        self.call_as(command, Principal::person(by)).await
    }

    /// Unbinds; the next message starts a new session (reason `explicit`).
    pub async fn new_session(&self, id: &ConversationId) -> Result<MessageOutcome> {
        let command = Command::NewSession {
            conversation_id: id.clone(),
        };
        self.call_as(command, Principal::person("api")).await
    }

    /// Unbinds only.
    pub async fn detach(&self, id: &ConversationId) -> Result<MessageOutcome> {
        let command = Command::Detach {
            conversation_id: id.clone(),
        };
        self.call_as(command, Principal::person("api")).await
    }

    /// Cancels the running turn (exactly one `turn_cancelled` event); `nothing_running`
    /// when no turn runs.
    pub async fn stop(&self, id: &ConversationId) -> Result<MessageOutcome> {
        let command = Command::Stop {
            conversation_id: id.clone(),
        };
        self.call_as(command, Principal::person("api")).await
    }

    /// First answer wins; a second gets `approval_already_resolved`.
    pub async fn answer_approval(
        &self,
        id: &ApprovalId,
        decision: Decision,
        by: &str,
    ) -> Result<Approval> {
        let command = Command::AnswerApproval {
            approval_id: id.clone(),
            decision,
        };
        self.call_as(command, Principal::person(by)).await
    }

    pub async fn answer_question(
        &self,
        id: &QuestionId,
        answer: &str,
        by: &str,
    ) -> Result<Question> {
        let command = Command::AnswerQuestion {
            question_id: id.clone(),
            answer: answer.to_owned(),
        };
        self.call_as(command, Principal::person(by)).await
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
        let command = Command::Delegate {
            agent_type: agent_type.to_owned(),
            task: task.to_owned(),
            working_dir: working_dir.map(str::to_owned),
            tool_call_id: tool_call_id.map(str::to_owned),
        };
        self.call_as(command, caller.into()).await
    }

    /// `continue_with_session` and `POST .../continue`: a new turn in the same child
    /// session. Idempotent by `continuation_id` within the task's parent conversation.
    pub async fn continue_task(
        &self,
        caller: &Caller,
        task_id: &TaskId,
        message: &str,
        continuation_id: &str,
    ) -> Result<TaskStarted> {
        let command = Command::ContinueTask {
            task_id: task_id.clone(),
            message: message.to_owned(),
            continuation_id: continuation_id.to_owned(),
        };
        self.call_as(command, caller.into()).await
    }

    /// `close_session` and `POST .../close`: cancel a running turn, end the process, and
    /// refuse further continuation; history is kept. Idempotent by `continuation_id`.
    pub async fn close_task(
        &self,
        caller: &Caller,
        task_id: &TaskId,
        continuation_id: &str,
    ) -> Result<TaskClosed> {
        let command = Command::CloseTask {
            task_id: task_id.clone(),
            continuation_id: continuation_id.to_owned(),
        };
        self.call_as(command, caller.into()).await
    }

    /// `cancel_delegation`: cancels the running turn and returns the final result; if the
    /// task already finished, returns its result unchanged.
    pub async fn cancel_task(&self, caller: &Caller, task_id: &TaskId) -> Result<TaskSnapshot> {
        let command = Command::CancelTask {
            task_id: task_id.clone(),
        };
        self.call_as(command, caller.into()).await
    }
}

/// A message that is only typed text.
fn typed(text: &str) -> SendMessage {
    SendMessage {
        text: text.to_owned(),
        ..SendMessage::default()
    }
}
