//! Start-up recovery (architecture.md §6), in one transaction: open turns → `interrupted`, pending
//! approvals and questions → `expired` (fail closed), live sessions → dormant, bindings
//! kept, and one status message per affected conversation.

use tether_proto::{ConversationId, EventEnvelope, SessionId};

/// What recovery did to one conversation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveredConversation {
    pub conversation_id: ConversationId,
    /// The session the notice was attached to.
    pub session_id: SessionId,
    pub interrupted_turns: usize,
    pub expired_approvals: usize,
    pub expired_questions: usize,
}

#[derive(Debug, Clone, Default)]
pub struct RecoveryReport {
    pub conversations: Vec<RecoveredConversation>,
    pub sessions_made_dormant: usize,
    pub events: Vec<EventEnvelope>,
}
