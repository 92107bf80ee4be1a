//! A forwarded command and its reply as the `commands` table stores them (JSON, between
//! nodes of the same version). The reply is the owner's value or its error as `{code,
//! message}`; the sender rebuilds the error from the code in one exhaustive match, as its
//! own variant where the caller matches on it, never from the text.

use serde::{Deserialize, Serialize};
use tether_proto::{
    ApprovalId, ConversationId, Decision, ErrorCode, QuestionId, SendMessage, SessionId, TaskId,
    TurnId, UpdateConversation,
};

use crate::RuntimeError;
use crate::delegation::registry::Caller;

/// A command that may have to run on the conversation's owner.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub(crate) enum Forwarded {
    SendMessage {
        conversation_id: ConversationId,
        message: SendMessage,
        by: String,
        /// Set for an idempotent message (`send_message_once`).
        #[serde(default)]
        turn_id: Option<TurnId>,
    },
    Stop {
        conversation_id: ConversationId,
    },
    NewSession {
        conversation_id: ConversationId,
    },
    Detach {
        conversation_id: ConversationId,
    },
    UpdateConversation {
        conversation_id: ConversationId,
        update: UpdateConversation,
    },
    AnswerApproval {
        approval_id: ApprovalId,
        decision: Decision,
        by: String,
    },
    AnswerQuestion {
        question_id: QuestionId,
        answer: String,
        by: String,
    },
    ContinueTask {
        caller: WireCaller,
        task_id: TaskId,
        message: String,
        continuation_id: String,
    },
    CloseTask {
        caller: WireCaller,
        task_id: TaskId,
        continuation_id: String,
    },
    CancelTask {
        caller: WireCaller,
        task_id: TaskId,
    },
    /// A new task's first turn (the sender is at its cap).
    StartTask {
        task_id: TaskId,
        turn_id: TurnId,
    },
    /// Evict the conversation's session if it is idle (its parent's live children
    /// elsewhere are at `max_live_per_owner`).
    EvictIdle {
        conversation_id: ConversationId,
    },
    /// The report of an ended delegation turn, written by the owner of the conversation
    /// it goes to.
    ReportTurn {
        conversation_id: ConversationId,
        turn_id: TurnId,
    },
}

/// What is stored in a command row: the command and how many nodes passed it on.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Envelope {
    pub hops: u8,
    pub command: Forwarded,
}

/// The owner's answer.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Reply {
    Ok(serde_json::Value),
    Err { code: ErrorCode, message: String },
}

impl Reply {
    pub fn of(result: crate::error::Result<serde_json::Value>) -> Reply {
        match result {
            Ok(v) => Reply::Ok(v),
            Err(e) => Reply::Err {
                code: e.code(),
                message: e.to_string(),
            },
        }
    }
}

/// A delegation [`Caller`] as it travels (authenticated on the node the call reached).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum WireCaller {
    Session {
        conversation_id: ConversationId,
        session_id: SessionId,
    },
    External,
    Person,
}

impl From<&Caller> for WireCaller {
    fn from(c: &Caller) -> WireCaller {
        match c {
            Caller::Session {
                conversation_id,
                session_id,
            } => WireCaller::Session {
                conversation_id: conversation_id.clone(),
                session_id: session_id.clone(),
            },
            Caller::External => WireCaller::External,
            Caller::Person => WireCaller::Person,
        }
    }
}

impl From<WireCaller> for Caller {
    fn from(c: WireCaller) -> Caller {
        match c {
            WireCaller::Session {
                conversation_id,
                session_id,
            } => Caller::Session {
                conversation_id,
                session_id,
            },
            WireCaller::External => Caller::External,
            WireCaller::Person => Caller::Person,
        }
    }
}

/// What the sender knows besides the code, to rebuild typed errors faithfully.
pub(crate) struct Known<'a> {
    pub conversation_id: Option<&'a ConversationId>,
    /// The status of the approval or question the command answered, read now.
    pub resolved: Option<tether_core::approval::ResolveError>,
}

/// The owner's error, as this node's error of the same code: the variants callers match
/// on come back as themselves (an archived conversation, nothing running, an approval or
/// question resolved already); the rest keep the owner's code and message.
pub(crate) fn rebuild(code: ErrorCode, message: String, known: Known<'_>) -> RuntimeError {
    let remote = |message| RuntimeError::Remote { code, message };
    match code {
        ErrorCode::ConversationArchived => match known.conversation_id {
            Some(id) => RuntimeError::Archived(id.clone()),
            None => remote(message),
        },
        ErrorCode::NothingRunning => RuntimeError::NothingRunning,
        ErrorCode::ApprovalAlreadyResolved | ErrorCode::QuestionAlreadyResolved => {
            match known.resolved {
                Some(e) if e.code() == code => RuntimeError::Resolve(e),
                _ => remote(message),
            }
        }
        ErrorCode::OwnerLost
        | ErrorCode::OwnedElsewhere
        | ErrorCode::ProcessLimit
        | ErrorCode::FileRefused
        | ErrorCode::StoreUnavailable
        | ErrorCode::ServerBusy
        | ErrorCode::BadRequest
        | ErrorCode::InvalidJson
        | ErrorCode::InvalidParams
        | ErrorCode::PayloadTooLarge
        | ErrorCode::Unauthorized
        | ErrorCode::HostNotAllowed
        | ErrorCode::NotFound
        | ErrorCode::MethodNotAllowed
        | ErrorCode::NotAcceptable
        | ErrorCode::UnsupportedMediaType
        | ErrorCode::UnknownCommand
        | ErrorCode::InvalidCommand
        | ErrorCode::UnknownAgent
        | ErrorCode::InvalidCwd
        | ErrorCode::AmbiguousApproval
        | ErrorCode::QueueFull
        | ErrorCode::ResumeUnavailable
        | ErrorCode::SpawnFailed
        | ErrorCode::StartTimeout
        | ErrorCode::AgentCrashed
        | ErrorCode::AgentError
        | ErrorCode::ProtocolError
        | ErrorCode::TurnTimeout
        | ErrorCode::Interrupted
        | ErrorCode::Expired
        | ErrorCode::Internal
        | ErrorCode::DepthLimit
        | ErrorCode::InvalidAgentType
        | ErrorCode::InvalidTask
        | ErrorCode::InvalidWorkingDir
        | ErrorCode::SubagentError
        | ErrorCode::ChildRefusal
        | ErrorCode::ChildMaxTokens
        | ErrorCode::ChildMaxTurnRequests
        | ErrorCode::ChildEmpty
        | ErrorCode::ChildUnknown
        | ErrorCode::Canceled
        | ErrorCode::SessionStillRunning
        | ErrorCode::SessionReleased
        | ErrorCode::NotContinuable
        | ErrorCode::ContinuationConflict
        | ErrorCode::Rebuilding
        | ErrorCode::ConcurrencyLimit
        | ErrorCode::AttachmentTooLarge
        | ErrorCode::AttachmentTypeMismatch
        | ErrorCode::AttachmentBadName
        | ErrorCode::AttachmentUnavailable => remote(message),
    }
}
