//! The event envelope: an append-only, per-session numbered record of what happened.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::{
    ApprovalId, ApprovalStatus, ConversationId, Decision, ErrorCode, NewSessionReason, QuestionId,
    QuestionStatus, SessionId, TaskId, TaskOutcome, TurnId, TurnOrigin,
};

/// One stored event. `id` is global and increasing (used as the SSE `id:`), `seq` is
/// gap-free within the session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct EventEnvelope {
    pub id: i64,
    #[schema(value_type = String)]
    pub session_id: SessionId,
    #[schema(value_type = String)]
    pub conversation_id: ConversationId,
    pub seq: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub turn_id: Option<TurnId>,
    /// Milliseconds since the Unix epoch.
    pub at_ms: i64,
    pub payload: EventPayload,
}

/// What happened. Tagged by `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventPayload {
    /// A new runtime session was started for the conversation.
    SessionStarted {
        agent: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        reason: NewSessionReason,
    },
    /// The agent process is attached and the session has its external id.
    SessionLive {
        external_id: String,
        /// `true` when a dormant session was resumed.
        resumed: bool,
    },
    /// The session's process went away; the next turn resumes it.
    SessionDormant {
        reason: String,
    },
    TurnStarted {
        input: String,
        /// The W3C trace context of the turn (issue 31), when tracing is on: what is sent
        /// to a chat platform for this turn joins its trace.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        traceparent: Option<String>,
    },
    MessageDelta {
        text: String,
    },
    ThoughtDelta {
        text: String,
    },
    ToolCall {
        tool_call_id: String,
        title: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kind: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<serde_json::Value>,
    },
    ToolCallUpdate {
        tool_call_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        title: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<serde_json::Value>,
    },
    ApprovalRequested {
        #[schema(value_type = String)]
        approval_id: ApprovalId,
        title: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kind: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<serde_json::Value>,
        options: Vec<Decision>,
        deadline_ms: i64,
    },
    ApprovalResolved {
        #[schema(value_type = String)]
        approval_id: ApprovalId,
        status: ApprovalStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        decided_by: Option<String>,
    },
    QuestionAsked {
        #[schema(value_type = String)]
        question_id: QuestionId,
        prompt: String,
        deadline_ms: i64,
    },
    QuestionResolved {
        #[schema(value_type = String)]
        question_id: QuestionId,
        status: QuestionStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer: Option<String>,
    },
    TurnCompleted {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stop_reason: Option<String>,
        text: String,
    },
    TurnFailed {
        code: ErrorCode,
        message: String,
    },
    TurnCancelled {},
    TurnInterrupted {
        reason: String,
    },
    /// A local status message (also in the conversation history).
    Status {
        text: String,
    },
    /// On the parent's session: a delegated task was created (once per task).
    #[serde(alias = "delegation.started")]
    DelegationStarted {
        #[schema(value_type = String)]
        task_id: TaskId,
        agent_type: String,
        task: String,
        working_dir: String,
        /// The parent's turn that delegated.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(value_type = Option<String>)]
        parent_turn_id: Option<TurnId>,
        /// The parent's tool call that delegated, when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool_call_id: Option<String>,
    },
    /// On the parent's session: the task's first turn ended.
    #[serde(alias = "delegation.completed")]
    DelegationCompleted {
        #[schema(value_type = String)]
        task_id: TaskId,
        #[schema(value_type = String)]
        turn_id: TurnId,
        turn_version: i64,
        outcome: TaskOutcome,
    },
    /// On the parent's session: a later turn of the task ended.
    #[serde(alias = "delegation.session_update")]
    DelegationSessionUpdate {
        #[schema(value_type = String)]
        task_id: TaskId,
        #[schema(value_type = String)]
        turn_id: TurnId,
        turn_version: i64,
        origin: TurnOrigin,
        outcome: TaskOutcome,
    },
}

impl EventPayload {
    /// The `type` tag, for SSE `event:` lines.
    pub fn kind(&self) -> &'static str {
        match self {
            EventPayload::SessionStarted { .. } => "session_started",
            EventPayload::SessionLive { .. } => "session_live",
            EventPayload::SessionDormant { .. } => "session_dormant",
            EventPayload::TurnStarted { .. } => "turn_started",
            EventPayload::MessageDelta { .. } => "message_delta",
            EventPayload::ThoughtDelta { .. } => "thought_delta",
            EventPayload::ToolCall { .. } => "tool_call",
            EventPayload::ToolCallUpdate { .. } => "tool_call_update",
            EventPayload::ApprovalRequested { .. } => "approval_requested",
            EventPayload::ApprovalResolved { .. } => "approval_resolved",
            EventPayload::QuestionAsked { .. } => "question_asked",
            EventPayload::QuestionResolved { .. } => "question_resolved",
            EventPayload::TurnCompleted { .. } => "turn_completed",
            EventPayload::TurnFailed { .. } => "turn_failed",
            EventPayload::TurnCancelled {} => "turn_cancelled",
            EventPayload::TurnInterrupted { .. } => "turn_interrupted",
            EventPayload::Status { .. } => "status",
            EventPayload::DelegationStarted { .. } => "delegation_started",
            EventPayload::DelegationCompleted { .. } => "delegation_completed",
            EventPayload::DelegationSessionUpdate { .. } => "delegation_session_update",
        }
    }

    /// Whether this event ends a turn.
    pub fn is_turn_terminal(&self) -> bool {
        matches!(
            self,
            EventPayload::TurnCompleted { .. }
                | EventPayload::TurnFailed { .. }
                | EventPayload::TurnCancelled {}
                | EventPayload::TurnInterrupted { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::EventPayload;

    #[test]
    fn delegation_events_are_snake_case_and_old_dotted_rows_still_read() {
        let ev = EventPayload::DelegationCompleted {
            task_id: "t".into(),
            turn_id: "u".into(),
            turn_version: 1,
            outcome: serde_json::from_value(serde_json::json!({"status": "completed"})).unwrap(),
        };
        let json = serde_json::to_value(&ev).unwrap();
        assert_eq!(json["type"], "delegation_completed");
        assert_eq!(ev.kind(), "delegation_completed");
        let mut old = json.clone();
        old["type"] = "delegation.completed".into();
        let back: EventPayload = serde_json::from_value(old).unwrap();
        assert_eq!(back.kind(), "delegation_completed");
    }
}
