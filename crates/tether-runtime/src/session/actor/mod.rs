//! The session actor: the one owner of a runtime session. It holds the agent process,
//! runs one turn at a time, keeps the queue of follow-ups, turns agent events into stored
//! events, and delivers answers to approvals and questions.
//!
//! Durability of events: a turn's end, an approval and a question are committed to the
//! store before anyone (subscriber, channel, agent) is told of them. Streamed events
//! (deltas, tool calls) are stored in coalesced batches (see `events`), each
//! flushed before any other event of the session, so a crash can lose only the not yet
//! flushed streamed events of a running turn, which start-up recovery then marks
//! interrupted.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Weak};

use tether_agents::{
    AgentError, AgentEvent, AgentSession, AgentSpec, PermissionReply, StartRequest, StopReason,
    TurnOutcome,
};
use tether_core::TurnQueue;
use tether_proto::{
    ApprovalStatus, ErrorCode, EventPayload, MessageRole, QuestionStatus, Session, SessionStatus,
    TurnStatus,
};
use tether_store::{NewApproval, NewMessage, NewQuestion, TurnEnd, now_ms};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::ctx::{Ctx, new_id};
use crate::session::mailbox::{ActorHandle, Actors, MAILBOX_CAP};
use crate::session::turn_step::{Step, deadline_sleep, join_opt, recv_opt};

/// Grace for an agent to end a cancelled turn before its process is killed.
pub(crate) const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(5);
/// How often a cancel is repeated while the agent has not ended the turn.
const CANCEL_REPEAT: std::time::Duration = std::time::Duration::from_millis(250);

pub(crate) enum ActorCmd {
    /// Run this (already stored, `queued`) turn now or after the running one.
    Enqueue {
        turn_id: String,
        input: String,
        reply: oneshot::Sender<Enqueued>,
    },
    /// Cancel the running turn; replies whether one was running.
    Stop { reply: oneshot::Sender<bool> },
    /// An approval was resolved in the store; pass the decision to the agent.
    DeliverApproval {
        approval_id: String,
        reply: PermissionReply,
    },
    /// A question was resolved in the store; pass the answer to the agent.
    DeliverAnswer {
        question_id: String,
        answer: Option<String>,
    },
    /// The session is no longer bound: end its process once the queue is empty.
    Park,
    /// The live pool needs room: end the process if no turn runs.
    Evict { reason: String },
    /// End everything now (daemon shutdown).
    Shutdown { done: oneshot::Sender<()> },
    /// Delegation: make the session live (strict resume) without running a turn.
    EnsureLive {
        reply: oneshot::Sender<Result<(), (ErrorCode, String)>>,
    },
    /// Delegation: release the session: stop a running turn, end the process, end the
    /// actor; replies once done.
    Close { reply: oneshot::Sender<()> },
}

mod delegation;
mod events;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Enqueued {
    Started,
    Queued(u32),
    Full(usize),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum DeadlineKind {
    TurnTimeout,
    StopGrace,
}

struct Current {
    turn_id: String,
    input: String,
    cancel_requested: bool,
    timed_out: bool,
    text: String,
}

pub(crate) struct Actor {
    ctx: Arc<Ctx>,
    session: Session,
    spec: AgentSpec,
    /// Pool owner: the parent conversation for delegated work, else the conversation.
    owner: String,
    rx: mpsc::Receiver<ActorCmd>,
    me: mpsc::WeakSender<ActorCmd>,
    /// The registry this actor leaves when it ends (weak: a dropped runtime ends it).
    actors: Weak<Actors>,
    live: Option<Arc<dyn AgentSession>>,
    queue: TurnQueue<(String, String)>,
    current: Option<Current>,
    task: Option<JoinHandle<Step>>,
    events: Option<mpsc::UnboundedReceiver<AgentEvent>>,
    deadline: Option<(Instant, DeadlineKind)>,
    /// Repeats the agent's cancel until the turn ends (a cancel that races the prompt's
    /// start would otherwise be lost).
    canceller: Option<JoinHandle<()>>,
    approvals: HashMap<String, tokio::sync::oneshot::Sender<PermissionReply>>,
    questions: HashMap<String, tokio::sync::oneshot::Sender<Option<String>>>,
    parked: bool,
    /// Delegation: `Close` requests waiting for the running turn to end.
    closing: Vec<oneshot::Sender<()>>,
}

impl Actor {
    /// Spawns the actor for `session` and returns its handle.
    pub fn spawn(
        ctx: Arc<Ctx>,
        actors: Weak<Actors>,
        session: Session,
        spec: AgentSpec,
        owner: String,
    ) -> ActorHandle {
        let (tx, rx) = mpsc::channel(MAILBOX_CAP);
        let queue = TurnQueue::new(ctx.config.queue_cap);
        let actor = Actor {
            ctx,
            session,
            spec,
            owner,
            rx,
            me: tx.downgrade(),
            actors,
            live: None,
            queue,
            current: None,
            task: None,
            events: None,
            deadline: None,
            canceller: None,
            approvals: HashMap::new(),
            questions: HashMap::new(),
            parked: false,
            closing: Vec::new(),
        };
        tokio::spawn(actor.run());
        ActorHandle { tx }
    }

