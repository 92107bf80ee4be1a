//! The runtime's public face: what the HTTP API and the channels call.

use std::sync::Arc;

use tether_proto::{
    Conversation, ConversationId, ConversationKind, CreateConversation, EventEnvelope, EventPage,
    HistoryMessage, MessageOutcome, SendMessage, Session, SessionId, Turn, TurnId,
    UpdateConversation,
};
use tether_store::Store;

use crate::ctx::Ctx;
use crate::error::Result;
use crate::ids::new_id;
use crate::session::actor::Actor;
use crate::session::actors::{Actors, To};
use crate::session::handle::SessionActor;
use crate::session::mailbox::ActorHandle;
use crate::session::routing::{RoutingLock, RoutingLocks, RoutingScope};
use crate::{RuntimeConfig, RuntimeError};

/// Cheap to clone; all clones share one runtime.
#[derive(Clone)]
pub struct Runtime {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub ctx: Arc<Ctx>,
    /// Session actors by session id (only sessions with a process or work have one).
    actors: Arc<Actors>,
    /// One routing lock per conversation: binding decisions never interleave.
    routing: RoutingLocks,
    /// Where commands run when other nodes share the store (issue 12).
    pub cluster: crate::cluster::Cluster,
}

impl Runtime {
    /// Opens the runtime on a store, running start-up recovery first: open turns become
    /// `interrupted`, pending approvals and questions `expired`, sessions dormant; each
    /// affected conversation gets one status message. Bindings are kept.
    pub async fn start(config: RuntimeConfig, store: Store) -> Result<Runtime> {
        Self::start_with(config, store, crate::Seams::default()).await
    }

