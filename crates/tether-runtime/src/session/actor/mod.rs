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
use std::sync::{Arc, Weak};

use tether_agents::{AgentEvent, AgentSession, AgentSpec, PermissionReply};
use tether_core::TurnQueue;
use tether_proto::{ApprovalId, ConversationId, QuestionId, Session, TurnId};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::ctx::Ctx;
use crate::ownership::OwnerGuard;
use crate::session::actors::Actors;
use crate::session::command::{ActorCmd, Delivery, Enqueued, MAILBOX_CAP, RunIfIdle};
use crate::session::mailbox::ActorHandle;
use crate::session::turn_step::{Step, deadline_sleep, join_opt, recv_opt};

/// How often a cancel is repeated while the agent has not ended the turn.
const CANCEL_REPEAT: std::time::Duration = std::time::Duration::from_millis(250);

mod begin;
mod delegation;
mod events;
mod fenced;
mod live;
mod outage;
mod requests;
mod turn;
mod usage;

#[derive(Clone, Copy, PartialEq, Eq)]
enum DeadlineKind {
    TurnTimeout,
    StopGrace,
}

struct Current {
    turn_id: TurnId,
    input: String,
    /// The files the turn's message carried (handed to the agent as it prompts).
    attachments: Vec<tether_proto::Attachment>,
    cancel_requested: bool,
    timed_out: bool,
    /// Stopped because the store stayed unreachable (see `outage`): ends `interrupted`.
    store_lost: bool,
    /// Stopped by a budget's hard cap (issue 29): ends `budget_exceeded` with this.
    over_budget: Option<String>,
    /// The agent was prompted (a turn refused or failed before that has no usage).
    prompted: bool,
    /// Usage reports the agent sent in this turn.
    usage_reports: u32,
    text: String,
    /// When the turn started, and the time the agent spent starting and answering
    /// (issue 31: the rest is tether's own share); `agent_since` while it works.
    started: std::time::Instant,
    agent_time: std::time::Duration,
    agent_since: Option<std::time::Instant>,
    /// The turn's span (issue 31): the agent's start and prompt, and the approval and
    /// question waits, are its children.
    span: tracing::Span,
}

impl Current {
    /// The agent stopped working (started, answered, or was abandoned).
    fn agent_done(&mut self) {
        if let Some(since) = self.agent_since.take() {
            self.agent_time += since.elapsed();
        }
    }
}

