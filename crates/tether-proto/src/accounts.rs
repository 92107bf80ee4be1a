//! One person across channels on the wire (issue 28): linked channel accounts and the
//! one-time codes that confirm a link, `/api/v1/me/accounts`, `/api/v1/me/link-codes`
//! and `/api/v1/people/{id}/accounts`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::PersonId;

/// A channel account (Telegram user id, Slack user, Discord user, Feishu open_id)
/// linked to a person: what it sends acts as them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ChannelAccount {
    pub channel: String,
    /// The platform's stable user id.
    pub user_id: String,
    /// The name the platform gave when it was linked.
    pub user_name: String,
    #[schema(value_type = String)]
    pub person_id: PersonId,
    pub linked_at_ms: i64,
    /// Who confirmed the link (the person themselves, or an admin).
    pub linked_by: String,
}

/// `GET /api/v1/me/accounts`, `GET /api/v1/people/{id}/accounts`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AccountList {
    pub accounts: Vec<ChannelAccount>,
}

/// `POST /api/v1/me/accounts`: the code `/link` gave on a channel, entered by the
/// signed-in person; that channel account becomes theirs.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RedeemLinkCode {
    pub code: String,
}

/// `POST /api/v1/me/link-codes`: a code for the person to send on a channel
/// (`/link <code>`), which links the account they send it from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct LinkCode {
    /// Shown this once; only its hash is stored.
    pub code: String,
    /// What to send on the channel.
    pub send: String,
    pub expires_at_ms: i64,
}

/// `POST /api/v1/people/{id}/accounts` (admins): links an account without a code.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LinkAccount {
    pub channel: String,
    pub user_id: String,
    /// Absent: the user id.
    #[serde(default)]
    pub user_name: Option<String>,
}
