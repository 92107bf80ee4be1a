//! What Discord sends tether, as types only: Gateway frames and the dispatches tether
//! reads (`READY`, `MESSAGE_CREATE`, `INTERACTION_CREATE`), interactions from the HTTP
//! endpoint, and the REST replies tether reads. Every field is optional or defaulted and
//! unknown fields are ignored; nested objects and lists that do not have their shape read
//! as missing (`crate::json::lenient`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One Gateway frame.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Frame {
    pub op: Option<u64>,
    /// The sequence number of a dispatch.
    pub s: Option<i64>,
    /// The dispatch's name.
    pub t: Option<String>,
    /// The frame's data: parsed by `op` and `t`.
    pub d: Value,
}

/// Hello's data (op 10).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Hello {
    pub heartbeat_interval: Option<u64>,
}

/// `READY`'s data.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Ready {
    #[serde(deserialize_with = "crate::json::lenient")]
    pub user: User,
    pub session_id: Option<String>,
    pub resume_gateway_url: Option<String>,
}

/// A user (an author, a mention, who pressed a button).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct User {
    pub id: Option<String>,
    pub username: Option<String>,
    pub global_name: Option<String>,
    pub bot: Option<bool>,
}

/// A message (`MESSAGE_CREATE`'s data).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Message {
    pub id: Option<String>,
    pub channel_id: Option<String>,
    pub guild_id: Option<String>,
    /// The message type: 0 default, 19 reply; the others are notices.
    #[serde(rename = "type")]
    pub kind: Option<u64>,
    #[serde(deserialize_with = "crate::json::lenient")]
    pub author: User,
    pub content: Option<String>,
    #[serde(deserialize_with = "crate::json::lenient")]
    pub mentions: Vec<User>,
    #[serde(deserialize_with = "crate::json::lenient")]
    pub attachments: Vec<Attachment>,
}

/// A file on a message.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Attachment {
    pub filename: Option<String>,
    pub content_type: Option<String>,
    pub size: Option<u64>,
    pub url: Option<String>,
}

/// An interaction (a button press is type 3, a PING type 1).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Interaction {
    pub id: Option<String>,
    pub token: Option<String>,
    #[serde(rename = "type")]
    pub kind: Option<u64>,
    pub channel_id: Option<String>,
    pub guild_id: Option<String>,
    /// In a server: the member, with their user.
    #[serde(deserialize_with = "crate::json::lenient")]
    pub member: Option<Member>,
    /// In a DM: the user.
    #[serde(deserialize_with = "crate::json::lenient")]
    pub user: Option<User>,
    #[serde(deserialize_with = "crate::json::lenient")]
    pub data: ComponentData,
}

/// A server member.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Member {
    #[serde(deserialize_with = "crate::json::lenient")]
    pub user: Option<User>,
}

/// A pressed component.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ComponentData {
    pub custom_id: Option<String>,
}

/// The fields of a REST reply tether reads: the id of what was made, the Gateway URL,
/// the bot's name, and a refusal's `message`, `code`, `retry_after` and `global`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Reply {
    pub id: Option<String>,
    pub url: Option<String>,
    pub username: Option<String>,
    pub message: Option<String>,
    /// Discord's error code (a number), shown as it came.
    pub code: Value,
    pub retry_after: Option<f64>,
    pub global: Option<bool>,
}
