//! Runtime errors and their stable wire codes.

use tether_proto::ErrorCode;

pub(crate) type Result<T> = std::result::Result<T, RuntimeError>;

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("{what} not found: {id}")]
    NotFound { what: &'static str, id: String },
    #[error("{0}")]
    BadRequest(String),
    #[error(transparent)]
    Command(#[from] tether_core::command::CommandError),
    #[error("unknown agent {name:?}; configured agents: {known}")]
    UnknownAgent { name: String, known: String },
    #[error("working directory {path} is not allowed: {reason}")]
    InvalidCwd { path: String, reason: String },
    #[error(transparent)]
    Resolve(#[from] tether_core::approval::ResolveError),
    #[error("the queue is full ({cap} messages wait already)")]
    QueueFull { cap: usize },
    #[error("no turn is running")]
    NothingRunning,
    #[error("conversation {0} is archived")]
    Archived(tether_proto::ConversationId),
    #[error("storage error: {0}")]
    Store(#[from] tether_store::StoreError),
    #[error("internal error: {0}")]
    Internal(String),
    #[error(transparent)]
    Attachment(#[from] crate::AttachmentError),
    /// File-out refused or failed (issue 24 S1).
    #[error(transparent)]
    FileOut(#[from] crate::attachments::file_out::FileOutError),
    /// A delegation rule (its own stable code: depth_limit, session_released, ...).
    #[error("{message}")]
    Delegation { code: ErrorCode, message: String },
    /// Cluster: the owner node's answer to a forwarded command, with the code it had
    /// there (rebuilt as its own variant where one exists, see `cluster::wire`).
    #[error("{message}")]
    Remote { code: ErrorCode, message: String },
    /// Cluster: the owner node took a forwarded command and died before it answered.
    #[error(
        "node {node} took the command and stopped before it answered; it may or may not have run"
    )]
    OwnerLost { node: tether_proto::NodeId },
    /// Issue 28: the person's role or token may not do this (a conversation they may not
    /// see is `NotFound` instead).
    #[error(transparent)]
    Denied(#[from] tether_core::authz::Denied),
    /// Issue 29: a budget's hard cap is reached; the message names it and its use.
    #[error("{0}")]
    BudgetExceeded(String),
    /// Issue 32: an isolated worktree refused or failed (its own codes).
    #[error(transparent)]
    Worktree(#[from] crate::worktree::error::WorktreeError),
    /// Issue 31: this node drains and no other node takes the work.
    #[error(
        "this node is draining (an upgrade or a restart) and no other node can take new work; retry in a moment"
    )]
    Draining,
    /// Issue 12: another live node owns the conversation (its live session runs there).
    #[error("conversation {conversation_id} is owned by node {node_id}")]
    OwnedElsewhere {
        conversation_id: tether_proto::ConversationId,
        node_id: tether_proto::NodeId,
    },
}

impl RuntimeError {
    pub fn code(&self) -> ErrorCode {
        match self {
            RuntimeError::NotFound { .. } => ErrorCode::NotFound,
            RuntimeError::BadRequest(_) => ErrorCode::BadRequest,
            RuntimeError::Command(e) => e.code(),
            RuntimeError::UnknownAgent { .. } => ErrorCode::UnknownAgent,
            RuntimeError::InvalidCwd { .. } => ErrorCode::InvalidCwd,
            RuntimeError::Resolve(e) => e.code(),
            RuntimeError::QueueFull { .. } => ErrorCode::QueueFull,
            RuntimeError::NothingRunning => ErrorCode::NothingRunning,
            RuntimeError::Archived(_) => ErrorCode::ConversationArchived,
            // A continuation id another request recorded first (its transaction was
            // rolled back whole).
            RuntimeError::Store(tether_store::StoreError::LedgerTaken { .. }) => {
                ErrorCode::ContinuationConflict
            }
            // This node lost the conversation to another one (fenced): the same answer
            // as a claim that finds it owned.
            RuntimeError::Store(tether_store::StoreError::Fenced { .. }) => {
                ErrorCode::OwnedElsewhere
            }
            // The parent's running children, counted where the turn is added (any node).
            RuntimeError::Store(tether_store::StoreError::ChildrenCap { .. }) => {
                ErrorCode::ConcurrencyLimit
            }
            RuntimeError::Store(
                tether_store::StoreError::Duplicate { .. } | tether_store::StoreError::LastOwner,
            ) => ErrorCode::Conflict,
            // The database is unreachable (or SQLite's disk full): retryable.
            RuntimeError::Store(e) if e.is_unavailable() => ErrorCode::StoreUnavailable,
            RuntimeError::Store(_) | RuntimeError::Internal(_) => ErrorCode::Internal,
            RuntimeError::Delegation { code, .. } => *code,
            RuntimeError::Attachment(e) => e.code(),
            RuntimeError::FileOut(e) => e.code(),
            RuntimeError::Remote { code, .. } => *code,
            RuntimeError::OwnerLost { .. } => ErrorCode::OwnerLost,
            RuntimeError::OwnedElsewhere { .. } => ErrorCode::OwnedElsewhere,
            RuntimeError::Denied(d) => d.code(),
            RuntimeError::BudgetExceeded(_) => ErrorCode::BudgetExceeded,
            RuntimeError::Draining => ErrorCode::Draining,
            RuntimeError::Worktree(e) => e.code(),
        }
    }
}

impl From<tether_core::schedule::ScheduleError> for RuntimeError {
    fn from(e: tether_core::schedule::ScheduleError) -> Self {
        RuntimeError::BadRequest(e.to_string())
    }
}
