//! What a session actor is told, and how long its sender waits: the commands, their
//! replies and the one time-out policy. Nothing here knows the
//! actor or the runtime, so every part of the crate can name a command without an
//! import circle.

use std::time::Duration;

use tether_agents::PermissionReply;
use tether_proto::{ApprovalId, ErrorCode, QuestionId, TurnId};
use tokio::sync::oneshot;

/// Commands that may wait in one session's mailbox. The actor answers each at once
/// (turns wait in its own queue, not here), so only a burst of requests fills it.
pub(crate) const MAILBOX_CAP: usize = 64;

/// How long a sender waits for room in a full mailbox, and for a reply the actor gives
/// at once.
pub(crate) const ACTOR_REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// Grace for an agent to end a cancelled turn before its process is killed.
pub(crate) const STOP_GRACE: Duration = Duration::from_secs(5);

/// How long daemon shutdown waits for an actor to end its agent process.
pub(crate) const SHUTDOWN_WAIT: Duration = Duration::from_secs(15);

pub(crate) enum ActorCmd {
    /// Run this (already stored, `queued`) turn now or after the running one.
    Enqueue {
        turn_id: TurnId,
        input: String,
        /// The trace of the call that queued it (issue 31): the turn's span joins it.
        trace: Option<opentelemetry::Context>,
        reply: oneshot::Sender<Enqueued>,
    },
    /// Store this message's turn already running and run it, if the session is idle
    /// (one commit where `Enqueue` after `insert_turn` takes two); else store nothing.
    RunIfIdle {
        turn: tether_store::NewTurn,
        trace: Option<opentelemetry::Context>,
        reply: oneshot::Sender<RunIfIdle>,
    },
    /// Cancel the running turn; replies (if asked) whether one was running.
    Stop {
        reply: Option<oneshot::Sender<bool>>,
    },
    /// An approval or a question was resolved in the store; pass it to the agent.
    Deliver(Delivery),
    /// The session is no longer bound: end its process once the queue is empty.
    Park,
    /// The live pool needs room: end the process if no turn runs.
    Evict { reason: String },
    /// Look whether this node still owns the conversation (the failover sweep found a
    /// claim of this node lost to another node while it was cut off or paused): a lost
    /// actor ends its agent without writing; otherwise nothing.
    CheckClaim,
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

/// A resolved approval or question on its way to the agent's waiting request.
pub(crate) enum Delivery {
    Approval {
        approval_id: ApprovalId,
        reply: PermissionReply,
    },
    Answer {
        question_id: QuestionId,
        answer: Option<String>,
    },
}

/// Where an enqueued turn went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Enqueued {
    Started,
    Queued(u32),
    Full(usize),
}

/// What `RunIfIdle` did.
pub(crate) enum RunIfIdle {
    /// Stored and started.
    Started,
    /// A turn runs or waits: nothing stored (the caller queues it).
    Busy,
    /// The store refused it: nothing stored.
    Failed(tether_store::StoreError),
}

/// A pending request waiting for its deadline.
pub(crate) enum Pending {
    Approval(ApprovalId),
    Question(QuestionId),
}

impl ActorCmd {
    /// How long its sender waits for the reply: at once, plus what the command itself
    /// waits for (`start_timeout`: the runtime's agent start time-out).
    pub fn reply_bound(&self, start_timeout: Duration) -> Duration {
        match self {
            ActorCmd::Enqueue { .. }
            | ActorCmd::RunIfIdle { .. }
            | ActorCmd::Stop { .. }
            | ActorCmd::Deliver(_)
            | ActorCmd::Park
            | ActorCmd::Evict { .. }
            | ActorCmd::CheckClaim => ACTOR_REPLY_TIMEOUT,
            // It ends the agent process (and reaps it).
            ActorCmd::Shutdown { .. } => SHUTDOWN_WAIT,
            // It starts the agent.
            ActorCmd::EnsureLive { .. } => ACTOR_REPLY_TIMEOUT + start_timeout,
            // It waits for a stopped turn to end (at most the stop grace, then the kill).
            ActorCmd::Close { .. } => ACTOR_REPLY_TIMEOUT + STOP_GRACE,
        }
    }
}
