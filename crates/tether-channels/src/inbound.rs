//! Inbound messages as the adapters normalize them, whatever the platform: the chat
//! ([`InChat`]), the sender, what was sent ([`InKind`]: a text, a button press, files),
//! and the lane the message runs in ([`Inbound::chat_key`]). What happens to one is
//! `route`'s; how a platform's deliveries become them is `intake`'s and the platform's.

use tether_proto::{ApprovalId, Decision};

use crate::channel::Address;
pub use crate::channel::InFile;
use crate::config::GroupMode;

/// The chat a message came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InChat {
    pub chat_id: String,
    /// Forum topic (Telegram) the message belongs to.
    pub thread_id: Option<String>,
    pub is_group: bool,
    pub title: String,
}

/// Who sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sender {
    /// The platform's stable user id (Telegram user id, Feishu open_id).
    pub id: String,
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InKind {
    /// A text message (commands included), mentions already removed.
    Text(String),
    /// A button press on an approval.
    Decide {
        approval_id: ApprovalId,
        decision: Decision,
    },
    /// Files (photos, documents) with their caption as the text (possibly empty).
    Files { caption: String, files: Vec<InFile> },
}

/// One normalized inbound message. `key` is the platform's unique update id (already
/// deduplicated by the adapter).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inbound {
    pub key: String,
    pub chat: InChat,
    pub sender: Sender,
    pub kind: InKind,
}

impl Inbound {
    /// The conversation lane: chat, forum topic, or user within a group.
    pub fn chat_key(&self, mode: GroupMode) -> String {
        let mut key = self.chat.chat_id.clone();
        if let Some(t) = &self.chat.thread_id {
            key.push_str("/t");
            key.push_str(t);
        }
        if self.chat.is_group && mode == GroupMode::User {
            key.push_str("/u");
            key.push_str(&self.sender.id);
        }
        key
    }

    pub fn address(&self) -> Address {
        Address {
            chat_id: self.chat.chat_id.clone(),
            thread_id: self.chat.thread_id.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(chat: &str, thread: Option<&str>, group: bool, user: &str) -> Inbound {
        Inbound {
            key: "1".into(),
            chat: InChat {
                chat_id: chat.into(),
                thread_id: thread.map(str::to_string),
                is_group: group,
                title: "t".into(),
            },
            sender: Sender {
                id: user.into(),
                name: user.into(),
            },
            kind: InKind::Text("hi".into()),
        }
    }

    #[test]
    fn chats_topics_and_group_members_get_their_own_lanes() {
        assert_eq!(msg("5", None, false, "5").chat_key(GroupMode::User), "5");
        assert_eq!(msg("-9", None, true, "5").chat_key(GroupMode::Chat), "-9");
        assert_eq!(
            msg("-9", None, true, "5").chat_key(GroupMode::User),
            "-9/u5"
        );
        assert_eq!(
            msg("-9", Some("3"), true, "5").chat_key(GroupMode::Chat),
            "-9/t3"
        );
        assert_eq!(
            msg("-9", Some("3"), true, "5").chat_key(GroupMode::User),
            "-9/t3/u5"
        );
    }
}
