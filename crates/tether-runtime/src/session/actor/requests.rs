//! The session actor's approvals and questions: stored before anyone is told, expired
//! after their deadline, cancelled with the turn (a child module of `actor`).

use tether_agents::{AgentEvent, PermissionReply};
use tether_proto::{ApprovalId, ApprovalStatus, QuestionId, QuestionStatus};
use tether_store::{NewApproval, NewQuestion};

use super::Actor;
use crate::ids::new_id;
use crate::session::command::Pending;
use crate::session::mailbox::ActorHandle;

impl Actor {
    pub(super) async fn on_special(&mut self, ev: AgentEvent) {
        if let AgentEvent::Usage(report) = ev {
            // Counted whatever the turn's state: the tokens were spent.
            if self.on_usage(Some(report)).await {
                self.stop().await;
            }
            return;
        }
        if let AgentEvent::Window(report) = ev {
            if self.on_window(report).await {
                self.stop().await;
            }
            return;
        }
        let stopping = self
            .current
            .as_ref()
            .is_none_or(|c| c.cancel_requested || c.timed_out || c.over_budget.is_some());
        if stopping {
            // The turn is being stopped: nobody may grant anything for it any more.
            match ev {
                AgentEvent::Permission(req) => {
                    let _ = req.reply.send(PermissionReply::Cancelled);
                }
                AgentEvent::Question(req) => {
                    let _ = req.reply.send(None);
                }
                AgentEvent::MessageDelta(_)
                | AgentEvent::ThoughtDelta(_)
                | AgentEvent::ToolCall { .. }
                | AgentEvent::ToolCallUpdate { .. }
                | AgentEvent::Usage(_)
                | AgentEvent::Window(_) => {}
            }
            return;
        }
        let Some(turn_id) = self.current.as_ref().map(|c| c.turn_id.clone()) else {
            return;
        };
        let deadline_ms =
            self.ctx.clock.now_ms() + self.ctx.config.approval_timeout.as_millis() as i64;
        match ev {
            AgentEvent::Permission(req) => {
                let id: ApprovalId = new_id();
                let row = NewApproval {
                    id: id.clone(),
                    conversation_id: self.session.conversation_id.clone(),
                    session_id: self.session.id.clone(),
                    turn_id,
                    title: req.title,
                    kind: req.kind,
                    detail: req.detail,
                    options: req.options,
                    deadline_ms,
                };
                let store = self.ctx.store.clone();
                let tried = std::sync::atomic::AtomicBool::new(false);
                // A try whose commit's answer was lost may have stored it: read back first.
                let create = || {
                    let again = tried.swap(true, std::sync::atomic::Ordering::Relaxed);
                    let (store, row) = (&store, &row);
                    async move {
                        if again && store.requests().get_approval(&row.id).await?.is_some() {
                            return Ok(());
                        }
                        store.requests().create_approval(row).await.map(drop)
                    }
                };
                match self.store_in_order("an approval", create).await {
                    Some(Ok(())) => {
                        self.approvals.insert(id.clone(), req.reply);
                        self.wait_span("approval", id.as_str());
                        self.schedule_expiry(Pending::Approval(id), deadline_ms);
                    }
                    Some(Err(e)) => {
                        tracing::error!(error = %e, "cannot store approval; denying");
                        let _ = req.reply.send(PermissionReply::Cancelled);
                    }
                    None => {
                        let _ = req.reply.send(PermissionReply::Cancelled);
                    }
                }
            }
            AgentEvent::Question(req) => {
                let id: QuestionId = new_id();
                let row = NewQuestion {
                    id: id.clone(),
                    conversation_id: self.session.conversation_id.clone(),
                    session_id: self.session.id.clone(),
                    turn_id,
                    prompt: req.prompt,
                    deadline_ms,
                };
                let store = self.ctx.store.clone();
                let tried = std::sync::atomic::AtomicBool::new(false);
                let create = || {
                    let again = tried.swap(true, std::sync::atomic::Ordering::Relaxed);
                    let (store, row) = (&store, &row);
                    async move {
                        if again && store.requests().get_question(&row.id).await?.is_some() {
                            return Ok(());
                        }
                        store.requests().create_question(row).await.map(drop)
                    }
                };
                match self.store_in_order("a question", create).await {
                    Some(Ok(())) => {
                        self.questions.insert(id.clone(), req.reply);
                        self.wait_span("question", id.as_str());
                        self.schedule_expiry(Pending::Question(id), deadline_ms);
                    }
                    Some(Err(e)) => {
                        tracing::error!(error = %e, "cannot store question; cancelling it");
                        let _ = req.reply.send(None);
                    }
                    None => {
                        let _ = req.reply.send(None);
                    }
                }
            }
            AgentEvent::MessageDelta(_)
            | AgentEvent::ThoughtDelta(_)
            | AgentEvent::ToolCall { .. }
            | AgentEvent::ToolCallUpdate { .. }
            | AgentEvent::Usage(_)
            | AgentEvent::Window(_) => {}
        }
        if self.parked {
            // The conversation has left this session: nobody answers from there, so the
            // request fails closed at once, as those pending when it left did.
            let cancelled = crate::session::answers::cancel_left_requests(
                &self.ctx,
                &self.session.conversation_id,
                &self.session.id,
            )
            .await;
            match cancelled {
                Ok(deliveries) => deliveries.into_iter().for_each(|d| self.deliver(d)),
                Err(e) => tracing::error!(error = %e, "cannot cancel a request of a left session"),
            }
        }
    }

    /// After the deadline, expire the request in the store (if still pending) and tell
    /// the agent.
    pub(super) fn schedule_expiry(&self, pending: Pending, deadline_ms: i64) {
        let ctx = self.ctx.clone();
        let me = self.me.clone();
        let wait = ctx.clock.sleep_until(deadline_ms);
        tokio::spawn(async move {
            wait.await;
            let me = me.upgrade().map(|tx| ActorHandle { tx });
            crate::session::answers::expire(&ctx, &pending, me.as_ref()).await;
        });
    }

    /// Resolves this turn's pending approvals and questions as cancelled/expired.
    pub(super) async fn cancel_pending(&mut self, status: ApprovalStatus) {
        for (id, tx) in self.approvals.drain() {
            match self
                .ctx
                .store
                .requests()
                .resolve_approval(&id, status, None)
                .await
            {
                Ok(_) => {}
                Err(e) => tracing::error!(error = %e, "cannot cancel approval"),
            }
            let _ = tx.send(PermissionReply::Cancelled);
        }
        let qstatus = match status {
            ApprovalStatus::Expired => QuestionStatus::Expired,
            _ => QuestionStatus::Cancelled,
        };
        for (id, tx) in self.questions.drain() {
            match self
                .ctx
                .store
                .requests()
                .resolve_question(&id, qstatus, None, None)
                .await
            {
                Ok(_) => {}
                Err(e) => tracing::error!(error = %e, "cannot cancel question"),
            }
            let _ = tx.send(None);
        }
    }
}

impl Actor {
    /// A span from an approval's or question's asking to its answer (issue 31), a child
    /// of the turn's; ended when it is resolved (or with the turn).
    fn wait_span(&mut self, kind: &'static str, id: &str) {
        if let Some(cur) = self.current.as_ref() {
            let span = tracing::info_span!(parent: &cur.span, "tether.wait", otel.name = kind, request_id = id);
            self.waits.insert(id.to_owned(), span);
        }
    }
}
