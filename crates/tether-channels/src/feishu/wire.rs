//! What Feishu sends tether, as types only: the event envelope (schema 2.0, the URL
//! check, an encrypted body), the events tether reads (`im.message.receive_v1`,
//! `card.action.trigger`, a legacy card callback), message contents, the long
//! connection's endpoint answer and client settings, and the Open API data tether reads.
//! Every field is optional or defaulted and unknown fields are ignored; nested objects
//! and lists that do not have their shape read as missing (`crate::json::lenient`).

use serde::Deserialize;
use serde_json::Value;

/// A callback body or long-connection payload: an event (schema 2.0: `header` and
/// `event`), the URL check (`type`, `challenge`, `token`), or `{"encrypt": …}`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Envelope {
    #[serde(deserialize_with = "crate::json::lenient")]
    pub header: Header,
    /// The event itself: parsed by `header.event_type`.
    pub event: Value,
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub challenge: Value,
    /// The verification token of schema 1.0 events and the URL check.
    pub token: Option<String>,
    pub encrypt: Option<String>,
}

/// A schema 2.0 event's header.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Header {
    pub event_id: Option<String>,
    pub event_type: Option<String>,
    pub token: Option<String>,
}

/// `im.message.receive_v1`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct MessageEvent {
    #[serde(deserialize_with = "crate::json::lenient")]
    pub sender: MessageSender,
    #[serde(deserialize_with = "crate::json::lenient")]
    pub message: Message,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct MessageSender {
    #[serde(deserialize_with = "crate::json::lenient")]
    pub sender_id: UserIds,
    /// `user`, or `app` for bots.
    pub sender_type: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct UserIds {
    pub open_id: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Message {
    pub message_id: Option<String>,
    pub chat_id: Option<String>,
    /// `p2p` or `group`.
    pub chat_type: Option<String>,
    pub message_type: Option<String>,
    /// The content, a JSON document in a string (its shape by `message_type`).
    pub content: Option<String>,
    #[serde(deserialize_with = "crate::json::lenient")]
    pub mentions: Vec<Mention>,
}

/// A mention in a text: `key` is its placeholder (`@_user_1`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Mention {
    pub key: Option<String>,
}

/// A message's content, the fields of every kind tether takes (`text`; `image_key`;
/// `file_key`, `file_name`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Content {
    pub text: Option<String>,
    pub image_key: Option<String>,
    pub file_key: Option<String>,
    pub file_name: Option<String>,
}

/// A rich-text post: its title and paragraphs of elements.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Post {
    pub title: Option<String>,
    #[serde(deserialize_with = "crate::json::lenient")]
    pub content: Vec<Vec<PostElement>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct PostElement {
    pub tag: Option<String>,
    pub text: Option<String>,
    pub image_key: Option<String>,
}

/// `card.action.trigger`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct CardEvent {
    #[serde(deserialize_with = "crate::json::lenient")]
    pub operator: UserIds,
    #[serde(deserialize_with = "crate::json::lenient")]
    pub action: CardAction,
    #[serde(deserialize_with = "crate::json::lenient")]
    pub context: CardContext,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct CardAction {
    /// The button's value: [`ButtonValue`], as an object or (some clients) a JSON string.
    pub value: Value,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct CardContext {
    pub open_chat_id: Option<String>,
    pub open_message_id: Option<String>,
}

/// What tether puts in a card button's value.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ButtonValue {
    pub approval_id: Option<String>,
    pub decision: Option<String>,
}

/// A legacy card callback (long connection, frame type `card`): operator, chat and
/// action at the top.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct LegacyCard {
    pub token: Option<String>,
    pub open_id: Option<String>,
    pub open_chat_id: Option<String>,
    pub open_message_id: Option<String>,
    pub action: Value,
}

/// The long connection's endpoint answer.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct EndpointReply {
    pub code: Option<i64>,
    pub msg: Option<String>,
    #[serde(deserialize_with = "crate::json::lenient")]
    pub data: EndpointData,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct EndpointData {
    #[serde(rename = "URL")]
    pub url: Option<String>,
    #[serde(rename = "ClientConfig", deserialize_with = "crate::json::lenient")]
    pub client_config: Settings,
}

/// The client settings with the endpoint and in every pong (seconds).
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(default)]
pub struct Settings {
    #[serde(rename = "PingInterval")]
    pub ping_interval: Option<u64>,
    #[serde(rename = "ReconnectInterval")]
    pub reconnect_interval: Option<u64>,
    #[serde(rename = "ReconnectNonce")]
    pub reconnect_nonce: Option<u64>,
}

/// The `data` of an Open API reply, the fields tether reads (a sent message's id, an
/// uploaded image's or file's key).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Data {
    pub message_id: Option<String>,
    pub image_key: Option<String>,
    pub file_key: Option<String>,
}
