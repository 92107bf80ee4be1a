//! Inbound messages, normalized by the adapters, handed to the same router as the web
//! API: access check (config allowlist, then pairing), chat → conversation (created on
//! first contact), then `send_message` or an approval answer. Unknown senders get a
//! pairing code (while fewer than [`pairing::MAX_PENDING`] wait) and cause no
//! conversation, no agent work and, once their lane is idle, no task. A prompt's turn id
//! is derived from the inbound key, so a message replayed after a crash never runs twice.

use tether_core::short_id;
use tether_proto::{
    ApprovalId, ApprovalStatus, ConversationId, CreateConversation, Decision, MessageOutcome,
    MessageOutcomeKind, SendMessage, TurnId,
};
use tether_runtime::RuntimeError;
use tether_store::ChannelChat;

use crate::ChannelError;
use crate::channel::{Address, OutMessage};
use crate::config::GroupMode;
use crate::core::SharedCore;
use crate::pairing;

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

/// Handles one inbound message. Returns the short answer to a button press (shown by
/// the adapter as a toast / callback answer); replies to texts go through the outbox.
pub(crate) async fn handle(
    core: &SharedCore,
    msg: Inbound,
) -> Result<Option<String>, ChannelError> {
    // While the database is unreachable the message waits (its chat's lane with it, so
    // the chat keeps its order) and is handed over once the store answers again: the
    // runtime keys it by the platform's id, so a try that got through is not run twice
    // (issue 25).
    let mut wait = std::time::Duration::from_millis(250);
    loop {
        match handle_once(core, msg.clone()).await {
            Err(e) if e.code() == tether_proto::ErrorCode::StoreUnavailable => {
                tracing::debug!(
                    channel = core.name(),
                    key = msg.key,
                    "the store is unreachable; the message waits: {e}"
                );
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(std::time::Duration::from_secs(5));
            }
            other => return other,
        }
    }
}

async fn handle_once(core: &SharedCore, msg: Inbound) -> Result<Option<String>, ChannelError> {
    let allowed = allowed(core, &msg.sender.id).await?;
    let chat_key = msg.chat_key(core.group_mode);
    if !allowed {
        tracing::info!(
            channel = core.name(),
            user = msg.sender.id,
            "message from an unknown sender"
        );
        return match msg.kind {
            InKind::Decide { .. } => Ok(Some("You are not allowed to answer here.".to_string())),
            InKind::Text(_) | InKind::Files { .. } => {
                // Over the cap of pending codes: no row and no reply.
                let Some(p) = pairing::code_for(core, &msg, &chat_key).await? else {
                    return Ok(None);
                };
                let text = format!(
                    "🔒 This tether does not know you yet. Your pairing code is {}.\n\
                     Ask the operator to run: tether pair approve {}",
                    pairing::display(&p.code),
                    p.code
                );
                let key = format!("in:{}:pairing", msg.key);
                core.reply(&chat_key, &msg.address(), key, OutMessage::plain(text))
                    .await?;
                Ok(None)
            }
        };
    }
    let by = format!("{}:{}", core.name(), msg.sender.name);
    match &msg.kind {
        InKind::Decide {
            approval_id,
            decision,
        } => decide(core, &msg, approval_id, *decision, &by)
            .await
            .map(Some),
        InKind::Files { caption, files } => {
            let mut chat = chat_for(core, &msg, &chat_key).await?;
            let Some(req) =
                crate::inbound_files::message(core, &msg, &chat_key, &mut chat, caption, files)
                    .await?
            else {
                return Ok(None);
            };
            send(core, &msg, &chat_key, chat, req, &by).await
        }
        InKind::Text(text) => {
            let req = SendMessage {
                text: text.clone(),
                ..SendMessage::default()
            };
            let chat = chat_for(core, &msg, &chat_key).await?;
            send(core, &msg, &chat_key, chat, req, &by).await
        }
    }
}

/// The sender may talk to the agents here: allowed by the config file or by pairing.
pub(crate) async fn allowed(core: &SharedCore, user_id: &str) -> Result<bool, ChannelError> {
    Ok(core.allowed_users.contains(user_id)
        || core
            .store
            .channel_user_allowed(core.name(), user_id)
            .await?)
}

/// Routes a person's message (once: its turn id comes from the inbound key) and tells
/// them right away what happened to it.
async fn send(
    core: &SharedCore,
    msg: &Inbound,
    chat_key: &str,
    chat: ChannelChat,
    req: SendMessage,
    by: &str,
) -> Result<Option<String>, ChannelError> {
    let mut sent = core
        .runtime
        .send_message_once(
            &chat.conversation_id,
            req.clone(),
            by,
            &turn_id(core.name(), &chat.conversation_id, &msg.key),
        )
        .await;
    if matches!(sent, Err(RuntimeError::Archived(_))) && req.attachments.is_empty() {
        // Archived elsewhere (web page): this chat goes on in a new conversation.
        // (Not with attachments: they belong to the archived one, and are gone.)
        let chat = new_conversation(core, msg, chat_key, Some(&chat)).await?;
        sent = core
            .runtime
            .send_message_once(
                &chat.conversation_id,
                req,
                by,
                &turn_id(core.name(), &chat.conversation_id, &msg.key),
            )
            .await;
    }
    let files = sent
        .as_ref()
        .map(|o| o.attachments.clone())
        .unwrap_or_default();
    let reply = match sent {
        Ok(out) => outcome_reply(&out),
        // The store is away: the message waits for it (see `handle`) rather than being
        // answered with an error and lost.
        Err(e) if e.code() == tether_proto::ErrorCode::StoreUnavailable => {
            return Err(ChannelError::Runtime(e));
        }
        Err(e) => Some(format!("⚠️ {e}")),
    };
    if let Some(text) = reply {
        let key = format!("in:{}:reply", msg.key);
        core.reply(chat_key, &msg.address(), key, OutMessage::plain(text))
            .await?;
    }
    // `/file`: each file as the platform's own file (or image) message.
    for (i, a) in files.into_iter().enumerate() {
        let mut out = OutMessage::plain(a.name.clone());
        out.file = Some(crate::channel::OutFile {
            attachment_id: a.id.clone(),
            name: a.name,
            image: a.kind == tether_proto::AttachmentKind::Image,
        });
        let key = format!("in:{}:file:{i}", msg.key);
        core.reply(chat_key, &msg.address(), key, out).await?;
    }
    Ok(None)
}

