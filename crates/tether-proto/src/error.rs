//! Stable error codes (part of the wire contract) and the JSON error body.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A stable, snake_case error code. Clients match on this, never on message text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The request body or a parameter is invalid.
    BadRequest,
    /// The request body is not valid JSON or does not match the schema.
    InvalidJson,
    /// The request body is larger than allowed.
    PayloadTooLarge,
    /// Missing or wrong bearer token.
    Unauthorized,
    /// No such resource.
    NotFound,
    /// A `/command` that tether does not know.
    UnknownCommand,
    /// A known command with missing or wrong arguments.
    InvalidCommand,
    /// The agent name is not configured.
    UnknownAgent,
    /// The working directory is not allowed or does not exist.
    InvalidCwd,
    /// The approval was already answered, expired or cancelled.
    ApprovalAlreadyResolved,
    /// The question was already answered, expired or cancelled.
    QuestionAlreadyResolved,
    /// `/approve` or `/deny` without an id while zero or several approvals are pending.
    AmbiguousApproval,
    /// The conversation's queue is full.
    QueueFull,
    /// Nothing is running that could be stopped.
    NothingRunning,
    /// The dormant session could not be resumed strictly.
    ResumeUnavailable,
    /// The agent process could not be started or initialised.
    SpawnFailed,
    /// The agent process exited or crashed during a turn.
    AgentCrashed,
    /// The agent reported an error for the turn.
    AgentError,
    /// The agent spoke something tether could not understand.
    ProtocolError,
    /// The turn ran longer than the configured turn timeout.
    TurnTimeout,
    /// The turn was interrupted by a daemon restart.
    Interrupted,
    /// The approval or question expired.
    Expired,
    /// The conversation is archived.
    ConversationArchived,
    /// An unexpected server-side failure.
    Internal,
}

impl ErrorCode {
    /// The snake_case wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::InvalidJson => "invalid_json",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::NotFound => "not_found",
            ErrorCode::UnknownCommand => "unknown_command",
            ErrorCode::InvalidCommand => "invalid_command",
            ErrorCode::UnknownAgent => "unknown_agent",
            ErrorCode::InvalidCwd => "invalid_cwd",
            ErrorCode::ApprovalAlreadyResolved => "approval_already_resolved",
            ErrorCode::QuestionAlreadyResolved => "question_already_resolved",
            ErrorCode::AmbiguousApproval => "ambiguous_approval",
            ErrorCode::QueueFull => "queue_full",
            ErrorCode::NothingRunning => "nothing_running",
            ErrorCode::ResumeUnavailable => "resume_unavailable",
            ErrorCode::SpawnFailed => "spawn_failed",
            ErrorCode::AgentCrashed => "agent_crashed",
            ErrorCode::AgentError => "agent_error",
            ErrorCode::ProtocolError => "protocol_error",
            ErrorCode::TurnTimeout => "turn_timeout",
            ErrorCode::Interrupted => "interrupted",
            ErrorCode::Expired => "expired",
            ErrorCode::ConversationArchived => "conversation_archived",
            ErrorCode::Internal => "internal",
        }
    }

    /// The HTTP status this code is served with.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::BadRequest
            | ErrorCode::InvalidJson
            | ErrorCode::UnknownCommand
            | ErrorCode::InvalidCommand
            | ErrorCode::UnknownAgent
            | ErrorCode::InvalidCwd
            | ErrorCode::AmbiguousApproval => 400,
            ErrorCode::Unauthorized => 401,
            ErrorCode::NotFound => 404,
            ErrorCode::ApprovalAlreadyResolved
            | ErrorCode::QuestionAlreadyResolved
            | ErrorCode::NothingRunning
            | ErrorCode::ConversationArchived => 409,
            ErrorCode::PayloadTooLarge => 413,
            ErrorCode::QueueFull => 429,
            ErrorCode::ResumeUnavailable
            | ErrorCode::SpawnFailed
            | ErrorCode::AgentCrashed
            | ErrorCode::AgentError
            | ErrorCode::ProtocolError
            | ErrorCode::TurnTimeout
            | ErrorCode::Interrupted
            | ErrorCode::Expired => 502,
            ErrorCode::Internal => 500,
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `{"error": {"code", "message"}}`: every error response of the HTTP API.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    pub code: ErrorCode,
    pub message: String,
}

impl ErrorBody {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            error: ErrorDetail {
                code,
                message: message.into(),
            },
        }
    }
}
