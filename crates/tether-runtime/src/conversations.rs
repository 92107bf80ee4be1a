//! The conversation service: creates and updates conversations (through `Runtime::call`
//! on their owner) and reads them, their sessions, turns, events and history.

use tether_proto::{
    Conversation, ConversationId, ConversationKind, CreateConversation, EventEnvelope, EventPage,
    HistoryMessage, Session, SessionId, UpdateConversation,
};

use tether_proto::PersonId;
use tether_store::NewConversation;

use crate::RuntimeError;
use crate::access::Access;
use crate::error::Result;
use crate::ids::new_id;

/// The conversation service: creates, updates and reads conversations, sessions and their
/// history. A view of the runtime (cheap, `Copy`), reached through
/// `Runtime::conversations()`.
#[derive(Clone, Copy)]
pub(crate) struct Conversations<'a> {
    pub(crate) rt: &'a crate::Runtime,
}

impl<'a> Conversations<'a> {
    pub(crate) fn new(rt: &'a crate::Runtime) -> Self {
        Conversations { rt }
    }
}

impl Conversations<'_> {
    pub(crate) fn agent_spec(&self, name: &str) -> Result<tether_agents::AgentSpec> {
        self.rt
            .ctx()
            .config
            .agents
            .get(name)
            .cloned()
            .ok_or_else(|| RuntimeError::UnknownAgent {
                name: name.to_string(),
                known: self.rt.agent_names().join(", "),
            })
    }

    pub(crate) async fn create_here(
        &self,
        req: CreateConversation,
        owner: &PersonId,
    ) -> Result<Conversation> {
        let cfg = &self.rt.ctx().config;
        let agent = req.agent.unwrap_or_else(|| cfg.default_agent.clone());
        self.agent_spec(&agent)?;
        let cwd = match req.cwd {
            Some(c) => crate::cwd::validate(&c, cfg)?,
            None => cfg.default_cwd.display().to_string(),
        };
        // `"default"` (as in `/model default`) and blank both mean the agent's default.
        let model = req
            .model
            .as_deref()
            .and_then(tether_core::model_choice)
            .map(str::to_string);
        let title = req
            .title
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
            .unwrap_or_else(|| tether_core::title::UNTITLED.to_string());
        // Isolation (issue 32): asked for, or the default of the directory's root. A
        // directory outside git cannot be isolated: said now, nothing created.
        let isolate = match req.isolation {
            Some(tether_proto::Isolation::Worktree) => {
                crate::worktree::git::toplevel(std::path::Path::new(&cwd)).await?;
                true
            }
            Some(tether_proto::Isolation::None) => false,
            None => {
                cfg.worktrees
                    .isolate_roots
                    .iter()
                    .any(|r| std::path::Path::new(&cwd).starts_with(r))
                    && crate::worktree::git::toplevel(std::path::Path::new(&cwd))
                        .await
                        .is_ok()
            }
        };
        let id: ConversationId = new_id();
        let row = self
            .rt
            .ctx()
            .store
            .conversations()
            .create_conversation(&NewConversation {
                id: &id,
                kind: ConversationKind::Chat,
                title: &title,
                agent: &agent,
                model: model.as_deref(),
                cwd: &cwd,
                parent_conversation_id: None,
                owner_id: Some(owner),
                visibility: Access::visibility(req.visibility),
            })
            .await?;
        if isolate {
            self.rt.worktrees().set_isolation(&id, true).await?;
        }
        self.view(row).await
    }

    pub(crate) async fn get_conversation(&self, id: &ConversationId) -> Result<Conversation> {
        let row = self.readable_row(id).await?;
        self.view(row).await
    }

    /// The row of a conversation the acting person may read (one they may not is
    /// `not_found`, as one that does not exist).
    pub(crate) async fn readable_row(
        &self,
        id: &ConversationId,
    ) -> Result<tether_store::ConversationRow> {
        let row = self.conversation_row(id).await?;
        if let Some(who) = self.rt.who.as_deref() {
            self.rt
                .access()
                .decide_row(who, tether_core::authz::Action::Read, &row)?;
        }
        Ok(row)
    }

    /// [`Self::conversation_row`], with its bound session and whether that has a pending
    /// question.
    pub(crate) async fn conversation_for_message(
        &self,
        id: &ConversationId,
    ) -> Result<tether_store::MessageTarget> {
        self.rt
            .ctx()
            .store
            .conversations()
            .conversation_for_message(id)
            .await?
            .ok_or_else(|| RuntimeError::NotFound {
                what: "conversation",
                id: id.to_string(),
            })
    }

    pub(crate) async fn conversation_row(
        &self,
        id: &ConversationId,
    ) -> Result<tether_store::ConversationRow> {
        self.rt
            .ctx()
            .store
            .conversations()
            .get_conversation(id)
            .await?
            .ok_or_else(|| RuntimeError::NotFound {
                what: "conversation",
                id: id.to_string(),
            })
    }

    pub(crate) async fn update_here(
        &self,
        id: &ConversationId,
        req: UpdateConversation,
    ) -> Result<Conversation> {
        self.conversation_row(id).await?;
        let title = req.title.map(|t| t.trim().to_string());
        if title.as_deref() == Some("") {
            return Err(RuntimeError::BadRequest(
                "title must not be empty".to_string(),
            ));
        }
        self.rt
            .ctx()
            .store
            .conversations()
            .update_conversation(id, title.as_deref(), req.archived)
            .await?;
        if let Some(visibility) = req.visibility {
            self.rt
                .ctx()
                .store
                .conversations()
                .set_visibility(id, visibility)
                .await?;
        }
        if let Some(archived) = req.archived {
            self.rt.worktrees().archived(id, archived).await?;
        }
        if req.archived == Some(true) {
            // Its agents' MCP tokens die with it (callers of an archived conversation are
            // refused too).
            self.rt.ctx().delegation.revoke_conversation(id);
            // Archiving is how a person removes a conversation: its delegated children are
            // released (running turns cancelled, processes ended, history kept).
            let released = self.rt.delegations().release_children(id).await?;
            // Archiving is the removal: the files sent in it go (rows and bytes).
            self.rt.attachments().remove_attachments(id).await?;
            if released > 0 {
                tracing::info!(
                    conversation = %id,
                    released,
                    "archived: released its children"
                );
            }
        }
        self.get_conversation(id).await
    }

    /// History (user, agent, status and command messages), oldest first, `id > after_id`.
    pub(crate) async fn history(
        &self,
        id: &ConversationId,
        after_id: Option<i64>,
        limit: u32,
    ) -> Result<Vec<HistoryMessage>> {
        self.readable_row(id).await?;
        let page = self
            .rt
            .ctx()
            .store
            .events()
            .history(id, after_id.unwrap_or(0), limit.clamp(1, 1000))
            .await?;
        self.rt.attachments().with_attachments(page).await
    }

    /// The conversation's events with global id `> after_id`, oldest first.
    pub(crate) async fn conversation_events(
        &self,
        id: &ConversationId,
        after_id: i64,
        limit: u32,
    ) -> Result<Vec<EventEnvelope>> {
        self.readable_row(id).await?;
        Ok(self
            .rt
            .ctx()
            .store
            .events()
            .conversation_events(id, after_id, limit.clamp(1, 1000))
            .await?)
    }

    pub(crate) async fn get_session(&self, id: &SessionId) -> Result<Session> {
        self.rt.access().read_session(id).await?;
        self.rt
            .ctx()
            .store
            .conversations()
            .get_session(id)
            .await?
            .ok_or_else(|| RuntimeError::NotFound {
                what: "session",
                id: id.to_string(),
            })
    }

    pub(crate) async fn session_events(
        &self,
        id: &SessionId,
        after_seq: i64,
        limit: u32,
    ) -> Result<EventPage> {
        self.get_session(id).await?;
        let events = self
            .rt
            .ctx()
            .store
            .events()
            .session_events(id, after_seq, limit.clamp(1, 1000))
            .await?;
        let next_after_seq = events.last().map(|e| e.seq);
        Ok(EventPage {
            events,
            next_after_seq,
        })
    }
}