    /// The live pool's owner: the parent conversation of a delegated child, else none
    /// (a conversation's own session is not counted in any owner's cap).
    fn pool_owner(&self) -> Option<&str> {
        Some(self.owner.as_str()).filter(|o| *o != self.session.conversation_id)
    }

    async fn run(mut self) {
        loop {
            if self.current.is_none() && !self.closing.is_empty() {
                self.finish_close().await;
                match self.actors.upgrade() {
                    Some(actors) => actors.leave(&mut self.rx, &self.session.id),
                    None => self.rx.close(),
                }
                self.hand_over_rest().await;
                return;
            }
            if self.current.is_none() {
                if let Some((turn_id, input)) = self.queue.pop() {
                    self.begin(turn_id, input).await;
                    continue;
                }
                if self.parked && self.live.is_some() {
                    self.go_dormant("the session is no longer bound").await;
                }
                // Dormant costs nothing: with no process and nothing to do, the actor
                // ends; the next command starts another.
                if self.quiet() && self.retire() {
                    self.hand_over_rest().await;
                    return;
                }
            }
            tokio::select! {
                cmd = self.rx.recv() => match cmd {
                    Some(ActorCmd::Shutdown { done }) => {
                        self.shutdown().await;
                        let _ = done.send(());
                        return;
                    }
                    Some(cmd) => self.on_cmd(cmd).await,
                    None => {
                        self.shutdown().await;
                        return;
                    }
                },
                step = join_opt(&mut self.task) => {
                    self.task = None;
                    self.on_step(step).await;
                }
                ev = recv_opt(&mut self.events) => match ev {
                    Some(ev) => self.on_agent_event(ev).await,
                    None => self.events = None,
                },
                kind = deadline_sleep(self.deadline) => {
                    self.deadline = None;
                    self.on_deadline(kind).await;
                }
            }
        }
    }

    /// No process, no turn, nothing queued or waiting for a person.
    fn quiet(&self) -> bool {
        self.live.is_none()
            && self.current.is_none()
            && self.queue.is_empty()
            && self.task.is_none()
            && self.closing.is_empty()
            && self.approvals.is_empty()
            && self.questions.is_empty()
    }

    /// Leaves the registry if no mail waits (the mailbox is closed then).
    fn retire(&mut self) -> bool {
        match self.actors.upgrade() {
            Some(actors) => actors.retire(&mut self.rx, &self.session.id),
            // The runtime is gone: nobody can send a command that matters any more.
            None => {
                self.rx.close();
                true
            }
        }
    }

    /// After the mailbox closed: what senders put in it just before goes to a successor.
    async fn hand_over_rest(&mut self) {
        let mut left = Vec::new();
        // Returns `None` once the mailbox is empty and no sender holds a slot in it.
        while let Some(cmd) = self.rx.recv().await {
            left.push(cmd);
        }
        Actors::hand_over(
            &self.actors,
            &self.ctx,
            self.session.clone(),
            self.owner.clone(),
            left,
        );
    }

