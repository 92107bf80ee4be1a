//! Delegation wire types (architecture.md §7): the MCP tools' results and the people-facing
//! continuation endpoints. A task id is the id of the child's `delegate` conversation.
//! The tools' arguments are in [`crate::params`].

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::{ConversationId, ErrorCode, SessionId, TaskId, TurnId};

macro_rules! snake_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident => $s:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
        pub enum $name { $($(#[$vm])* #[serde(rename = $s)] $variant),+ }

        impl $name {
            /// The stable snake_case spelling.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $s),+ }
            }

            /// Parses the stable spelling.
            pub fn parse(s: &str) -> Option<Self> {
                match s { $($s => Some($name::$variant),)+ _ => None }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

snake_enum!(
    /// Status of a delegated task's latest turn.
    TaskStatus {
        Running => "running",
        Completed => "completed",
        Failed => "failed",
        Canceled => "canceled",
        /// No such task (or not visible to the caller).
        Unknown => "unknown",
    }
);

impl TaskStatus {
    /// Completed, failed or canceled.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Canceled
        )
    }
}

snake_enum!(
    /// Whether a delegated session can take another turn: exactly one of these.
    Availability {
        /// A turn is running.
        Running => "running",
        /// Idle with a live agent process: the next turn starts at once.
        ContinuableLive => "continuable_live",
        /// Idle and dormant: the next turn resumes the agent's session first.
        ContinuableResume => "continuable_resume",
        /// Closed for good (`close_session`); history is kept.
        Released => "released",
        /// Can never take another turn (the agent never started a session).
        NotContinuable => "not_continuable",
    }
);

snake_enum!(
    /// Who started a turn of a delegated session.
    TurnOrigin {
        Parent => "parent",
        Person => "person",
    }
);

snake_enum!(
    /// What a blocked child waits for.
    BlockedKind {
        Approval => "approval",
        Question => "question",
    }
);

/// The child waits for a person (answer it with the approvals/questions API).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BlockedOn {
    pub kind: BlockedKind,
    pub request_id: String,
    pub title: String,
}

/// How one turn of a task ended (also the payload of the delegation events).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TaskOutcome {
    pub status: TaskStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<ErrorCode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<i64>,
}

/// One task as `get_delegation_status` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TaskSnapshot {
    #[schema(value_type = String)]
    pub task_id: TaskId,
    pub status: TaskStatus,
    /// Number of turns the task's session has had (1 after `delegate_to_agent`, +1 per
    /// continuation); only grows.
    pub turn_version: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub availability: Option<Availability>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_type: Option<String>,
    /// Who started the latest turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<TurnOrigin>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub turn_id: Option<TurnId>,
    /// The child's reply, when completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<ErrorCode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<i64>,
    /// Set while the child waits for a person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_on: Option<BlockedOn>,
}

impl TaskSnapshot {
    /// The snapshot of a task id that does not exist (or is not the caller's).
    pub fn unknown(task_id: &TaskId) -> TaskSnapshot {
        TaskSnapshot {
            task_id: task_id.clone(),
            status: TaskStatus::Unknown,
            turn_version: 0,
            availability: None,
            agent_type: None,
            origin: None,
            turn_id: None,
            text: None,
            error_code: None,
            message: Some(format!("no delegated task {task_id}")),
            duration_ms: None,
            blocked_on: None,
        }
    }
}

/// `get_delegation_status` result: tasks in request order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TaskList {
    pub tasks: Vec<TaskSnapshot>,
}

/// `delegate_to_agent` arguments. The field docs are the descriptions a model reads in
/// the tool's `inputSchema`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct DelegateRequest {
    /// Which agent does the work.
    pub agent_type: String,
    /// The complete instructions for the child: goal, context, files, constraints and what
    /// to report back.
    pub task: String,
    /// Absolute directory the child works in; must lie under tether's workspace roots.
    /// Default: your working directory.
    #[serde(default)]
    pub working_dir: Option<String>,
}

/// `delegate_to_agent` result (and the result of a continuation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TaskStarted {
    #[schema(value_type = String)]
    pub task_id: TaskId,
    /// Always `running`.
    pub status: TaskStatus,
    pub turn_version: i64,
    #[schema(value_type = String)]
    pub turn_id: TurnId,
    pub agent_type: String,
    pub working_dir: String,
}

/// `GET /api/v1/conversations/{id}/continuation`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Continuation {
    #[schema(value_type = String)]
    pub task_id: TaskId,
    pub availability: Availability,
    pub turn_version: i64,
    pub status: TaskStatus,
    pub agent_type: String,
    pub working_dir: String,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub parent_conversation_id: Option<ConversationId>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub parent_session_id: Option<SessionId>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub parent_turn_id: Option<TurnId>,
    /// The parent's tool call that created the task, when known.
    #[serde(default)]
    pub parent_tool_call_id: Option<String>,
    pub depth: u32,
    /// Set while the task's running turn waits for a person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_on: Option<BlockedOn>,
}

/// `POST /api/v1/conversations/{id}/continue` and, with the `task_id`, the arguments of
/// `continue_with_session` ([`crate::TaskArgs`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContinueRequest {
    /// The follow-up for the child.
    pub message: String,
    /// Your idempotency key for this request, e.g. a fresh UUID (scoped to the task's
    /// parent conversation). Reuse it only to retry exactly the same request (same task and
    /// message): the retry returns the first result and nothing is sent twice. Reusing it
    /// with another task or message fails with continuation_conflict.
    pub continuation_id: String,
}

/// `POST /api/v1/conversations/{id}/close` and, with the `task_id`, the arguments of
/// `close_session` ([`crate::TaskArgs`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CloseRequest {
    /// Your idempotency key for this request, e.g. a fresh UUID (scoped to the task's
    /// parent conversation). Reuse it only to retry exactly the same request: the retry
    /// returns the first result. Reusing it with another task fails with
    /// continuation_conflict.
    pub continuation_id: String,
}

/// Result of a close.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TaskClosed {
    #[schema(value_type = String)]
    pub task_id: TaskId,
    /// Always `released`.
    pub availability: Availability,
    pub turn_version: i64,
    /// Whether a running turn was cancelled by the close.
    pub canceled_running_turn: bool,
}
