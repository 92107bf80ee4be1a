//! A forwarded call and its reply as the `commands` table stores them (JSON, between
//! nodes of the same version). The reply is the owner's value or its error as `{code,
//! message}`; the sender rebuilds the error from the code in one exhaustive match, as its
//! own variant where the caller matches on it, never from the text.

use serde::{Deserialize, Serialize};
use tether_proto::{ConversationId, ErrorCode};

use crate::RuntimeError;
use crate::call::{Call, Reply};

/// What is stored in a command row: the call and how many nodes passed it on.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Envelope {
    pub hops: u8,
    pub call: Call,
}

/// The owner's answer.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum WireReply {
    Ok(Reply),
    Err { code: ErrorCode, message: String },
}

impl WireReply {
    pub fn of(result: crate::error::Result<Reply>) -> WireReply {
        match result {
            Ok(v) => WireReply::Ok(v),
            Err(e) => WireReply::Err {
                code: e.code(),
                message: e.to_string(),
            },
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
        | ErrorCode::Draining
        | ErrorCode::IsolationNeedsGit
        | ErrorCode::MergeConflict
        | ErrorCode::WorktreeFailed
        | ErrorCode::ServerBusy
        | ErrorCode::TooManyAttempts
        | ErrorCode::BudgetExceeded
        | ErrorCode::UsageLimit
        | ErrorCode::BadRequest
        | ErrorCode::InvalidJson
        | ErrorCode::InvalidParams
        | ErrorCode::PayloadTooLarge
        | ErrorCode::Unauthorized
        | ErrorCode::Forbidden
        | ErrorCode::Conflict
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
