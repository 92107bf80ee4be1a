//! The adapter contract: what a channel can do (capabilities as data), where a message
//! goes ([`Address`]), what is sent ([`OutMessage`], channel-neutral and stored in the
//! outbox as JSON) and how a send fails ([`SendError`]: retry later or give up).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tether_proto::{ApprovalId, Decision};

/// What a channel supports. The renderer and the dispatcher decide from these, never
/// from the channel's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Messages can carry buttons that call back with data.
    pub buttons: bool,
    /// A sent message can be edited in place.
    pub edit: bool,
    /// Approvals are sent as rich cards.
    pub cards: bool,
    /// Longest text of one message, in characters as the platform counts them.
    pub max_text_len: usize,
}

/// Where a message goes: a chat, optionally a thread (Telegram forum topic) in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Address {
    pub chat_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
}

/// How the text of a message is meant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TextKind {
    /// Shown literally.
    #[default]
    Plain,
    /// Agent output: Markdown-ish, code fences rendered as code where the channel can.
    Markdown,
}

/// A button: a decision on one approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Action {
    pub label: String,
    pub approval_id: ApprovalId,
    pub decision: Decision,
}

/// One outgoing message (or the new content of an edited one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutMessage {
    pub text: String,
    #[serde(default)]
    pub kind: TextKind,
    /// A heading (card title where the channel has cards).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Buttons; an edit with none removes them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<Action>,
    /// Sent (and edited) as a card where the channel has cards.
    #[serde(default)]
    pub card: bool,
    /// A file to send instead of a text (`text` is its caption): a stored attachment,
    /// read when the row is delivered, so a retry sends the same bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<OutFile>,
}

/// A file a message carries (see [`OutMessage::file`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutFile {
    pub attachment_id: tether_proto::AttachmentId,
    pub name: String,
    /// An image the platform shows as one (a Telegram photo, a Feishu image).
    #[serde(default)]
    pub image: bool,
}

impl OutMessage {
    pub fn plain(text: impl Into<String>) -> Self {
        OutMessage {
            text: text.into(),
            kind: TextKind::Plain,
            title: None,
            actions: Vec::new(),
            card: false,
            file: None,
        }
    }

    pub fn markdown(text: impl Into<String>) -> Self {
        OutMessage {
            kind: TextKind::Markdown,
            ..OutMessage::plain(text)
        }
    }
}

/// Why a send did not go through.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// Worth trying again (rate limit, server error, network); `after` is the wait the
    /// platform asked for (Telegram `retry_after`), if any.
    #[error("retry later: {reason}")]
    Retry {
        after: Option<Duration>,
        reason: String,
    },
    /// Trying again cannot help (bad request, bot blocked, chat gone).
    #[error("permanent: {0}")]
    Permanent(String),
}

/// Why a file a person sent could not be fetched from the platform.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    #[error("{size} bytes is over the limit of {limit} bytes per file")]
    TooLarge { size: u64, limit: u64 },
    #[error("{0}")]
    Unavailable(String),
}

/// A file a person sent, not fetched yet: the channel fetches it by `source` when the
/// message is handled (so a replayed update fetches it again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InFile {
    /// The name the platform gave (sanitised when stored) or one made up for photos.
    pub name: String,
    /// The content type the platform declared, if any (checked against the bytes).
    pub declared: Option<String>,
    /// The size the platform declared, if any: a file over the limit is refused before
    /// it is downloaded.
    pub size: Option<u64>,
    /// The platform's reference (Telegram `file_id`; Feishu message id and file key).
    pub source: String,
}

/// One channel adapter. Sends are driven by the outbox dispatcher, one at a time per
/// chat; `key` is the outbox row's dedupe key (a platform idempotency key where the
/// platform has one).
#[async_trait::async_trait]
pub trait Channel: Send + Sync + 'static {
    /// `telegram` or `feishu`: the outbox and dedupe namespace.
    fn name(&self) -> &'static str;
    fn capabilities(&self) -> Capabilities;
    /// Sends a message; returns the platform's message id.
    async fn send(&self, to: &Address, msg: &OutMessage, key: &str) -> Result<String, SendError>;
    /// Replaces a sent message's content.
    async fn edit(&self, to: &Address, message_id: &str, msg: &OutMessage)
    -> Result<(), SendError>;

    /// Sends a file (`msg.file`, its bytes read from the attachment store) with
    /// `msg.text` as the caption; returns the platform's message id.
    async fn send_file(
        &self,
        to: &Address,
        msg: &OutMessage,
        bytes: Vec<u8>,
        key: &str,
    ) -> Result<String, SendError> {
        let _ = (to, msg, bytes, key);
        Err(SendError::Permanent(format!(
            "{} does not send files yet",
            self.name()
        )))
    }

    /// Downloads a file a person sent (by its [`InFile::source`]), refusing more than
    /// `limit` bytes without reading them all.
    async fn fetch(&self, file: &InFile, limit: u64) -> Result<Vec<u8>, FetchError> {
        let _ = (file, limit);
        Err(FetchError::Unavailable(format!(
            "{} does not fetch files",
            self.name()
        )))
    }
}
