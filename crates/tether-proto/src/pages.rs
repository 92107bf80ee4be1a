//! Wire types for clients that page through long lists and follow the conversation list
//! live: a page of a conversation's events read backwards, and the list event stream's
//! messages.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::{Conversation, EventEnvelope};

/// `GET /api/v1/conversations/{id}/events/page`: events oldest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ConversationEventPage {
    pub events: Vec<EventEnvelope>,
    /// Whether there are events before the first one here (ask again with
    /// `before_id` = the first event's id).
    pub has_more: bool,
}

/// What happened to a conversation, as the list event stream tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ConversationChangeKind {
    /// Created after the stream opened.
    Created,
    /// Its title, state, binding, queue or pending requests changed.
    Updated,
    /// It was archived (it leaves lists without archived conversations).
    Archived,
}

/// One `event: conversation` message of `GET /api/v1/conversations/events`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ConversationChange {
    pub change: ConversationChangeKind,
    /// The conversation as `GET /api/v1/conversations/{id}` shows it now.
    pub conversation: Conversation,
}
