//! The usage ledger (issue 29; migration 0023 / PostgreSQL 0015): one row per usage
//! report, with where it ran (conversation, its delegation tree's root, session, turn,
//! person, agent, model, account), its tokens and its cost by the price table of the
//! time; totals over any of those scopes since a moment (`sql.rs`).

use tether_proto::{ConversationId, PersonId, SessionId, TurnId};

/// A row to append (`at` set by the store).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewUsage {
    pub conversation_id: ConversationId,
    /// The delegation tree's root (the conversation itself when it is no child).
    pub root_conversation_id: ConversationId,
    pub session_id: Option<SessionId>,
    pub turn_id: Option<TurnId>,
    pub person_id: Option<PersonId>,
    pub agent: String,
    pub model: Option<String>,
    pub account: Option<String>,
    pub input: i64,
    pub cached_input: i64,
    pub cache_write: i64,
    pub output: i64,
    pub reasoning: i64,
    /// `None`: no price for the model (unknown, not zero).
    pub cost_nanos: Option<i64>,
    pub price_version: String,
}

/// What totals are taken over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UsageScope {
    Turn(TurnId),
    Session(SessionId),
    Conversation(ConversationId),
    /// A delegation tree: the root and every child under it.
    Tree(ConversationId),
    Person(PersonId),
    Everything,
}

/// Sums of rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageTotals {
    pub reports: i64,
    pub input: i64,
    pub cached_input: i64,
    pub cache_write: i64,
    pub output: i64,
    pub reasoning: i64,
    /// The cost of the priced rows.
    pub cost_nanos: i64,
    /// Rows without a price (their cost is not in `cost_nanos`).
    pub unpriced: i64,
}