    /// [`Runtime::start`] with the given agent drivers and clock (in-process tests run
    /// the runtime on a scripted agent and a clock they set).
    pub async fn start_with(
        config: RuntimeConfig,
        store: Store,
        seams: crate::Seams,
    ) -> Result<Runtime> {
        let records = crate::ctx::end_leftover_agents(&config);
        crate::attachments::blobs::Blobs::of(&config).tighten();
        // SQLite: the whole store; PostgreSQL: only what this node owned and orphans.
        let report = crate::ownership::failover::recover_at_start(
            &store,
            &config.cluster.node_id,
            seams.clock.as_ref(),
        )
        .await?;
        if !report.conversations.is_empty() || report.sessions_made_dormant > 0 {
            tracing::info!(
                conversations = report.conversations.len(),
                sessions = report.sessions_made_dormant,
                "recovered after restart"
            );
        }
        let cluster = crate::cluster::Cluster::new(config.cluster.clone(), &store);
        let ctx = Ctx::new(store, config, records, seams);
        if ctx.ownership.clustered() {
            crate::ownership::failover::start_sweep(
                Arc::downgrade(&ctx),
                ctx.config.cluster.node_id.clone(),
                ctx.config.cluster.lease_ttl,
            );
        }
        if let Some(every) = ctx.pool.sweep_interval() {
            let weak = Arc::downgrade(&ctx);
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(every);
                loop {
                    tick.tick().await;
                    match weak.upgrade() {
                        Some(ctx) => ctx.pool.sweep(),
                        None => return,
                    }
                }
            });
        }
        let rt = Runtime {
            inner: Arc::new(Inner {
                ctx,
                actors: Arc::new(Actors::new(Actor::spawn)),
                routing: RoutingLocks::default(),
                cluster,
            }),
        };
        rt.start_delegation_watch();
        rt.start_cluster();
        rt.ctx().spares.fill();
        Ok(rt)
    }

    pub(crate) fn ctx(&self) -> &Ctx {
        &self.inner.ctx
    }

    /// The live pool's state.
    pub fn pool_status(&self) -> crate::PoolStatus {
        let mut status = self.ctx().pool.status();
        status.spares = self.ctx().spares.views();
        status
    }

    /// Whether this node can serve now: its store answers (issue 25).
    pub async fn ready(&self) -> Result<()> {
        Ok(self.ctx().store.ready().await?)
    }

    /// Names of the configured agents.
    pub fn agent_names(&self) -> Vec<String> {
        self.ctx().config.agents.keys().cloned().collect()
    }

    /// Where conversations may work: the workspace roots and the default folder.
    pub fn workspace(&self) -> tether_proto::Workspace {
        crate::cwd::workspace(&self.ctx().config)
    }

    pub(crate) async fn lock_conversation(&self, id: &ConversationId) -> RoutingLock {
        self.inner
            .routing
            .lock(RoutingScope::Conversation(id.clone()))
            .await
    }

    /// The lock of a parent conversation's delegations (see [`RoutingScope::Delegations`]).
    pub(crate) async fn lock_delegations_of(&self, parent: &ConversationId) -> RoutingLock {
        self.inner
            .routing
            .lock(RoutingScope::Delegations(parent.clone()))
            .await
    }

    /// Writes on behalf of a conversation refused because another node took it over
    /// (fencing, issue 12) since start-up.
    pub fn fenced_writes(&self) -> u64 {
        self.ctx().store.fenced_writes()
    }

    /// Store calls (database round trips) made since start-up.
    pub fn store_calls(&self) -> u64 {
        self.ctx().store.calls()
    }

    /// Streamed agent events stored since start-up and the store transactions they took.
    pub fn streamed_figures(&self) -> (u64, u64) {
        self.ctx().streamed.get()
    }

    /// Routing locks currently held or waited for (one per conversation in use).
    pub fn routing_locks(&self) -> usize {
        self.inner.routing.len()
    }

    /// The routing lock of an existing conversation and its row as read under it (an
    /// unknown id is `not_found`; its lock entry goes with the guard).
    pub(crate) async fn lock_existing(
        &self,
        id: &ConversationId,
    ) -> Result<(RoutingLock, tether_store::ConversationRow)> {
        let guard = self.lock_conversation(id).await;
        let row = self.conversation_row(id).await?;
        Ok((guard, row))
    }

    /// Session actors running now: a dormant session with nothing to do has none.
    pub fn actors(&self) -> usize {
        self.inner.actors.count()
    }

    /// The typed handle of a session's actor (spawned for `To::Session` if none runs).
    pub(crate) fn actor<'a>(&'a self, to: To<'a>) -> SessionActor<'a> {
        SessionActor::new(&self.inner.actors, &self.inner.ctx, to)
    }

    /// The actor of a session if one is running.
    pub(crate) fn existing_actor(&self, session_id: &SessionId) -> Option<ActorHandle> {
        self.inner.actors.running(session_id)
    }

    pub(crate) fn agent_spec(&self, name: &str) -> Result<tether_agents::AgentSpec> {
        self.ctx()
            .config
            .agents
            .get(name)
            .cloned()
            .ok_or_else(|| RuntimeError::UnknownAgent {
                name: name.to_string(),
                known: self.agent_names().join(", "),
            })
    }

    pub(crate) async fn create_here(&self, req: CreateConversation) -> Result<Conversation> {
        let cfg = &self.ctx().config;
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
        let id: ConversationId = new_id();
        let row = self
            .ctx()
            .store
            .create_conversation(
                &id,
                ConversationKind::Chat,
                &title,
                &agent,
                model.as_deref(),
                &cwd,
                None,
            )
            .await?;
        self.view(row).await
    }

    pub async fn list_conversations(&self, include_archived: bool) -> Result<Vec<Conversation>> {
        let rows = self
            .ctx()
            .store
            .list_conversations(include_archived)
            .await?;
        self.views(rows).await
    }

    pub async fn get_conversation(&self, id: &ConversationId) -> Result<Conversation> {
        let row = self.conversation_row(id).await?;
        self.view(row).await
    }

    pub(crate) async fn conversation_row(
        &self,
        id: &ConversationId,
    ) -> Result<tether_store::ConversationRow> {
        self.ctx()
            .store
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
        self.ctx()
            .store
            .update_conversation(id, title.as_deref(), req.archived)
            .await?;
        if req.archived == Some(true) {
            // Its agents' MCP tokens die with it (callers of an archived conversation are
            // refused too).
            self.ctx().delegation.revoke_conversation(id);
            // Archiving is how a person removes a conversation: its delegated children are
            // released (running turns cancelled, processes ended, history kept).
            let released = self.release_children(id).await?;
            // Archiving is the removal: the files sent in it go (rows and bytes).
            self.remove_attachments(id).await?;
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

    /// A message, under the conversation's routing lock. With `turn_id` (a message that
    /// may be delivered again), a prompt whose turn is stored already is not routed again
    /// (outcome `started`, no reply).
    pub(crate) async fn send_here(
        &self,
        id: &ConversationId,
        req: SendMessage,
        by: &str,
        turn_id: Option<&TurnId>,
    ) -> Result<MessageOutcome> {
        let (_guard, conv) = self.lock_existing(id).await?;
        if let Some(turn_id) = turn_id
            && let Some(t) = self.ctx().store.get_turn(turn_id).await?
        {
            return Ok(MessageOutcome {
                outcome: tether_proto::MessageOutcomeKind::Started,
                turn_id: Some(t.id),
                session_id: Some(t.session_id),
                new_session: None,
                queue_position: None,
                reply: None,
                attachments: Vec::new(),
            });
        }
        self.route_message(conv, req, by, turn_id).await
    }

    /// History (user, agent, status and command messages), oldest first, `id > after_id`.
    pub async fn history(
        &self,
        id: &ConversationId,
        after_id: Option<i64>,
        limit: u32,
    ) -> Result<Vec<HistoryMessage>> {
        self.conversation_row(id).await?;
        let page = self
            .ctx()
            .store
            .history(id, after_id.unwrap_or(0), limit.clamp(1, 1000))
            .await?;
        self.with_attachments(page).await
    }

    /// The conversation's events with global id `> after_id`, oldest first.
    pub async fn conversation_events(
        &self,
        id: &ConversationId,
        after_id: i64,
        limit: u32,
    ) -> Result<Vec<EventEnvelope>> {
        self.conversation_row(id).await?;
        Ok(self
            .ctx()
            .store
            .conversation_events(id, after_id, limit.clamp(1, 1000))
            .await?)
    }

    pub async fn get_session(&self, id: &SessionId) -> Result<Session> {
        self.ctx()
            .store
            .get_session(id)
            .await?
            .ok_or_else(|| RuntimeError::NotFound {
                what: "session",
                id: id.to_string(),
            })
    }

    pub async fn session_turns(&self, id: &SessionId) -> Result<Vec<Turn>> {
        self.get_session(id).await?;
        Ok(self.ctx().store.session_turns(id).await?)
    }

    pub async fn session_events(
        &self,
        id: &SessionId,
        after_seq: i64,
        limit: u32,
    ) -> Result<EventPage> {
        self.get_session(id).await?;
        let events = self
            .ctx()
            .store
            .session_events(id, after_seq, limit.clamp(1, 1000))
            .await?;
        let next_after_seq = events.last().map(|e| e.seq);
        Ok(EventPage {
            events,
            next_after_seq,
        })
    }

    /// Stops every live session (processes ended and reaped); running turns end as
    /// `interrupted`.
    pub async fn shutdown(&self) {
        self.begin_shutdown();
        let handles = self.inner.actors.close();
        let all = futures::future::join_all(handles.iter().map(ActorHandle::shutdown)).await;
        if all.iter().any(Result::is_err) {
            tracing::warn!("some sessions did not shut down in time");
        }
        // The sessions left their shared processes: end those now, not after their idle
        // time.
        self.ctx().pool.end_processes().await;
        self.ctx().spares.shutdown().await;
    }
}
