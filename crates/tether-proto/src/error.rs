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
    /// A delegation tool's argument (or a continue/close body's field) is missing, of the
    /// wrong type or unknown; the message names it.
    InvalidParams,
    /// The request body is larger than allowed.
    PayloadTooLarge,
    /// Missing or wrong bearer token.
    Unauthorized,
    /// Signed in, but the person's role or the token's scopes do not allow this (a
    /// conversation they may not see is `not_found` instead).
    Forbidden,
    /// The `Host` header names a host tether does not answer (DNS-rebinding defence).
    HostNotAllowed,
    /// No such resource.
    NotFound,
    /// The route exists but not with this method (the `Allow` header lists the methods).
    MethodNotAllowed,
    /// The route cannot answer in any type the `Accept` header allows (`/mcp` wants
    /// `application/json` and `text/event-stream`).
    NotAcceptable,
    /// The body's `Content-Type` is not one the route reads.
    UnsupportedMediaType,
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
    /// The agent process started but did not finish its start-up handshake in time
    /// (`start_timeout_secs`).
    StartTimeout,
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
    /// Delegation: the parent is already at the configured delegation depth.
    DepthLimit,
    /// Delegation: `agent_type` names no configured agent.
    InvalidAgentType,
    /// Delegation: the task (or message) is empty or too long.
    InvalidTask,
    /// Delegation: `working_dir` does not exist or lies outside the workspace roots.
    InvalidWorkingDir,
    /// Delegation: the child agent failed (crashed, reported an error, timed out).
    SubagentError,
    /// Delegation: the child agent refused the task.
    ChildRefusal,
    /// Delegation: the child stopped at its token limit.
    ChildMaxTokens,
    /// Delegation: the child stopped at its limit of model requests.
    ChildMaxTurnRequests,
    /// Delegation: the child ended its turn without any text.
    ChildEmpty,
    /// Delegation: the child stopped for a reason tether does not know.
    ChildUnknown,
    /// Delegation: the task's turn was cancelled.
    Canceled,
    /// Delegation: the child is still running a turn; wait for it first.
    SessionStillRunning,
    /// Delegation: the child session was released (`close_session`); read
    /// `session_closed` as the same code.
    #[serde(alias = "session_closed")]
    SessionReleased,
    /// Delegation: the child session can never be continued (it never started).
    NotContinuable,
    /// Delegation: this `continuation_id` was already used for another task or message.
    ContinuationConflict,
    /// Delegation: tether is recovering after a restart; retry shortly.
    Rebuilding,
    /// Delegation: the parent already runs as many children as allowed.
    ConcurrencyLimit,
    /// An attachment is larger than the per-file limit, or a message's attachments are
    /// together larger than the per-message limit.
    AttachmentTooLarge,
    /// An attachment's bytes are not of the type its declared content type or its name
    /// claim (a `.png` that is a PDF, say).
    AttachmentTypeMismatch,
    /// An attachment's name is unusable: empty, too long, a path (`/`, `\`, `..`) or
    /// with control characters.
    AttachmentBadName,
    /// An attachment could not be fetched from its channel (a Telegram file that cannot
    /// be downloaded, a Feishu resource that 404s).
    AttachmentUnavailable,
    /// Cluster: the node that owns the conversation took the command and died before it
    /// answered; whether it ran is unknown (look at the conversation, then retry).
    OwnerLost,
    /// Issue 12: another node of the cluster owns the conversation (its live session
    /// runs there), or this node lost it to another one (fenced).
    OwnedElsewhere,
    /// Every agent process is at its session limit, the process cap (`[pool]
    /// max_processes`) is reached and no idle session could be evicted to make room.
    ProcessLimit,
    /// File-out (`/file`, a turn's file content): the path leaves the working directory,
    /// lies in a place tether never hands out (its data directory, config, the agents'
    /// credentials), is a link out or not a regular file, or the working directory was
    /// swapped since it was chosen.
    FileRefused,
    /// The store (the database) cannot be reached right now, or (SQLite) its disk is full
    /// or read-only; tether reconnects by itself. Retry after a moment: nothing of the
    /// request was stored.
    StoreUnavailable,
    /// The server has as many connections as it takes from unauthenticated clients (the
    /// rest are kept for authenticated ones); try again shortly.
    ServerBusy,
    /// People (issue 28): the change conflicts with what is stored (an email taken, the
    /// last enabled owner demoted); nothing was changed.
    Conflict,
    /// Too many failed attempts from this client (wrong tokens, wrong link codes): wait
    /// for the `Retry-After` seconds, then try again.
    TooManyAttempts,
    /// A budget's hard cap is reached (issue 29): the usage report that crossed it
    /// stopped the turn, and new turns counting toward it are refused until its period
    /// ends or an admin raises it.
    BudgetExceeded,
    /// The vendor's usage or rate limit stopped the turn (issue 29); tether continues
    /// the session by itself when the limit resets (a status line says when).
    UsageLimit,
    /// Issue 31: this node is draining (an upgrade or a restart) and takes no new work,
    /// and no other node can take it; retry in a moment, against any node.
    Draining,
    /// Issue 32: isolation in a worktree needs the conversation's directory to be in a
    /// git repository.
    IsolationNeedsGit,
    /// Issue 32: the worktree's branch does not merge cleanly; nothing was changed (the
    /// message names the conflicting paths).
    MergeConflict,
    /// Issue 32: git or the worktree's set-up command failed (the message says how).
    WorktreeFailed,
}

