//! Channel rows (Telegram, Feishu): chat ↔ conversation mapping with its event cursor,
//! the durable outbox (a row first, then a send; deduplicated by key), allowlisted users,
//! pairing codes and small per-channel state.
//!
//! Bodies and addresses are opaque JSON strings here: their shape belongs to the channels.

use tether_proto::ConversationId;

/// One chat (or forum topic, or user within a group) bound to a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelChat {
    pub channel: String,
    pub chat_key: String,
    pub conversation_id: ConversationId,
    pub address: String,
    /// The last conversation event id already turned into outbox rows.
    pub event_cursor: i64,
    pub created_at_ms: i64,
    /// Another chat mapped to the same conversation got its latest message: this one
    /// stays quiet (`reply_here`).
    pub muted: bool,
}

/// Delivery state of an outbox row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutboxStatus {
    Pending,
    Sent,
    /// Gave up (permanent error or too many attempts).
    Failed,
    /// Not sendable any more (an edit whose message was never sent).
    Skipped,
}

impl OutboxStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            OutboxStatus::Pending => "pending",
            OutboxStatus::Sent => "sent",
            OutboxStatus::Failed => "failed",
            OutboxStatus::Skipped => "skipped",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => OutboxStatus::Pending,
            "sent" => OutboxStatus::Sent,
            "failed" => OutboxStatus::Failed,
            "skipped" => OutboxStatus::Skipped,
            _ => return None,
        })
    }
}

/// An outbox row to insert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewOutbox {
    pub channel: String,
    pub chat_key: String,
    pub dedupe_key: String,
    /// `send` or `edit`.
    pub op: String,
    pub target_key: Option<String>,
    pub address: String,
    pub body: String,
    /// When a row with the key exists: `false` leaves it alone; `true` replaces its body
    /// and makes it pending again (a coalesced edit: only the latest body matters).
    pub replace: bool,
    /// The W3C trace context of the turn it belongs to (issue 31).
    pub traceparent: Option<String>,
}

/// A stored outbox row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxRow {
    pub id: i64,
    pub channel: String,
    pub chat_key: String,
    pub dedupe_key: String,
    pub op: String,
    pub target_key: Option<String>,
    pub address: String,
    pub body: String,
    pub version: i64,
    pub status: OutboxStatus,
    pub attempts: i64,
    pub next_attempt_at_ms: i64,
    pub last_error: Option<String>,
    pub remote_id: Option<String>,
    pub created_at_ms: i64,
    /// The W3C trace context of the turn it belongs to (issue 31).
    pub traceparent: Option<String>,
}

mod pairing;

pub use pairing::Pairing;

mod inbound;
pub use inbound::PendingInbound;
