//! The commands (architecture.md §3) as the router runs them, under the conversation's routing
//! lock: `/new`, `/detach`, `/stop`, `/approve`, `/deny`, `/agent`, `/model`, `/status`,
//! `/sessions`, `/help`. The rules they apply live in `tether-core`.

use tether_core::binding::{
    BoundSession, Preferences, apply_overrides, model_choice, new_with_task_note, pending_switch,
};
use tether_core::{Command, pick_approval};
use tether_proto::{
    ApprovalId, ApprovalStatus, Decision, ErrorCode, MessageOutcome, MessageOutcomeKind,
    MessageRole, NewSessionReason,
};
use tether_store::ConversationRow;

use crate::RuntimeError;
use crate::error::Result;
use crate::session::router::{Bound, reply};
use crate::session::router_entry::Router;

impl Router<'_> {
    /// The conversation's preferences after naming an agent (`/new <agent>`, `/agent`):
    /// the model is kept when the agent stays the same.
    async fn prefer_agent(&self, conv: &ConversationRow, agent: &str) -> Result<Preferences> {
        self.rt.conversations().agent_spec(agent)?;
        let prefs = Preferences {
            agent: conv.agent.clone(),
            model: conv.model.clone(),
        };
        let next = apply_overrides(&prefs, Some(agent), None);
        self.rt
            .ctx()
            .store
            .conversations()
            .set_preferences(&conv.id, &next.agent, next.model.as_deref())
            .await?;
        Ok(Preferences {
            agent: next.agent,
            model: next.model,
        })
    }

    /// The bound session as the binding rules see it.
    async fn bound_view(&self, conv: &ConversationRow) -> Result<Option<BoundSession>> {
        let Some(sid) = &conv.bound_session_id else {
            return Ok(None);
        };
        Ok(self
            .rt
            .ctx()
            .store
            .conversations()
            .get_session(sid)
            .await?
            .map(|s| BoundSession {
                session_id: s.id,
                agent: s.agent,
                model: s.model,
            }))
    }

    /// The reply to `/agent` and `/model`: what was set, and whether the next message
    /// switches to a new session (the one drift rule decides).
    async fn preference_reply(
        &self,
        conv: &ConversationRow,
        prefs: &Preferences,
        set: String,
    ) -> Result<String> {
        let bound = self.bound_view(conv).await?;
        Ok(match pending_switch(bound.as_ref(), prefs) {
            Some(d) => format!(
                "{set}: the next message starts a new {} session ({})",
                prefs.agent,
                d.describe()
            ),
            None => set,
        })
    }

    /// Runs a command; `turn_id`, when the caller chose one (a scheduled run), is the
    /// id of the turn a `/new <task>` starts.
    pub(crate) async fn run_command(
        &self,
        conv: ConversationRow,
        cmd: Command,
        by: &str,
        turn_id: Option<&tether_proto::TurnId>,
    ) -> Result<MessageOutcome> {
        let store = &self.rt.ctx().store;
        if conv.kind == tether_proto::ConversationKind::Delegate
            && matches!(
                cmd,
                Command::New { .. }
                    | Command::Detach
                    | Command::Agent { .. }
                    | Command::Model { .. }
            )
        {
            return Err(crate::delegation::err(
                ErrorCode::InvalidCommand,
                "a delegated conversation keeps its one session: /new, /detach, /agent and \
                 /model do not apply (close it and delegate a new task instead)",
            ));
        }
        let text = match cmd {
            Command::New { agent, task } => {
                let agent_name = match &agent {
                    Some(agent) => self.prefer_agent(&conv, agent).await?.agent,
                    None => conv.agent.clone(),
                };
                // `/new <task>` without an agent: say that the first word was taken as
                // part of the task, not as an agent name.
                let task_note = match (&agent, &task) {
                    (None, Some(task)) => Some(new_with_task_note(&agent_name, task)),
                    _ => None,
                };
                let note = match (&task, &task_note) {
                    (_, Some(n)) => n.clone(),
                    (Some(_), None) => format!("starting a new {agent_name} session"),
                    (None, None) => format!("the next message starts a new {agent_name} session"),
                };
                if let Some(prev) = store
                    .conversations()
                    .unbind(&conv.id, &note, Some(NewSessionReason::Explicit))
                    .await?
                {
                    self.leave_session(&conv.id, &prev).await?;
                }
                let Some(task) = task else {
                    return Ok(reply(MessageOutcomeKind::Command, note));
                };
                let conv = self.rt.conversations().conversation_row(&conv.id).await?;
                let mut out = self
                    .route_prompt(conv, Bound::Unread, task, None, None, turn_id)
                    .await?;
                if task_note.is_some() {
                    out.reply = Some(note);
                }
                return Ok(out);
            }
            Command::Detach => {
                let note = "detached: the next message starts a new session";
                if let Some(prev) = store.conversations().unbind(&conv.id, note, None).await? {
                    self.leave_session(&conv.id, &prev).await?;
                }
                return Ok(reply(MessageOutcomeKind::Command, note));
            }
            Command::Stop => match self.stop_running(&conv.id).await {
                Ok(out) => out.reply.unwrap_or_default(),
                Err(RuntimeError::NothingRunning) => "nothing is running".to_string(),
                Err(e) => return Err(e),
            },
            Command::Approve { id } => self.approve_command(&conv, id, Decision::Allow, by).await?,
            Command::Deny { id } => self.approve_command(&conv, id, Decision::Deny, by).await?,
            Command::Agent { name } => {
                let prefs = self.prefer_agent(&conv, &name).await?;
                let set = format!(
                    "agent set to {name} (model {})",
                    tether_core::binding::model_label(prefs.model.as_deref())
                );
                self.preference_reply(&conv, &prefs, set).await?
            }
            Command::Model { name } => {
                let prefs = Preferences {
                    agent: conv.agent.clone(),
                    model: model_choice(&name).map(str::to_string),
                };
                store
                    .conversations()
                    .set_preferences(&conv.id, &prefs.agent, prefs.model.as_deref())
                    .await?;
                let shown = prefs.model.as_deref().unwrap_or("the agent's default");
                self.preference_reply(&conv, &prefs, format!("model set to {shown}"))
                    .await?
            }
            Command::Status => self.rt.conversations().status_text(&conv).await?,
            Command::Sessions => self.rt.conversations().sessions_text(&conv).await?,
            Command::Usage => self.rt.usage().text(&conv.id).await?,
            Command::Cancel => {
                if crate::parking::cancel(self.rt.ctx(), &conv.id).await {
                    "The automatic continuation was cancelled.".to_owned()
                } else {
                    "No continuation is waiting.".to_owned()
                }
            }
            Command::Every { spec } => {
                self.rt
                    .schedules()
                    .command_add(&conv.id, &spec, false)
                    .await?
            }
            Command::At { spec } => {
                self.rt
                    .schedules()
                    .command_add(&conv.id, &spec, true)
                    .await?
            }
            Command::Schedules { action } => {
                self.rt.schedules().command_list(&conv.id, action).await?
            }
            Command::Help => tether_core::help_text(),
            Command::Worktree { action } => {
                self.rt
                    .worktrees()
                    .command(&conv.id, action.as_deref())
                    .await?
            }
            Command::Merge => self.rt.worktrees().command_merge(&conv.id).await?,
            Command::Diff => return self.rt.worktrees().command_diff(&conv).await,
            Command::File { path } => return self.rt.attachments().share_file(&conv, &path).await,
        };
        store
            .events()
            .add_message(&conv.id, MessageRole::Command, &text, None, None)
            .await?;
        Ok(reply(MessageOutcomeKind::Command, text))
    }

    async fn approve_command(
        &self,
        conv: &ConversationRow,
        id: Option<String>,
        decision: Decision,
        by: &str,
    ) -> Result<String> {
        // Only the bound session's requests are pending for the conversation (as in its
        // view); an id of a resolved one is told so, as the API does.
        let all = self
            .rt
            .ctx()
            .store
            .requests()
            .list_approvals(None, Some(&conv.id))
            .await?;
        let (pending, resolved): (Vec<_>, Vec<_>) = all.into_iter().partition(|a| {
            a.status == ApprovalStatus::Pending
                && Some(&a.session_id) == conv.bound_session_id.as_ref()
        });
        let ids: Vec<ApprovalId> = pending.into_iter().map(|a| a.id).collect();
        let resolved: Vec<(ApprovalId, ApprovalStatus)> = resolved
            .into_iter()
            .filter(|a| a.status != ApprovalStatus::Pending)
            .map(|a| (a.id, a.status))
            .collect();
        let chosen = pick_approval(&ids, &resolved, id.as_deref())?;
        let a = self.rt.answer_approval(&chosen, decision, by).await?;
        let verb = match decision {
            Decision::Allow => "allowed",
            Decision::AllowAlways => "allowed always",
            Decision::Deny => "denied",
        };
        Ok(format!(
            "{verb}: {} ({})",
            a.title,
            tether_core::short_id(&a.id)
        ))
    }
}