impl ErrorCode {
    /// The snake_case wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::InvalidJson => "invalid_json",
            ErrorCode::InvalidParams => "invalid_params",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::HostNotAllowed => "host_not_allowed",
            ErrorCode::NotFound => "not_found",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::NotAcceptable => "not_acceptable",
            ErrorCode::UnsupportedMediaType => "unsupported_media_type",
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
            ErrorCode::StartTimeout => "start_timeout",
            ErrorCode::AgentCrashed => "agent_crashed",
            ErrorCode::AgentError => "agent_error",
            ErrorCode::ProtocolError => "protocol_error",
            ErrorCode::TurnTimeout => "turn_timeout",
            ErrorCode::Interrupted => "interrupted",
            ErrorCode::Expired => "expired",
            ErrorCode::ConversationArchived => "conversation_archived",
            ErrorCode::Conflict => "conflict",
            ErrorCode::Internal => "internal",
            ErrorCode::DepthLimit => "depth_limit",
            ErrorCode::InvalidAgentType => "invalid_agent_type",
            ErrorCode::InvalidTask => "invalid_task",
            ErrorCode::InvalidWorkingDir => "invalid_working_dir",
            ErrorCode::SubagentError => "subagent_error",
            ErrorCode::ChildRefusal => "child_refusal",
            ErrorCode::ChildMaxTokens => "child_max_tokens",
            ErrorCode::ChildMaxTurnRequests => "child_max_turn_requests",
            ErrorCode::ChildEmpty => "child_empty",
            ErrorCode::ChildUnknown => "child_unknown",
            ErrorCode::Canceled => "canceled",
            ErrorCode::SessionStillRunning => "session_still_running",
            ErrorCode::SessionReleased => "session_released",
            ErrorCode::NotContinuable => "not_continuable",
            ErrorCode::ContinuationConflict => "continuation_conflict",
            ErrorCode::Rebuilding => "rebuilding",
            ErrorCode::ConcurrencyLimit => "concurrency_limit",
            ErrorCode::AttachmentTooLarge => "attachment_too_large",
            ErrorCode::AttachmentTypeMismatch => "attachment_type_mismatch",
            ErrorCode::AttachmentBadName => "attachment_bad_name",
            ErrorCode::AttachmentUnavailable => "attachment_unavailable",
            ErrorCode::OwnerLost => "owner_lost",
            ErrorCode::OwnedElsewhere => "owned_elsewhere",
            ErrorCode::ProcessLimit => "process_limit",
            ErrorCode::FileRefused => "file_refused",
            ErrorCode::StoreUnavailable => "store_unavailable",
            ErrorCode::ServerBusy => "server_busy",
            ErrorCode::TooManyAttempts => "too_many_attempts",
            ErrorCode::BudgetExceeded => "budget_exceeded",
            ErrorCode::UsageLimit => "usage_limit",
            ErrorCode::Draining => "draining",
            ErrorCode::IsolationNeedsGit => "isolation_needs_git",
            ErrorCode::MergeConflict => "merge_conflict",
            ErrorCode::WorktreeFailed => "worktree_failed",
        }
    }

    /// The HTTP status this code is served with.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::BadRequest
            | ErrorCode::InvalidJson
            | ErrorCode::InvalidParams
            | ErrorCode::UnknownCommand
            | ErrorCode::InvalidCommand
            | ErrorCode::UnknownAgent
            | ErrorCode::InvalidCwd
            | ErrorCode::AmbiguousApproval
            | ErrorCode::InvalidAgentType
            | ErrorCode::InvalidTask
            | ErrorCode::InvalidWorkingDir
            | ErrorCode::AttachmentBadName
            | ErrorCode::IsolationNeedsGit => 400,
            ErrorCode::Unauthorized => 401,
            ErrorCode::BudgetExceeded => 402,
            ErrorCode::Forbidden => 403,
            ErrorCode::HostNotAllowed | ErrorCode::FileRefused => 403,
            ErrorCode::NotFound => 404,
            ErrorCode::MethodNotAllowed => 405,
            ErrorCode::NotAcceptable => 406,
            ErrorCode::UnsupportedMediaType => 415,
            ErrorCode::ApprovalAlreadyResolved
            | ErrorCode::QuestionAlreadyResolved
            | ErrorCode::NothingRunning
            | ErrorCode::ConversationArchived
            | ErrorCode::DepthLimit
            | ErrorCode::Canceled
            | ErrorCode::SessionStillRunning
            | ErrorCode::SessionReleased
            | ErrorCode::NotContinuable
            | ErrorCode::ContinuationConflict
            | ErrorCode::Conflict
            | ErrorCode::OwnedElsewhere
            | ErrorCode::MergeConflict => 409,
            ErrorCode::PayloadTooLarge | ErrorCode::AttachmentTooLarge => 413,
            ErrorCode::AttachmentTypeMismatch => 415,
            ErrorCode::QueueFull
            | ErrorCode::ConcurrencyLimit
            | ErrorCode::ProcessLimit
            | ErrorCode::TooManyAttempts
            | ErrorCode::UsageLimit => 429,
            ErrorCode::ResumeUnavailable
            | ErrorCode::SpawnFailed
            | ErrorCode::AgentCrashed
            | ErrorCode::AgentError
            | ErrorCode::ProtocolError
            | ErrorCode::TurnTimeout
            | ErrorCode::Interrupted
            | ErrorCode::Expired
            | ErrorCode::SubagentError
            | ErrorCode::ChildRefusal
            | ErrorCode::ChildMaxTokens
            | ErrorCode::ChildMaxTurnRequests
            | ErrorCode::ChildEmpty
            | ErrorCode::ChildUnknown
            | ErrorCode::AttachmentUnavailable
            | ErrorCode::WorktreeFailed => 502,
            ErrorCode::Rebuilding
            | ErrorCode::OwnerLost
            | ErrorCode::StoreUnavailable
            | ErrorCode::ServerBusy
            | ErrorCode::Draining => 503,
            ErrorCode::StartTimeout => 504,
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