    /// Passes an answer to the agent's waiting request (a delivery this actor made to
    /// itself: never through its own mailbox, which may be full).
    fn deliver(&mut self, cmd: ActorCmd) {
        match cmd {
            ActorCmd::DeliverApproval { approval_id, reply } => {
                if let Some(tx) = self.approvals.remove(&approval_id) {
                    let _ = tx.send(reply);
                }
            }
            ActorCmd::DeliverAnswer {
                question_id,
                answer,
            } => {
                if let Some(tx) = self.questions.remove(&question_id) {
                    let _ = tx.send(answer);
                }
            }
            ActorCmd::Enqueue { .. }
            | ActorCmd::Stop { .. }
            | ActorCmd::Park
            | ActorCmd::Evict { .. }
            | ActorCmd::Shutdown { .. }
            | ActorCmd::EnsureLive { .. }
            | ActorCmd::Close { .. } => {
                tracing::warn!("not a delivery; ignored");
            }
        }
    }

    async fn on_cmd(&mut self, cmd: ActorCmd) {
        match cmd {
            ActorCmd::Enqueue {
                turn_id,
                input,
                reply,
            } => {
                self.parked = false;
                if self.current.is_none() && self.queue.is_empty() {
                    // Idle: run it now (the queue cap only limits waiting messages).
                    let _ = reply.send(Enqueued::Started);
                    self.begin(turn_id, input).await;
                } else {
                    let outcome = self.queue_push(turn_id, input).map(Enqueued::Queued);
                    let _ = reply.send(outcome.unwrap_or_else(Enqueued::Full));
                }
            }
            ActorCmd::Stop { reply } => {
                let running = self.current.is_some();
                if running {
                    self.stop().await;
                }
                let _ = reply.send(running);
            }
            cmd @ (ActorCmd::DeliverApproval { .. } | ActorCmd::DeliverAnswer { .. }) => {
                self.deliver(cmd)
            }
            // The router revoked its MCP token already.
            ActorCmd::Park => self.parked = true,
            ActorCmd::Evict { reason } => {
                if self.current.is_none() && self.live.is_some() {
                    self.go_dormant(&format!("evicted: {reason}")).await;
                }
            }
            ActorCmd::Shutdown { .. } => {}
            ActorCmd::EnsureLive { reply } => {
                let res = self.ensure_live().await;
                let _ = reply.send(res);
            }
            ActorCmd::Close { reply } => self.close(reply).await,
        }
    }

    fn queue_push(&mut self, turn_id: String, input: String) -> Result<u32, usize> {
        self.queue.push((turn_id, input)).map_err(|e| e.cap)
    }

    /// Starts the next turn: mark it running, then make the session live, then prompt.
    async fn begin(&mut self, turn_id: String, input: String) {
        match self.ctx.store.start_turn(&turn_id).await {
            Ok(Some(_)) => {}
            Ok(None) => {
                tracing::warn!(turn_id, "turn is no longer queued; skipped");
                return;
            }
            Err(e) => {
                tracing::error!(turn_id, error = %e, "cannot start turn");
                let message = format!("cannot start the turn: {e}");
                let end = TurnEnd {
                    status: TurnStatus::Failed,
                    result_text: None,
                    stop_reason: None,
                    error: Some((ErrorCode::Internal, message.clone())),
                    usage: None,
                };
                let ev = EventPayload::TurnFailed {
                    code: ErrorCode::Internal,
                    message,
                };
                if let Err(e) = self.ctx.store.finish_turn(&turn_id, &end, &ev, None).await {
                    tracing::error!(turn_id, error = %e, "cannot fail the turn");
                }
                return;
            }
        }
        self.current = Some(Current {
            turn_id,
            input,
            cancel_requested: false,
            timed_out: false,
            text: String::new(),
        });
        if let Some(t) = self.ctx.config.turn_timeout {
            self.deadline = Some((Instant::now() + t, DeadlineKind::TurnTimeout));
        }
        match &self.live {
            Some(live) if live.is_alive() => {
                self.ctx
                    .pool
                    .busy(&self.session.id, self.pool_owner(), self.me.clone());
                self.spawn_prompt()
            }
            _ => {
                self.ctx.pool.admit(&self.session.id, self.pool_owner());
                if self.live.is_some() {
                    // The process died while idle.
                    self.go_dormant("the agent process exited").await;
                }
                let req = StartRequest {
                    spec: self.spec.clone(),
                    cwd: PathBuf::from(&self.session.cwd),
                    model: self.session.model.clone(),
                    resume: self.session.external_id.clone(),
                    mcp_servers: self.ctx.delegation.mcp_servers(&self.session),
                };
                let ctx = self.ctx.clone();
                self.task = Some(tokio::spawn(async move {
                    Step::Started(ctx.start_agent(req).await)
                }));
            }
        }
    }

