//! What Slack sends tether, as types only: Events API bodies, interactivity payloads,
//! slash command fields, Socket Mode envelopes and the Web API replies tether reads.
//! Every field is optional or defaulted and unknown fields are ignored, so a payload
//! Slack grows (or trims) still parses; the logic decides what a missing field means.

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::Value;

/// An Events API body (`url_verification` or `event_callback`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct EventBody {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub event_id: Option<String>,
    /// The URL check's challenge, answered as it came.
    pub challenge: Value,
    #[serde(deserialize_with = "crate::json::lenient")]
    pub event: Event,
}

/// The `event` of an `event_callback` (tether reads `message` and `app_mention`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Event {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub subtype: Option<String>,
    /// Set (not null) on messages a bot wrote.
    pub bot_id: Option<IgnoredAny>,
    pub user: Option<String>,
    pub channel: Option<String>,
    pub ts: Option<String>,
    pub thread_ts: Option<String>,
    pub text: Option<String>,
    #[serde(deserialize_with = "crate::json::lenient")]
    pub files: Vec<File>,
}

/// One of a message's `files`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct File {
    pub url_private_download: Option<String>,
    pub url_private: Option<String>,
    pub name: Option<String>,
    pub mimetype: Option<String>,
    pub size: Option<u64>,
}

/// An interactivity payload (`block_actions` of tether's buttons).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct BlockActions {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    #[serde(deserialize_with = "crate::json::lenient")]
    pub user: Id,
    #[serde(deserialize_with = "crate::json::lenient")]
    pub channel: Id,
    #[serde(deserialize_with = "crate::json::lenient")]
    pub container: Container,
    #[serde(deserialize_with = "crate::json::lenient")]
    pub message: MessageRef,
    #[serde(deserialize_with = "crate::json::lenient")]
    pub actions: Vec<Action>,
    pub trigger_id: Option<String>,
}

/// `{"id": …}` (a user, a channel).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Id {
    pub id: Option<String>,
}

/// Where the pressed message lives.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Container {
    pub channel_id: Option<String>,
    pub thread_ts: Option<String>,
}

/// The message that carried the button.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct MessageRef {
    pub thread_ts: Option<String>,
}

/// One pressed action.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Action {
    pub action_id: Option<String>,
    /// The button's value: [`ButtonValue`] as a JSON string.
    pub value: Option<String>,
    pub action_ts: Option<String>,
}

/// What tether puts in a decision button's `value`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ButtonValue {
    pub approval_id: Option<String>,
    pub decision: Option<String>,
}

/// A slash command's form fields.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct CommandFields {
    pub channel_id: Option<String>,
    pub user_id: Option<String>,
    pub trigger_id: Option<String>,
    pub text: Option<String>,
}

/// A Socket Mode envelope.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Envelope {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub envelope_id: Option<String>,
    /// Why Slack asks for a new connection (`disconnect`).
    pub reason: Option<String>,
    /// What is recorded as delivered (an event body, an interactivity payload, command
    /// fields), parsed by kind.
    pub payload: Value,
}

/// The fields of a Web API reply tether reads (`ok`, `error`, and per method `ts`,
/// `url`, the `auth.test` identity, the upload ticket).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Reply {
    pub ok: Option<bool>,
    pub error: Option<String>,
    pub ts: Option<String>,
    pub url: Option<String>,
    pub team: Option<String>,
    pub user_id: Option<String>,
    pub bot_id: Option<String>,
    pub upload_url: Option<String>,
    pub file_id: Option<String>,
}
