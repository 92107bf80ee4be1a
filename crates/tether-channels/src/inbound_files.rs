//! Files a person sent on a channel (Telegram photos and documents): fetched from the
//! platform within the size limit, stored as the conversation's attachments, and sent
//! with the caption as one message. A file that cannot be fetched or stored is refused
//! with its stable code in a reply; the caption and the other files still go.

use tether_proto::{AttachmentId, SendMessage};
use tether_runtime::{AttachmentName, NewAttachment, RuntimeError};
use tether_store::ChannelChat;

use crate::ChannelError;
use crate::channel::{FetchError, OutMessage};
use crate::chats::{new_conversation, turn_id};
use crate::core::SharedCore;
use crate::inbound::{InFile, Inbound};

/// The message to route for `files` with `caption`; `None` when nothing is left to
/// send. `chat` is replaced when its conversation was archived meanwhile.
pub(crate) async fn message(
    core: &SharedCore,
    rt: &tether_runtime::Runtime,
    msg: &Inbound,
    chat_key: &str,
    chat: &mut ChannelChat,
    caption: &str,
    files: &[InFile],
) -> Result<Option<SendMessage>, ChannelError> {
    let turn = turn_id(core.name(), &chat.conversation_id, &msg.key);
    if core.store.conversations().get_turn(&turn).await?.is_some() {
        // A replay of a message that was routed already: nothing is fetched again.
        return Ok(Some(SendMessage {
            text: caption.to_owned(),
            ..SendMessage::default()
        }));
    }
    let limit = core.runtime.attachment_limits().max_file_bytes;
    let mut ids: Vec<AttachmentId> = Vec::new();
    let mut problems = Vec::new();
    for f in files {
        match store_one(core, rt, msg, chat_key, chat, f, limit).await {
            Ok(id) => ids.push(id),
            Err(problem) => problems.push(problem),
        }
    }
    if !problems.is_empty() {
        let text = format!("⚠️ {}", problems.join("\n⚠️ "));
        let key = format!("in:{}:files", msg.key);
        core.reply(chat_key, &msg.address(), key, OutMessage::plain(text))
            .await?;
    }
    if ids.is_empty() && caption.trim().is_empty() {
        return Ok(None);
    }
    Ok(Some(SendMessage {
        text: caption.to_owned(),
        attachments: ids,
        ..SendMessage::default()
    }))
}

/// Fetches and stores one file; the reason (with its stable code) when it cannot.
async fn store_one(
    core: &SharedCore,
    rt: &tether_runtime::Runtime,
    msg: &Inbound,
    chat_key: &str,
    chat: &mut ChannelChat,
    f: &InFile,
    limit: u64,
) -> Result<AttachmentId, String> {
    let refused =
        |code: tether_proto::ErrorCode, why: String| format!("{} ({code}): {why}", f.name);
    if let Some(size) = f.size.filter(|s| *s > limit) {
        let e = FetchError::TooLarge { size, limit };
        return Err(refused(
            tether_proto::ErrorCode::AttachmentTooLarge,
            e.to_string(),
        ));
    }
    let bytes = core.channel.fetch(f, limit).await.map_err(|e| {
        let code = match e {
            FetchError::TooLarge { .. } => tether_proto::ErrorCode::AttachmentTooLarge,
            FetchError::Unavailable(_) => tether_proto::ErrorCode::AttachmentUnavailable,
        };
        refused(code, format!("cannot be fetched: {e}"))
    })?;
    let new = [NewAttachment {
        name: AttachmentName::Platform(&f.name),
        declared: f.declared.as_deref(),
        bytes: &bytes,
    }];
    let mut stored = rt.add_attachments(&chat.conversation_id, &new).await;
    if matches!(stored, Err(RuntimeError::Archived(_))) {
        // Archived elsewhere (web page): this chat goes on in a new conversation.
        *chat = new_conversation(core, rt, msg, chat_key, Some(&*chat))
            .await
            .map_err(|e| e.to_string())?;
        stored = rt.add_attachments(&chat.conversation_id, &new).await;
    }
    match stored {
        Ok(mut rows) if !rows.is_empty() => Ok(rows.remove(0).id),
        Ok(_) => Err(refused(
            tether_proto::ErrorCode::Internal,
            "not stored".to_owned(),
        )),
        Err(e) => Err(refused(e.code(), e.to_string())),
    }
}
