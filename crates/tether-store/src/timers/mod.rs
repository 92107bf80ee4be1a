//! The durable timer facility (issue 29; migration 0025 / PostgreSQL 0017): timers due at
//! a moment, claimed by one node at a time with a lease (a node that dies holding a
//! claim lets it lapse, and another fires it), fired or cancelled once; and the accounts
//! known to be at their vendor's limit (`sql.rs`).

use tether_proto::ConversationId;

/// What a timer does when it fires.
pub const CONTINUE_AFTER_LIMIT: &str = "continue_after_limit";

/// A timer to add.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTimer {
    pub id: String,
    pub kind: String,
    pub conversation_id: ConversationId,
    pub account: Option<String>,
    pub due_at_ms: i64,
    pub attempt: i64,
    /// JSON the firing reads.
    pub payload: String,
}

/// A stored timer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timer {
    pub id: String,
    pub kind: String,
    pub conversation_id: ConversationId,
    pub account: Option<String>,
    pub due_at_ms: i64,
    /// `waiting`, `claimed`, `fired` or `cancelled`.
    pub state: String,
    pub attempt: i64,
    pub payload: String,
    pub created_at_ms: i64,
}