    fn spawn_prompt(&mut self) {
        let (Some(live), Some(cur)) = (self.live.clone(), self.current.as_ref()) else {
            return;
        };
        let (tx, rx) = mpsc::unbounded_channel();
        self.events = Some(rx);
        let input = cur.input.clone();
        self.task = Some(tokio::spawn(async move {
            Step::Prompted(live.prompt(&input, tx).await)
        }));
    }

    async fn on_step(&mut self, step: Step) {
        match step {
            Step::Started(Ok(agent)) => self.on_started(agent).await,
            Step::Started(Err(e)) => {
                self.ctx.delegation.revoke(&self.session.id);
                self.fail(e.code(), e.to_string()).await
            }
            Step::Prompted(result) => {
                self.drain_events().await;
                self.on_prompted(result).await;
            }
            Step::Aborted(reason) => {
                tracing::warn!(reason, "turn task ended abnormally");
                self.fail(ErrorCode::Internal, reason).await;
            }
        }
    }

    async fn on_started(&mut self, agent: Box<dyn AgentSession>) {
        let agent: Arc<dyn AgentSession> = Arc::from(agent);
        let external_id = agent.external_id();
        let resumed = self.session.external_id.is_some();
        if let Some(expected) = self
            .session
            .external_id
            .as_ref()
            .filter(|e| **e != external_id)
        {
            agent.shutdown().await;
            self.ctx.delegation.revoke(&self.session.id);
            let msg = format!(
                "cannot resume session {expected}: the agent came back with session {external_id}"
            );
            self.fail(ErrorCode::ResumeUnavailable, msg).await;
            return;
        }
        let ev = EventPayload::SessionLive {
            external_id: external_id.clone(),
            resumed,
        };
        match self
            .ctx
            .store
            .set_session_status(
                &self.session.id,
                SessionStatus::Live,
                Some(&external_id),
                Some(&ev),
            )
            .await
        {
            Ok(_) => {}
            Err(e) => tracing::error!(error = %e, "cannot record live session"),
        }
        self.session.external_id = Some(external_id);
        self.session.status = SessionStatus::Live;
        self.live = Some(agent);
        self.ctx
            .pool
            .busy(&self.session.id, self.pool_owner(), self.me.clone());
        if self.current.as_ref().is_some_and(|c| c.cancel_requested) {
            self.end_stopped().await;
        } else {
            self.spawn_prompt();
        }
    }

    async fn on_prompted(&mut self, result: Result<TurnOutcome, AgentError>) {
        let (cancel_requested, timed_out) = match &self.current {
            Some(c) => (c.cancel_requested, c.timed_out),
            None => return,
        };
        if timed_out {
            self.end_stopped().await;
        } else {
            match result {
                Ok(outcome) if cancel_requested || outcome.stop_reason == StopReason::Cancelled => {
                    self.finish_cancelled().await
                }
                Ok(outcome) => self.complete(outcome).await,
                Err(_) if cancel_requested => self.finish_cancelled().await,
                Err(e) => {
                    if e.code() == ErrorCode::ResumeUnavailable {
                        // The agent is not in the session we asked for: never prompt it again.
                        self.go_dormant("the agent could not resume the session")
                            .await;
                    }
                    self.fail(e.code(), e.to_string()).await
                }
            }
        }
        if self.live.as_ref().is_some_and(|l| !l.is_alive()) {
            self.go_dormant("the agent process exited").await;
        }
    }

