//! The router: applies the binding rules (architecture.md §3) to a person's message, under the
//! conversation's routing lock; commands are run by `commands.rs`.

use tether_core::binding::{
    BoundSession, Preferences, Selection, apply_overrides, explicit_new_status, select_session,
};
use tether_core::{Input, parse_input};
use tether_proto::{
    AttachmentId, ConversationId, ErrorCode, MessageOutcome, MessageOutcomeKind, MessageRole,
    NewSessionReason, QuestionStatus, SendMessage, SessionId, TurnId, TurnStatus,
};
use tether_store::{ConversationRow, MessageTarget, NewSession, NewTurn};

use crate::error::Result;
use crate::ids::new_id;
use crate::session::router_entry::Router;

use crate::RuntimeError;
use crate::session::actors::To;
use crate::session::command::Enqueued;
use crate::session::ending::TurnEnding;

pub(crate) fn reply(kind: MessageOutcomeKind, text: impl Into<String>) -> MessageOutcome {
    MessageOutcome {
        outcome: kind,
        turn_id: None,
        session_id: None,
        new_session: None,
        queue_position: None,
        reply: Some(text.into()),
        attachments: Vec::new(),
    }
}

/// The conversation's bound session, when it was read with the conversation.
pub(crate) enum Bound {
    Read(Option<tether_proto::Session>),
    Unread,
}