pub(crate) struct Actor {
    ctx: Arc<Ctx>,
    session: Session,
    spec: AgentSpec,
    /// Pool owner: the parent conversation for delegated work, else the conversation.
    owner: ConversationId,
    rx: mpsc::Receiver<ActorCmd>,
    me: mpsc::WeakSender<ActorCmd>,
    /// The registry this actor leaves when it ends (weak: a dropped runtime ends it).
    actors: Weak<Actors>,
    live: Option<Arc<dyn AgentSession>>,
    queue: TurnQueue<(TurnId, String)>,
    current: Option<Current>,
    task: Option<JoinHandle<Step>>,
    events: Option<mpsc::UnboundedReceiver<AgentEvent>>,
    deadline: Option<(Instant, DeadlineKind)>,
    /// Repeats the agent's cancel until the turn ends (a cancel that races the prompt's
    /// start would otherwise be lost).
    canceller: Option<JoinHandle<()>>,
    approvals: HashMap<ApprovalId, tokio::sync::oneshot::Sender<PermissionReply>>,
    questions: HashMap<QuestionId, tokio::sync::oneshot::Sender<Option<String>>>,
    parked: bool,
    /// Delegation: `Close` requests waiting for the running turn to end.
    closing: Vec<oneshot::Sender<()>>,
    /// Keeps the conversation this node's while the actor runs (issue 12; `None` on
    /// SQLite, where it always is).
    claim: Option<OwnerGuard>,
    /// Streamed events waiting for an unreachable store (see `outage`).
    held: outage::Held,
    /// Whom the session's usage counts for (read at its first report).
    meter: Option<crate::usage::Meter>,
    /// Ledger rows waiting for an unreachable store (see `usage`).
    unsaved_usage: Vec<tether_store::NewUsage>,
    /// The traces of queued turns' calls (issue 31), taken when each turn begins.
    traces: HashMap<TurnId, opentelemetry::Context>,
    /// Each pending approval's or question's wait, as a span of its turn.
    waits: HashMap<String, tracing::Span>,
}
impl Actor {
    /// Spawns the actor for `session` and returns its handle.
    pub fn spawn(
        ctx: Arc<Ctx>,
        actors: Weak<Actors>,
        session: Session,
        spec: AgentSpec,
        owner: ConversationId,
        claim: Option<OwnerGuard>,
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
            claim,
            held: outage::Held::default(),
            meter: None,
            unsaved_usage: Vec::new(),
            traces: HashMap::new(),
            waits: HashMap::new(),
        };
        tokio::spawn(actor.run());
        ActorHandle { tx }
    }

    /// The live pool's owner: the parent conversation of a delegated child, else none
    /// (a conversation's own session is not counted in any owner's cap).
    fn pool_owner(&self) -> Option<&ConversationId> {
        Some(&self.owner).filter(|o| **o != self.session.conversation_id)
    }

    async fn run(mut self) {
        loop {
            if self.claim.as_ref().is_some_and(OwnerGuard::lost) {
                // Another node took the conversation over: stop here, writing nothing.
                self.end_fenced(Vec::new()).await;
                return;
            }
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
                    // Lost while idle (a newer claim of this node, after a take-over,
                    // replaced the epoch): this process may lack what ran elsewhere, so
                    // a successor resumes strictly and runs the command.
                    Some(ActorCmd::CheckClaim) if self.claim.as_ref().is_some_and(OwnerGuard::lost) => {
                        self.end_fenced(Vec::new()).await;
                        return;
                    }
                    Some(cmd) if self.claim.as_ref().is_some_and(OwnerGuard::lost) => {
                        self.end_fenced(vec![cmd]).await;
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
    fn deliver(&mut self, delivery: Delivery) {
        match delivery {
            Delivery::Approval { approval_id, reply } => {
                self.waits.remove(approval_id.as_str());
                if let Some(tx) = self.approvals.remove(&approval_id) {
                    let _ = tx.send(reply);
                }
            }
            Delivery::Answer {
                question_id,
                answer,
            } => {
                self.waits.remove(question_id.as_str());
                if let Some(tx) = self.questions.remove(&question_id) {
                    let _ = tx.send(answer);
                }
            }
        }
    }

    async fn on_cmd(&mut self, cmd: ActorCmd) {
        match cmd {
            ActorCmd::Enqueue {
                turn_id,
                input,
                trace,
                reply,
            } => {
                self.parked = false;
                if let Some(cx) = trace {
                    self.traces.insert(turn_id.clone(), cx);
                }
                if self.current.is_none() && self.queue.is_empty() {
                    // Idle: run it now (the queue cap only limits waiting messages).
                    let _ = reply.send(Enqueued::Started);
                    self.begin(turn_id, input).await;
                } else {
                    let outcome = self.queue_push(turn_id, input).map(Enqueued::Queued);
                    let _ = reply.send(outcome.unwrap_or_else(Enqueued::Full));
                }
            }
            ActorCmd::RunIfIdle { turn, trace, reply } => {
                if reply.is_closed() {
                    // The router stopped waiting: it stores the turn itself (and fails
                    // it) unless this actor did first (`router_hand`).
                    return;
                }
                if self.current.is_some() || !self.queue.is_empty() {
                    let _ = reply.send(RunIfIdle::Busy);
                    return;
                }
                self.parked = false;
                if let Some(cx) = trace {
                    self.traces.insert(turn.id.clone(), cx);
                }
                self.begin_stored(turn, reply).await;
            }
            ActorCmd::Stop { reply } => {
                let running = self.current.is_some();
                if running {
                    self.stop().await;
                }
                if let Some(reply) = reply {
                    let _ = reply.send(running);
                }
            }
            ActorCmd::Deliver(delivery) => self.deliver(delivery),
            // The router revoked its MCP token already.
            ActorCmd::Park => self.parked = true,
            ActorCmd::Evict { reason } => {
                if self.current.is_none() && self.live.is_some() {
                    self.go_dormant(&format!("evicted: {reason}")).await;
                }
            }
            // The loop's next look at the claim does the work.
            ActorCmd::Shutdown { .. } | ActorCmd::CheckClaim => {}
            ActorCmd::EnsureLive { reply } => {
                let res = self.ensure_live().await;
                let _ = reply.send(res);
            }
            ActorCmd::Close { reply } => self.close(reply).await,
        }
    }

    fn queue_push(&mut self, turn_id: TurnId, input: String) -> Result<u32, usize> {
        self.queue.push((turn_id, input)).map_err(|e| e.cap)
    }
}