/// The stable turn id of an inbound message in a conversation: 32 hex characters (the
/// shape of tether's ids) of SHA-256 over channel, conversation and inbound key.
pub fn turn_id(channel: &str, conversation_id: &ConversationId, key: &str) -> TurnId {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for part in [channel, conversation_id.as_str(), key] {
        h.update(part.as_bytes());
        h.update([0u8]);
    }
    TurnId::from(crate::feishu::crypto::hex(&h.finalize()[..16]))
}

/// What the person is told about a message right away (the rest follows from events).
fn outcome_reply(out: &MessageOutcome) -> Option<String> {
    match out.outcome {
        // The status message and any new-session notice come from the events.
        MessageOutcomeKind::Started => None,
        MessageOutcomeKind::Queued => Some(format!(
            "📥 Queued behind the running turn (position {}).",
            out.queue_position.unwrap_or(1)
        )),
        MessageOutcomeKind::Answered | MessageOutcomeKind::Command => out.reply.clone(),
    }
}

/// The chat's conversation, created on first contact.
async fn chat_for(
    core: &SharedCore,
    msg: &Inbound,
    chat_key: &str,
) -> Result<ChannelChat, ChannelError> {
    match core.store.channel_chat(core.name(), chat_key).await? {
        Some(chat) => Ok(chat),
        None => new_conversation(core, msg, chat_key, None).await,
    }
}

/// A new conversation for the chat; `old`: the mapping it replaces.
pub(crate) async fn new_conversation(
    core: &SharedCore,
    msg: &Inbound,
    chat_key: &str,
    old: Option<&ChannelChat>,
) -> Result<ChannelChat, ChannelError> {
    let title = match (&msg.chat.is_group, core.group_mode) {
        (true, GroupMode::User) => format!("{} in {}", msg.sender.name, msg.chat.title),
        _ => msg.chat.title.clone(),
    };
    let conv = core
        .runtime
        .create_conversation(CreateConversation {
            title: Some(format!("{}: {title}", label(core.name()))),
            ..Default::default()
        })
        .await?;
    let chat = match old {
        Some(old) => {
            core.forget_chat(&old.conversation_id);
            core.store
                .remap_channel_chat(core.name(), chat_key, &conv.id)
                .await?
        }
        None => {
            let address = serde_json::to_string(&msg.address())?;
            core.store
                .insert_channel_chat(core.name(), chat_key, &conv.id, &address, 0)
                .await?
        }
    };
    core.remember_chat(chat.clone());
    Ok(chat)
}

fn label(channel: &str) -> &str {
    match channel {
        "telegram" => "Telegram",
        "feishu" => "Feishu",
        "slack" => "Slack",
        "discord" => "Discord",
        other => other,
    }
}

/// A button press: resolves exactly the approval it names, if it was asked in this chat.
async fn decide(
    core: &SharedCore,
    msg: &Inbound,
    approval_id: &ApprovalId,
    decision: Decision,
    by: &str,
) -> Result<String, ChannelError> {
    let Some(approval) = core.store.get_approval(approval_id).await? else {
        return Ok("This approval is unknown here.".to_string());
    };
    // The approval's conversation must be the one this message's lane maps to: the
    // same chat, and with `group_mode = "user"` the same member (issue 24 S4).
    let chat = core.chat_of(&approval.conversation_id);
    let here = chat
        .as_ref()
        .and_then(|c| serde_json::from_str::<Address>(&c.address).ok())
        .is_some_and(|a| a == msg.address());
    if !here {
        return Ok("This approval belongs to another chat.".to_string());
    }
    if chat.is_some_and(|c| c.chat_key != msg.chat_key(core.group_mode)) {
        return Ok("This approval belongs to another member's conversation.".to_string());
    }
    match core
        .runtime
        .answer_approval(approval_id, decision, by)
        .await
    {
        Ok(a) => Ok(format!(
            "{} {}",
            match a.status {
                ApprovalStatus::AllowedAlways => "Always allowed:",
                ApprovalStatus::Denied => "Denied:",
                _ => "Allowed:",
            },
            a.title
        )),
        Err(RuntimeError::Resolve(_)) => {
            let now = core.store.get_approval(approval_id).await?;
            let status = now.map_or(approval.status, |a| a.status);
            Ok(format!(
                "Approval {} is no longer pending ({}).",
                short_id(approval_id),
                status.as_str()
            ))
        }
        Err(e) => Err(e.into()),
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
    fn turn_ids_are_stable_and_distinct_per_message_and_conversation() {
        let (c1, c2) = (ConversationId::from("c1"), ConversationId::from("c2"));
        let a = turn_id("telegram", &c1, "7");
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(a, turn_id("telegram", &c1, "7"));
        assert_ne!(a, turn_id("telegram", &c1, "8"));
        assert_ne!(a, turn_id("telegram", &c2, "7"));
        assert_ne!(a, turn_id("feishu", &c1, "7"));
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
