//! Pending requests of agents to people: approvals (allow or deny a tool call) and
//! questions (free text). Both are one family in the store (`sql.rs`): created with
//! their event, marking the turn waiting; resolved at most once (the conditional update
//! lets the first answer win).

use tether_proto::{ApprovalId, ConversationId, Decision, QuestionId, SessionId, TurnId};

/// An approval to insert.
#[derive(Debug, Clone)]
pub struct NewApproval {
    pub id: ApprovalId,
    pub conversation_id: ConversationId,
    pub session_id: SessionId,
    pub turn_id: TurnId,
    pub title: String,
    pub kind: Option<String>,
    pub detail: Option<serde_json::Value>,
    pub options: Vec<Decision>,
    pub deadline_ms: i64,
}

/// A question to insert.
#[derive(Debug, Clone)]
pub struct NewQuestion {
    pub id: QuestionId,
    pub conversation_id: ConversationId,
    pub session_id: SessionId,
    pub turn_id: TurnId,
    pub prompt: String,
    pub deadline_ms: i64,
}

/// Where a page of approvals or questions starts: after the request created at
/// `created_at_ms` with id `id` (lists are newest first, ties by id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestPlace {
    pub created_at_ms: i64,
    pub id: String,
}
