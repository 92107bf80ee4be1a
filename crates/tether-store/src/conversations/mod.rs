//! Conversations, their runtime sessions and turns: the rows to insert (the stored rows
//! map to `tether_proto`'s types in `sql_*.rs`), the list pages and what the views are
//! built from. The SQL is `sql.rs` (conversations and sessions), `sql_turns.rs`,
//! `sql_pages.rs` and `sql_view_parts.rs`, compiled once per backend (see `crate::backend`).

pub(crate) mod pages;
pub(crate) mod view_parts;

use tether_proto::{
    ConversationId, ConversationKind, ErrorCode, MessageRole, NewSessionReason, PersonId,
    SessionId, TurnId, TurnStatus, Visibility,
};

/// A stored conversation (without the derived fields of the API view).
#[derive(Debug, Clone, PartialEq)]
pub struct ConversationRow {
    pub id: ConversationId,
    pub kind: ConversationKind,
    pub title: String,
    pub agent: String,
    pub model: Option<String>,
    pub cwd: String,
    pub archived: bool,
    pub bound_session_id: Option<SessionId>,
    pub parent_conversation_id: Option<ConversationId>,
    /// Why the next session will start (`explicit` after `/new`), while unbound.
    pub next_session_reason: Option<NewSessionReason>,
    /// The person it belongs to (`None` only in a store upgraded from before people
    /// existed, until the first start gives it to the install's owner).
    pub owner_id: Option<PersonId>,
    pub visibility: Visibility,
    /// Its sessions work in its isolated worktree (issue 32; see `worktrees`).
    pub isolated: bool,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

/// A conversation to insert.
#[derive(Debug, Clone)]
pub struct NewConversation<'a> {
    pub id: &'a ConversationId,
    pub kind: ConversationKind,
    pub title: &'a str,
    pub agent: &'a str,
    pub model: Option<&'a str>,
    pub cwd: &'a str,
    pub parent_conversation_id: Option<&'a ConversationId>,
    pub owner_id: Option<&'a PersonId>,
    pub visibility: Visibility,
}

/// What a message to a conversation is routed by
/// ([`Conversations::conversation_for_message`](crate::Conversations)).
#[derive(Debug, Clone)]
pub struct MessageTarget {
    pub conversation: ConversationRow,
    /// Its bound session, read with it.
    pub bound: Option<tether_proto::Session>,
    /// The bound session has a pending question.
    pub asking: bool,
}

/// A session to insert.
#[derive(Debug, Clone)]
pub struct NewSession {
    pub id: SessionId,
    pub conversation_id: ConversationId,
    pub agent: String,
    pub model: Option<String>,
    pub cwd: String,
}

/// A turn to insert.
#[derive(Debug, Clone)]
pub struct NewTurn {
    pub id: TurnId,
    pub session_id: SessionId,
    pub conversation_id: ConversationId,
    pub input: String,
    pub status: TurnStatus,
}

/// A turn just started ([`Conversations::start_turn`](crate::Conversations)).
#[derive(Debug, Clone)]
pub struct StartedTurn {
    /// Its `turn_started` event.
    pub event: tether_proto::EventEnvelope,
    /// Files were given to it (read them with `turn_attachments`); almost no turn has
    /// any, and the start says so without another read.
    pub has_attachments: bool,
}

/// What [`Conversations::finish_turn_with_usage`](crate::Conversations) stored.
#[derive(Debug, Clone)]
pub struct FinishedTurn {
    /// The terminal event; `None` when the turn had already ended (terminal states are
    /// immutable).
    pub event: Option<tether_proto::EventEnvelope>,
    /// The usage row went in with it. `false`: a budget counts it, or its report was
    /// stored already, or the turn's end failed: the caller stores it with
    /// `Usage::record_usage` (which counts it toward its budgets, or changes nothing).
    pub usage_stored: bool,
    /// The streamed events given to go before the end, as stored (none when the turn
    /// had already ended: they are not stored after its end).
    pub streamed: Vec<tether_proto::EventEnvelope>,
}

/// How a turn ended.
#[derive(Debug, Clone)]
pub struct TurnEnd {
    pub status: TurnStatus,
    pub result_text: Option<String>,
    pub stop_reason: Option<String>,
    pub error: Option<(ErrorCode, String)>,
    pub usage: Option<serde_json::Value>,
}

/// A history entry to append together with another write.
#[derive(Debug, Clone)]
pub struct NewMessage {
    pub role: MessageRole,
    pub text: String,
}