    async fn on_special(&mut self, ev: AgentEvent) {
        let stopping = self
            .current
            .as_ref()
            .is_none_or(|c| c.cancel_requested || c.timed_out);
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
                | AgentEvent::ToolCallUpdate { .. } => {}
            }
            return;
        }
        let Some(turn_id) = self.current.as_ref().map(|c| c.turn_id.clone()) else {
            return;
        };
        let deadline_ms = now_ms() + self.ctx.config.approval_timeout.as_millis() as i64;
        match ev {
            AgentEvent::Permission(req) => {
                let id = new_id();
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
                match self.ctx.store.create_approval(&row).await {
                    Ok(_) => {
                        self.approvals.insert(id.clone(), req.reply);
                        self.schedule_expiry(Pending::Approval(id));
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "cannot store approval; denying");
                        let _ = req.reply.send(PermissionReply::Cancelled);
                    }
                }
            }
            AgentEvent::Question(req) => {
                let id = new_id();
                let row = NewQuestion {
                    id: id.clone(),
                    conversation_id: self.session.conversation_id.clone(),
                    session_id: self.session.id.clone(),
                    turn_id,
                    prompt: req.prompt,
                    deadline_ms,
                };
                match self.ctx.store.create_question(&row).await {
                    Ok(_) => {
                        self.questions.insert(id.clone(), req.reply);
                        self.schedule_expiry(Pending::Question(id));
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "cannot store question; cancelling it");
                        let _ = req.reply.send(None);
                    }
                }
            }
            AgentEvent::MessageDelta(_)
            | AgentEvent::ThoughtDelta(_)
            | AgentEvent::ToolCall { .. }
            | AgentEvent::ToolCallUpdate { .. } => {}
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
    fn schedule_expiry(&self, pending: Pending) {
        let ctx = self.ctx.clone();
        let me = self.me.clone();
        let wait = ctx.config.approval_timeout;
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let me = me.upgrade().map(|tx| ActorHandle { tx });
            crate::session::answers::expire(&ctx, &pending, me.as_ref()).await;
        });
    }

    async fn stop(&mut self) {
        let Some(cur) = self.current.as_mut() else {
            return;
        };
        if cur.cancel_requested {
            return;
        }
        cur.cancel_requested = true;
        self.cancel_pending(ApprovalStatus::Cancelled).await;
        match (&self.live, self.events.is_some()) {
            (Some(live), true) => {
                let live = live.clone();
                self.canceller = Some(tokio::spawn(async move {
                    loop {
                        if let Err(e) = live.cancel().await {
                            tracing::warn!(error = %e, "cancel failed");
                            return;
                        }
                        tokio::time::sleep(CANCEL_REPEAT).await;
                    }
                }));
                self.deadline = Some((Instant::now() + STOP_GRACE, DeadlineKind::StopGrace));
            }
            _ => {
                // Still starting the agent: abandon the start (and the token it got).
                if let Some(task) = self.task.take() {
                    task.abort();
                }
                if self.live.is_none() {
                    self.ctx.delegation.revoke(&self.session.id);
                }
                self.end_stopped().await;
            }
        }
    }

    async fn on_deadline(&mut self, kind: DeadlineKind) {
        match kind {
            DeadlineKind::TurnTimeout => {
                if let Some(c) = self.current.as_mut() {
                    c.timed_out = true;
                }
                self.stop().await;
            }
            DeadlineKind::StopGrace => {
                // The agent ignored the cancel: end its process.
                if let Some(task) = self.task.take() {
                    task.abort();
                }
                self.events = None;
                self.end_stopped().await;
                self.go_dormant("the agent did not end the cancelled turn")
                    .await;
            }
        }
    }

    /// Ends a stopped turn: `turn_timeout` when the timeout stopped it, else `cancelled`.
    async fn end_stopped(&mut self) {
        if self.current.as_ref().is_some_and(|c| c.timed_out) {
            let secs = self
                .ctx
                .config
                .turn_timeout
                .map(|d| d.as_secs())
                .unwrap_or(0);
            self.fail(
                ErrorCode::TurnTimeout,
                format!("the turn ran longer than {secs}s"),
            )
            .await;
        } else {
            self.finish_cancelled().await;
        }
    }

    /// Resolves this turn's pending approvals and questions as cancelled/expired.
    async fn cancel_pending(&mut self, status: ApprovalStatus) {
        for (id, tx) in self.approvals.drain() {
            match self.ctx.store.resolve_approval(&id, status, None).await {
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
                .resolve_question(&id, qstatus, None, None)
                .await
            {
                Ok(_) => {}
                Err(e) => tracing::error!(error = %e, "cannot cancel question"),
            }
            let _ = tx.send(None);
        }
    }

    async fn complete(&mut self, outcome: TurnOutcome) {
        let text = if outcome.text.is_empty() {
            self.current
                .as_ref()
                .map(|c| c.text.clone())
                .unwrap_or_default()
        } else {
            outcome.text
        };
        let end = TurnEnd {
            status: TurnStatus::Completed,
            result_text: Some(text.clone()),
            stop_reason: Some(outcome.stop_reason.as_str().to_string()),
            error: None,
            usage: outcome.usage,
        };
        let ev = EventPayload::TurnCompleted {
            stop_reason: Some(outcome.stop_reason.as_str().to_string()),
            text: text.clone(),
        };
        let msg = NewMessage {
            role: MessageRole::Agent,
            text,
        };
        self.end_turn(end, ev, Some(msg)).await;
    }

    async fn finish_cancelled(&mut self) {
        let text = self
            .current
            .as_ref()
            .map(|c| c.text.clone())
            .unwrap_or_default();
        let end = TurnEnd {
            status: TurnStatus::Cancelled,
            result_text: (!text.is_empty()).then_some(text),
            stop_reason: Some("cancelled".to_string()),
            error: None,
            usage: None,
        };
        let msg = NewMessage {
            role: MessageRole::Status,
            text: "turn cancelled".to_string(),
        };
        self.end_turn(end, EventPayload::TurnCancelled {}, Some(msg))
            .await;
    }

    async fn fail(&mut self, code: ErrorCode, mut message: String) {
        if code == ErrorCode::ResumeUnavailable {
            message.push_str(". The session stays bound; send /new to start a new one.");
        }
        let text = self
            .current
            .as_ref()
            .map(|c| c.text.clone())
            .unwrap_or_default();
        let end = TurnEnd {
            status: TurnStatus::Failed,
            result_text: (!text.is_empty()).then_some(text),
            stop_reason: None,
            error: Some((code, message.clone())),
            usage: None,
        };
        let status = NewMessage {
            role: MessageRole::Status,
            text: format!("turn failed ({code}): {message}"),
        };
        self.end_turn(
            end,
            EventPayload::TurnFailed { code, message },
            Some(status),
        )
        .await;
    }

    async fn end_turn(&mut self, end: TurnEnd, ev: EventPayload, msg: Option<NewMessage>) {
        if let Some(c) = self.canceller.take() {
            c.abort();
        }
        self.cancel_pending(ApprovalStatus::Cancelled).await;
        if let Some(task) = self.task.take() {
            task.abort();
        }
        self.events = None;
        self.deadline = None;
        let Some(cur) = self.current.take() else {
            return;
        };
        if self.live.is_some() {
            self.ctx.pool.idle(&self.session.id);
        }
        match self
            .ctx
            .store
            .finish_turn(&cur.turn_id, &end, &ev, msg.as_ref())
            .await
        {
            Ok(Some(_)) => {}
            Ok(None) => tracing::warn!(turn_id = cur.turn_id, "turn had already ended"),
            Err(e) => tracing::error!(error = %e, "cannot finish turn"),
        }
    }

    async fn go_dormant(&mut self, reason: &str) {
        self.ctx.pool.gone(&self.session.id);
        // The process ends: so does its MCP token.
        self.ctx.delegation.revoke(&self.session.id);
        if let Some(live) = self.live.take() {
            live.shutdown().await;
        }
        if self.session.status == SessionStatus::Dormant {
            return;
        }
        self.session.status = SessionStatus::Dormant;
        let ev = EventPayload::SessionDormant {
            reason: reason.to_string(),
        };
        match self
            .ctx
            .store
            .set_session_status(&self.session.id, SessionStatus::Dormant, None, Some(&ev))
            .await
        {
            Ok(_) => {}
            Err(e) => tracing::error!(error = %e, "cannot record dormant session"),
        }
    }

    /// Daemon shutdown: end the agent process now. A running turn, its pending approvals
    /// and questions and the queued turns stay open in the store, so the next start-up
    /// recovery marks them interrupted/expired and tells the conversation once — the same
    /// path as after a crash.
    async fn shutdown(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        if let Some(c) = self.canceller.take() {
            c.abort();
        }
        self.events = None;
        self.deadline = None;
        self.approvals.clear();
        self.questions.clear();
        self.current = None;
        self.go_dormant("tether shut down").await;
    }
}

/// A pending request waiting for its deadline.
pub(crate) enum Pending {
    Approval(String),
    Question(String),
}
