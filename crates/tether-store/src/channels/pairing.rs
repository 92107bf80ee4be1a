//! Access rows of the channels: users allowed by pairing, pairing codes, and small
//! per-channel state (such as the Telegram update offset).

/// A pairing code given to an unknown sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pairing {
    pub code: String,
    pub channel: String,
    pub user_id: String,
    pub user_name: String,
    pub chat_key: String,
    pub address: String,
    /// `pending` or `approved`.
    pub status: String,
    pub created_at_ms: i64,
    pub approved_at_ms: Option<i64>,
    pub approved_by: Option<String>,
}
