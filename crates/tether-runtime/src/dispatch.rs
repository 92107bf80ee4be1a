//! [`Runtime::call`]: the one way in for everything that changes something. A call is
//! placed (here, or forwarded to the conversation's owner, `cluster/routed.rs`) and then
//! run here by the one exhaustive match in [`Runtime::run_here`]. The typed methods
//! below (`send_message`, `answer_approval` …) are that call with its reply type.

use tether_proto::{ConversationId, SendMessage};

use crate::call::{Call, Command, Reply};
use crate::error::Result;
use crate::session::answers;

/// A message that is only typed text.
fn typed(text: &str) -> SendMessage {
    SendMessage {
        text: text.to_owned(),
        ..SendMessage::default()
    }
}

/// The dispatcher: runs a call's command here, by one exhaustive match. A view of the
/// runtime (cheap, `Copy`), reached through `Runtime::dispatch()`.
#[derive(Clone, Copy)]
pub(crate) struct Dispatch<'a> {
    pub(crate) rt: &'a crate::Runtime,
}

impl<'a> Dispatch<'a> {
    pub(crate) fn new(rt: &'a crate::Runtime) -> Self {
        Dispatch { rt }
    }
}

impl Dispatch<'_> {
    /// Runs `call` where the conversation it acts on runs (this node, or its owner).
    pub(crate) async fn call(self, call: Call) -> Result<Reply> {
        use tracing::Instrument as _;
        // Its span (issue 31) continues the trace it came with: another node's call, or
        // the running turn of the agent that calls back into tether.
        let span = tracing::info_span!(
            "tether.call",
            otel.name = call.command.name(),
            by = %call.by.name(),
            node = %self.rt.ctx().config.cluster.node_id,
            trace_id = tracing::field::Empty,
        );
        let parent = match (&call.trace.traceparent, &call.by) {
            (Some(tp), _) => Some(crate::trace::context_of(tp)),
            (None, crate::call::Principal::Agent { session_id, .. }) => {
                self.rt.ctx().turn_traces.of(session_id)
            }
            (None, _) => None,
        };
        crate::trace::adopt(&span, parent);
        async move {
            self.rt.access().check_call(&call).await?;
            let conv = if self.rt.placement().cluster().enabled() {
                self.conversation_of(&call.command).await?
            } else {
                // One node: everything runs here; nothing to look up.
                None
            };
            self.rt.placement().routed(conv.as_ref(), call).await
        }
        .instrument(span)
        .await
    }

    /// The conversation whose owner runs `cmd` (`None`: wherever it arrived).
    pub(crate) async fn conversation_of(&self, cmd: &Command) -> Result<Option<ConversationId>> {
        let store = &self.rt.ctx().store;
        Ok(match cmd {
            Command::AnswerApproval { approval_id, .. } => store
                .requests()
                .get_approval(approval_id)
                .await?
                .map(|a| a.conversation_id),
            Command::AnswerQuestion { question_id, .. } => store
                .requests()
                .get_question(question_id)
                .await?
                .map(|q| q.conversation_id),
            other => other.named_conversation(),
        })
    }

    /// Runs `call` on this node, which runs its conversation's commands now.
    pub(crate) async fn run_here(&self, call: Call) -> Result<Reply> {
        let audited = crate::audit::of_command(&call.command);
        let (who, name) = (call.who.clone(), call.by.name());
        let reply = self.run_command(call).await?;
        if let Some((action, target, detail)) = audited {
            self.rt
                .people()
                .record(who.as_ref(), &name, action, Some(&target), detail)
                .await;
        }
        Ok(reply)
    }

    async fn run_command(&self, call: Call) -> Result<Reply> {
        let Call {
            command, by, who, ..
        } = call;
        let name = by.name();
        Ok(match command {
            Command::CreateConversation { request } => {
                let owner = self.rt.access().owner_for(who.as_ref());
                self.rt
                    .conversations()
                    .create_here(request, &owner)
                    .await?
                    .into()
            }
            Command::UpdateConversation {
                conversation_id,
                update,
            } => self
                .rt
                .conversations()
                .update_here(&conversation_id, update)
                .await?
                .into(),
            Command::SendMessage {
                conversation_id,
                message,
                turn_id,
            } => {
                // A command forwarded from another node runs here on tether's own handle:
                // what the message does (a command such as `/every` makes a schedule of
                // the sender's) acts for the person who sent it.
                let acting;
                let rt = match (&who, self.rt.identity()) {
                    (Some(w), None) => {
                        acting = self.rt.acting_as(w.clone());
                        &acting
                    }
                    _ => self.rt,
                };
                rt.router()
                    .send_here(
                        &conversation_id,
                        message,
                        &name,
                        turn_id.as_ref(),
                        who.as_ref(),
                    )
                    .await?
                    .into()
            }
            Command::NewSession { conversation_id } => self
                .rt
                .router()
                .send_here(&conversation_id, typed("/new"), &name, None, who.as_ref())
                .await?
                .into(),
            Command::Detach { conversation_id } => self
                .rt
                .router()
                .send_here(
                    &conversation_id,
                    typed("/detach"),
                    &name,
                    None,
                    who.as_ref(),
                )
                .await?
                .into(),
            Command::Stop { conversation_id } => {
                let (_guard, _) = self.rt.router().lock_existing(&conversation_id).await?;
                self.rt
                    .router()
                    .stop_running(&conversation_id)
                    .await?
                    .into()
            }
            Command::AnswerApproval {
                approval_id,
                decision,
            } => {
                // The actor that waits for it runs here (this node owns the conversation).
                let approval = self
                    .rt
                    .ctx()
                    .store
                    .requests()
                    .get_approval(&approval_id)
                    .await?;
                let actor = approval.and_then(|a| self.rt.router().existing_actor(&a.session_id));
                answers::answer_approval(
                    self.rt.ctx(),
                    actor.as_ref(),
                    &approval_id,
                    decision,
                    &name,
                )
                .await?
                .into()
            }
            Command::AnswerQuestion {
                question_id,
                answer,
            } => {
                let question = self
                    .rt
                    .ctx()
                    .store
                    .requests()
                    .get_question(&question_id)
                    .await?;
                let actor = question.and_then(|q| self.rt.router().existing_actor(&q.session_id));
                answers::answer_question(
                    self.rt.ctx(),
                    actor.as_ref(),
                    &question_id,
                    &answer,
                    &name,
                )
                .await?
                .into()
            }
            Command::Delegate {
                agent_type,
                task,
                working_dir,
                tool_call_id,
            } => self
                .rt
                .delegations()
                .delegate_here(
                    &by.caller(),
                    &self.rt.access().owner_for(who.as_ref()),
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
                .rt
                .delegations()
                .continue_here(&by.caller(), &task_id, &message, &continuation_id)
                .await?
                .into(),
            Command::CloseTask {
                task_id,
                continuation_id,
            } => self
                .rt
                .delegations()
                .close_here(&by.caller(), &task_id, &continuation_id)
                .await?
                .into(),
            Command::CancelTask { task_id } => self
                .rt
                .delegations()
                .cancel_here(&by.caller(), &task_id)
                .await?
                .into(),
            Command::StartTask { task_id, turn_id } => {
                if crate::cluster::forwarded() {
                    // Sent by the parent's node: the task is followed here too, so its end
                    // is reported even when that node is gone by then (once, whichever
                    // node's watcher is first).
                    self.rt.delegations().watch_task(&task_id).await?;
                }
                self.rt
                    .delegations()
                    .start_task_here(&task_id, &turn_id)
                    .await?;
                Reply::Done
            }
            Command::EvictIdle { conversation_id } => Reply::Evicted(
                self.rt
                    .delegations()
                    .evict_idle_here(&conversation_id)
                    .await?,
            ),
            Command::ReportTurn { turn_id, .. } => {
                self.rt.delegations().write_report(&turn_id).await?;
                Reply::Done
            }
        })
    }
}
