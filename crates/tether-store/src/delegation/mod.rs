//! Delegation rows: tasks (a `delegate` conversation with one session for life), their
//! versioned turns, the outcome reports sent to the parent's session, and the
//! continuation ledger (idempotent continue/close, per parent conversation).

pub(crate) mod ledger;

use tether_proto::{ConversationId, SessionId, TaskId, TurnId, TurnOrigin};

/// Ledger scope of tasks without a parent conversation (external MCP clients).
pub const EXTERNAL_SCOPE: &str = "external";

/// A delegated task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelegationRow {
    pub task_id: TaskId,
    pub parent_conversation_id: Option<ConversationId>,
    pub parent_session_id: Option<SessionId>,
    pub parent_turn_id: Option<TurnId>,
    pub parent_tool_call_id: Option<String>,
    pub depth: u32,
    pub agent: String,
    pub cwd: String,
    pub task: String,
    pub session_id: SessionId,
    pub released_at_ms: Option<i64>,
    pub created_at_ms: i64,
}

impl DelegationRow {
    /// The ledger scope: the parent conversation, or [`EXTERNAL_SCOPE`].
    pub fn scope(&self) -> &str {
        self.parent_conversation_id
            .as_deref()
            .unwrap_or(EXTERNAL_SCOPE)
    }
}

/// One turn of a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelegationTurnRow {
    pub task_id: TaskId,
    pub turn_version: i64,
    pub turn_id: TurnId,
    pub origin: TurnOrigin,
    pub parent_turn_id: Option<TurnId>,
    pub reported: bool,
}

/// A task to create, with its first turn.
#[derive(Debug, Clone)]
pub struct NewDelegation {
    pub task_id: TaskId,
    pub title: String,
    pub parent_conversation_id: Option<ConversationId>,
    pub parent_session_id: Option<SessionId>,
    pub parent_turn_id: Option<TurnId>,
    pub parent_tool_call_id: Option<String>,
    pub depth: u32,
    pub agent: String,
    pub cwd: String,
    pub task: String,
    pub session_id: SessionId,
    pub turn_id: TurnId,
    /// Whose the task is when it has no parent (an MCP client's; issue 28); a child of a
    /// parent is its parent's owner's.
    pub owner_id: Option<tether_proto::PersonId>,
}

/// The next turn of a task.
#[derive(Debug, Clone)]
pub struct NewDelegationTurn {
    pub task_id: TaskId,
    pub session_id: SessionId,
    pub turn_id: TurnId,
    pub message: String,
    pub origin: TurnOrigin,
    /// The parent's turn that started it, if any.
    pub parent_turn_id: Option<TurnId>,
    /// Refuse the turn ([`crate::StoreError::ChildrenCap`]) when this many tasks of the
    /// task's parent (or of the external scope) run a turn already: counted in the
    /// transaction that adds it, under a lock of the parent's that every node takes, so
    /// the cap holds across a cluster (issue 26 item 4). `None`: no cap.
    pub max_running_children: Option<usize>,
}