impl Router<'_> {
    /// Routes a message to the conversation `target` names (read under its routing
    /// lock, held, with its bound session and whether that has a pending question).
    pub(crate) async fn route_message(
        &self,
        target: MessageTarget,
        req: SendMessage,
        by: &str,
        turn_id: Option<&TurnId>,
    ) -> Result<MessageOutcome> {
        let MessageTarget {
            conversation: conv,
            bound,
            asking,
        } = target;
        let bound = Bound::Read(bound);
        let id = &conv.id.clone();
        if conv.archived {
            return Err(RuntimeError::Archived(id.clone()));
        }
        let names = self.rt.agent_names();
        let known: Vec<&str> = names.iter().map(String::as_str).collect();
        if !req.attachments.is_empty() {
            return self
                .route_with_attachments(conv, bound, req, &known, turn_id)
                .await;
        }
        match parse_input(&req.text, &known)? {
            Input::Command(cmd) => {
                let store = &self.rt.ctx().store;
                store
                    .events()
                    .add_message(id, MessageRole::User, req.text.trim(), None, None)
                    .await?;
                self.run_command(conv, cmd, by, turn_id).await
            }
            Input::Prompt(text) => {
                self.name_from_first_message(&conv, &text).await;
                let overrides = req.agent.is_some() || req.model.is_some();
                if let Some(agent) = req.agent.as_deref().map(str::trim)
                    && !agent.is_empty()
                {
                    // An unknown agent is refused wherever it is named, before anything.
                    self.rt.conversations().agent_spec(agent)?;
                }
                if !overrides
                    && asking
                    && let Some(out) = self.answer_pending_question(&conv, &text, by).await?
                {
                    return Ok(out);
                }
                if conv.kind == tether_proto::ConversationKind::Delegate {
                    let prefs = Preferences {
                        agent: conv.agent.clone(),
                        model: conv.model.clone(),
                    };
                    let requested =
                        apply_overrides(&prefs, req.agent.as_deref(), req.model.as_deref());
                    if requested.agent != prefs.agent || requested.model != prefs.model {
                        // Never drop a choice of agent or model silently.
                        return Err(crate::delegation::err(
                            ErrorCode::InvalidCommand,
                            "a delegated conversation keeps its one session: its agent and \
                             model cannot change (close it and delegate a new task instead)",
                        ));
                    }
                    return self
                        .rt
                        .delegations()
                        .route_delegate_prompt(&conv, text)
                        .await;
                }
                self.route_prompt(
                    conv,
                    bound,
                    text,
                    req.agent.as_deref(),
                    req.model.as_deref(),
                    turn_id,
                )
                .await
            }
        }
    }

    /// An untitled conversation is named by its first prompt (issue 24, first use 4).
    /// Cosmetic: a failure is logged, never the message's.
    async fn name_from_first_message(&self, conv: &ConversationRow, text: &str) {
        if conv.title != tether_core::title::UNTITLED {
            return;
        }
        let Some(title) = tether_core::title::from_message(text) else {
            return;
        };
        let named = self
            .rt
            .ctx()
            .store
            .conversations()
            .name_untitled(&conv.id, tether_core::title::UNTITLED, &title)
            .await;
        if let Err(e) = named {
            tracing::debug!(conversation = %conv.id, error = %e, "cannot title the conversation");
        }
    }

    /// A message with attachments is always a prompt of its own (never a command or an
    /// answer to a question; it may have no text). The attachments are checked, then
    /// given to the turn's id before the turn is handed to its actor, which reads them
    /// when it prompts; if the turn is not stored after all they are free again.
    async fn route_with_attachments(
        &self,
        conv: ConversationRow,
        bound: Bound,
        req: SendMessage,
        known: &[&str],
        turn_id: Option<&TurnId>,
    ) -> Result<MessageOutcome> {
        let text = match req.text.trim() {
            "" => String::new(),
            t => match parse_input(t, known)? {
                Input::Prompt(p) => p,
                Input::Command(_) => return Err(crate::AttachmentError::WithCommand.into()),
            },
        };
        if conv.kind == tether_proto::ConversationKind::Delegate {
            return Err(RuntimeError::BadRequest(
                "a delegated conversation takes text only".to_owned(),
            ));
        }
        let attachments = self
            .rt
            .attachments()
            .message_attachments(&conv.id, &req.attachments)
            .await?;
        let turn_id: TurnId = turn_id.map_or_else(new_id, TurnId::clone);
        let ids: Vec<&AttachmentId> = attachments.iter().map(|a| &a.id).collect();
        let store = &self.rt.ctx().store;
        store
            .attachments()
            .claim_attachments(&conv.id, &ids, &turn_id)
            .await?;
        let routed = self
            .route_prompt(
                conv,
                bound,
                text,
                req.agent.as_deref(),
                req.model.as_deref(),
                Some(&turn_id),
            )
            .await;
        if routed.is_err() && store.conversations().get_turn(&turn_id).await?.is_none() {
            store.attachments().release_attachments(&turn_id).await?;
        }
        routed
    }

    /// A plain message while the agent waits for an answer answers the oldest question.
    async fn answer_pending_question(
        &self,
        conv: &ConversationRow,
        text: &str,
        by: &str,
    ) -> Result<Option<MessageOutcome>> {
        let store = &self.rt.ctx().store;
        let Some(bound) = &conv.bound_session_id else {
            return Ok(None);
        };
        // Only the bound session's questions: after /new a message goes to the new session.
        let pending = store
            .requests()
            .list_questions(Some(QuestionStatus::Pending), Some(&conv.id))
            .await?;
        let Some(q) = pending.iter().rev().find(|q| &q.session_id == bound) else {
            return Ok(None);
        };
        match self.rt.answer_question(&q.id, text, by).await {
            Ok(_) => {}
            // Answered or expired meanwhile: treat the text as a normal message.
            Err(RuntimeError::Resolve(_)) => return Ok(None),
            Err(e) => return Err(e),
        }
        store
            .events()
            .add_message(
                &conv.id,
                MessageRole::User,
                text,
                Some(&q.session_id),
                Some(&q.turn_id),
            )
            .await?;
        Ok(Some(MessageOutcome {
            outcome: MessageOutcomeKind::Answered,
            turn_id: Some(q.turn_id.clone()),
            session_id: Some(q.session_id.clone()),
            new_session: None,
            queue_position: None,
            reply: Some(format!("answered the agent's question: {}", q.prompt)),
            attachments: Vec::new(),
        }))
    }

    /// Picks the session by the binding rules, stores the turn (id `turn_id` when given,
    /// else a new one) and hands it to the actor.
    pub(crate) async fn route_prompt(
        &self,
        conv: ConversationRow,
        bound: Bound,
        text: String,
        agent: Option<&str>,
        model: Option<&str>,
        turn_id: Option<&TurnId>,
    ) -> Result<MessageOutcome> {
        let store = &self.rt.ctx().store;
        // Issue 12: this node claims the conversation before it writes for it, and
        // keeps it while the turn is handed over (the actor holds its own claim).
        let owner = self.rt.ctx().ownership.claim(&conv.id).await?;
        let prefs = Preferences {
            agent: conv.agent.clone(),
            model: conv.model.clone(),
        };
        let requested = apply_overrides(&prefs, agent, model);
        self.rt.conversations().agent_spec(&requested.agent)?;
        if requested.agent != prefs.agent || requested.model != prefs.model {
            store
                .conversations()
                .set_preferences(&conv.id, &requested.agent, requested.model.as_deref())
                .await?;
        }
        let bound = match (bound, &owner) {
            // No claim: nothing changed it since it was read with the conversation.
            (Bound::Read(s), None) => s,
            // A claim may have taken the conversation over, whose recovery changes the
            // session: read after it.
            _ => match &conv.bound_session_id {
                Some(sid) => store.conversations().get_session(sid).await?,
                None => None,
            },
        };
        let bound_view = bound.as_ref().map(|s| BoundSession {
            session_id: s.id.clone(),
            agent: s.agent.clone(),
            model: s.model.clone(),
        });
        let (session, new_reason, status) = match select_session(bound_view.as_ref(), &requested) {
            Selection::Reuse { .. } => match bound {
                Some(s) => (s, None, None),
                None => return Err(RuntimeError::Internal("bound session vanished".to_string())),
            },
            Selection::StartNew {
                reason,
                status_message,
            } => {
                let (reason, status_message) = match (reason, conv.next_session_reason) {
                    (NewSessionReason::Unbound, Some(NewSessionReason::Explicit)) => (
                        NewSessionReason::Explicit,
                        Some(explicit_new_status(&requested.agent)),
                    ),
                    other => (other.0, status_message),
                };
                // An isolated conversation's session works in its worktree (issue 32),
                // made now (a refusal leaves the binding as it was).
                let isolated = self.rt.worktrees().session_cwd(&conv).await?;
                if let Some(old) = &bound {
                    self.leave_session(&conv.id, &old.id).await?;
                }
                let new = NewSession {
                    id: new_id(),
                    conversation_id: conv.id.clone(),
                    agent: requested.agent.clone(),
                    model: requested.model.clone(),
                    cwd: isolated
                        .as_ref()
                        .map_or_else(|| conv.cwd.clone(), |(path, _)| path.clone()),
                };
                let (session, _) = store
                    .conversations()
                    .start_session(&new, reason, status_message.as_deref())
                    .await?;
                if let Some((_, Some(note))) = &isolated {
                    store
                        .events()
                        .add_message(&conv.id, MessageRole::Status, note, Some(&session.id), None)
                        .await?;
                }
                (session, Some(reason), status_message)
            }
        };
        let turn = NewTurn {
            id: turn_id.map_or_else(new_id, TurnId::clone),
            session_id: session.id.clone(),
            conversation_id: conv.id.clone(),
            input: text,
            status: TurnStatus::Queued,
        };
        let owner = conv
            .parent_conversation_id
            .clone()
            .unwrap_or_else(|| conv.id.clone());
        let enqueued = self.run_or_enqueue(&session, &owner, &turn).await?;
        let (outcome, queue_position) = match enqueued {
            Enqueued::Started => (MessageOutcomeKind::Started, None),
            Enqueued::Queued(pos) => (MessageOutcomeKind::Queued, Some(pos)),
            Enqueued::Full(cap) => {
                TurnEnding::queue_full(cap)
                    .record(self.rt.ctx(), &turn.id, &[])
                    .await?;
                return Err(RuntimeError::QueueFull { cap });
            }
        };
        Ok(MessageOutcome {
            outcome,
            turn_id: Some(turn.id),
            session_id: Some(session.id),
            new_session: new_reason,
            queue_position,
            reply: status,
            attachments: Vec::new(),
        })
    }

    /// The conversation left a session (`/new`, `/detach`, drift): its pending approvals
    /// and questions are cancelled (fail closed, with a status line each), and its process
    /// ends once idle.
    pub(crate) async fn leave_session(
        &self,
        conv_id: &ConversationId,
        session_id: &SessionId,
    ) -> Result<()> {
        // Replaced: its agent's MCP token stops working now (issue 16).
        self.rt.ctx().delegation.revoke(session_id);
        let deliveries =
            crate::session::answers::cancel_left_requests(self.rt.ctx(), conv_id, session_id)
                .await?;
        // The store has the outcome already: a delivery that fails (no actor: nothing
        // waits for it; a full mailbox) does not undo the switch.
        let actor = self.actor(To::Running(session_id));
        for d in deliveries {
            if let Err(e) = actor.deliver(d).await {
                tracing::warn!(%session_id, error = %e, "cannot tell the left session");
            }
        }
        if let Err(e) = actor.park().await {
            tracing::warn!(%session_id, error = %e, "cannot tell the left session");
        }
        Ok(())
    }

    /// Cancels every running turn of the conversation (its bound session and any other
    /// session of it with an open turn). The actors decide what runs, not the store: a
    /// turn handed over a moment ago is stopped too.
    pub(crate) async fn stop_running(&self, conv_id: &ConversationId) -> Result<MessageOutcome> {
        let conv = self.rt.conversations().conversation_row(conv_id).await?;
        let open = self
            .rt
            .ctx()
            .store
            .conversations()
            .open_turns(conv_id)
            .await?;
        let mut sessions: Vec<SessionId> = conv.bound_session_id.into_iter().collect();
        for t in &open {
            if !sessions.contains(&t.session_id) {
                sessions.push(t.session_id.clone());
            }
        }
        let mut stopped = None;
        for sid in sessions {
            // No actor: nothing runs there.
            let asked = self.actor(To::Running(&sid)).stop().await;
            if let Ok(Some(true)) = asked {
                stopped = Some(sid);
            }
        }
        if stopped.is_some() {
            // Children started in the stopped turn are cancelled with it.
            for t in open.iter().filter(|t| t.status != TurnStatus::Queued) {
                self.rt.delegations().cancel_children_of_turn(&t.id).await;
            }
        }
        let Some(session_id) = stopped else {
            return Err(RuntimeError::NothingRunning);
        };
        let turn_id = open
            .iter()
            .find(|t| t.session_id == session_id && t.status != TurnStatus::Queued)
            .or_else(|| open.iter().find(|t| t.session_id == session_id))
            .map(|t| t.id.clone());
        Ok(MessageOutcome {
            outcome: MessageOutcomeKind::Command,
            turn_id,
            session_id: Some(session_id),
            new_session: None,
            queue_position: None,
            reply: Some("stopping the running turn".to_string()),
            attachments: Vec::new(),
        })
    }
}
