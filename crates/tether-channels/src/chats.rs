//! A chat's conversation: looked up by its lane's key, created on first contact (titled
//! after the chat and the channel), replaced when it was archived elsewhere; and the
//! stable turn id of an inbound message in it, so a message replayed after a crash never
//! runs twice.

use tether_proto::{ConversationId, CreateConversation, TurnId};
use tether_runtime::Runtime;
use tether_store::ChannelChat;

use crate::ChannelError;
use crate::config::GroupMode;
use crate::core::SharedCore;
use crate::inbound::Inbound;

/// The stable turn id of an inbound message in a conversation: 32 hex characters (the
/// shape of tether's ids) of SHA-256 over channel, conversation and inbound key.
pub(crate) fn turn_id(channel: &str, conversation_id: &ConversationId, key: &str) -> TurnId {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for part in [channel, conversation_id.as_str(), key] {
        h.update(part.as_bytes());
        h.update([0u8]);
    }
    TurnId::from(crate::hex::encode(&h.finalize()[..16]))
}

/// The chat's conversation, created on first contact.
pub(crate) async fn chat_for(
    core: &SharedCore,
    rt: &Runtime,
    msg: &Inbound,
    chat_key: &str,
) -> Result<ChannelChat, ChannelError> {
    match core
        .store
        .channels()
        .channel_chat(core.name(), chat_key)
        .await?
    {
        Some(chat) => Ok(chat),
        None => new_conversation(core, rt, msg, chat_key, None).await,
    }
}

/// A new conversation for the chat, the sender's (`rt` acts for them: a linked
/// person's, or tether's own for the install's owner); a lane a group shares is the
/// team's. `old`: the mapping it replaces.
pub(crate) async fn new_conversation(
    core: &SharedCore,
    rt: &Runtime,
    msg: &Inbound,
    chat_key: &str,
    old: Option<&ChannelChat>,
) -> Result<ChannelChat, ChannelError> {
    let title = match (&msg.chat.is_group, core.group_mode) {
        (true, GroupMode::User) => format!("{} in {}", msg.sender.name, msg.chat.title),
        _ => msg.chat.title.clone(),
    };
    let shared = !own_lane(core, msg);
    let conv = rt
        .create_conversation(CreateConversation {
            title: Some(format!("{}: {title}", label(core.name()))),
            visibility: shared.then_some(tether_proto::Visibility::Team),
            ..Default::default()
        })
        .await?;
    let chat = match old {
        Some(old) => {
            core.forget_chat(&old.conversation_id);
            core.store
                .channels()
                .remap_channel_chat(core.name(), chat_key, &conv.id, 0)
                .await?
        }
        None => {
            let address = serde_json::to_string(&msg.address())?;
            core.store
                .channels()
                .insert_channel_chat(core.name(), chat_key, &conv.id, &address, 0)
                .await?
        }
    };
    core.remember_chat(chat.clone());
    Ok(chat)
}

/// Whether the lane is the sender's own (a direct message, or their lane in a group),
/// not one a group shares.
pub(crate) fn own_lane(core: &SharedCore, msg: &Inbound) -> bool {
    !msg.chat.is_group || core.group_mode == GroupMode::User
}

/// The channel's name as people write it (`Telegram`).
pub(crate) fn label(channel: &str) -> &str {
    match channel {
        "telegram" => "Telegram",
        "feishu" => "Feishu",
        "slack" => "Slack",
        "discord" => "Discord",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
