//! What happens to a normalized inbound message, handed to the same router as the web
//! API: access check (config allowlist, then pairing), chat → conversation (created on
//! first contact, see `chats`), then `send_message` or an approval answer. Unknown
//! senders get a pairing code (while fewer than [`pairing::MAX_PENDING`] wait) and cause
//! no conversation, no agent work and, once their lane is idle, no task. A prompt's turn
//! id is derived from the inbound key, so a message replayed after a crash never runs
//! twice.

use tether_core::short_id;
use tether_proto::{
    ApprovalId, ApprovalStatus, Decision, ErrorCode, MessageOutcome, MessageOutcomeKind,
    SendMessage,
};
use tether_runtime::{Runtime, RuntimeError};
use tether_store::ChannelChat;

use crate::ChannelError;
use crate::channel::{Address, OutMessage};
use crate::chats::{chat_for, new_conversation, turn_id};
use crate::core::SharedCore;
use crate::identity::{self, Who};
use crate::inbound::{InKind, Inbound};
use crate::pairing;

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
    use tracing::Instrument as _;
    crate::metrics::message_in(core.name());
    // The root of the message's trace (issue 31): the routing, the owner's work and the
    // turn are its children.
    let span = tracing::info_span!(
        "channel.inbound",
        otel.name = "channel inbound",
        channel = core.name()
    );
    let mut wait = std::time::Duration::from_millis(250);
    loop {
        match handle_once(core, msg.clone())
            .instrument(span.clone())
            .await
        {
            Err(e) if waits(e.code()) => {
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

/// Whether a message refused with `code` waits and is tried again (the store away, or
/// a draining node with nobody to take it: the message is kept and handled after).
fn waits(code: tether_proto::ErrorCode) -> bool {
    matches!(
        code,
        tether_proto::ErrorCode::StoreUnavailable | tether_proto::ErrorCode::Draining
    )
}

async fn handle_once(core: &SharedCore, msg: Inbound) -> Result<Option<String>, ChannelError> {
    let who = identity::of(core, &msg).await?;
    let chat_key = msg.chat_key(core.group_mode);
    if let InKind::Text(text) = &msg.kind
        && let Some(answer) = identity::command(core, &msg, &chat_key, &who, text).await?
    {
        let key = format!("in:{}:reply", msg.key);
        core.reply(&chat_key, &msg.address(), key, OutMessage::plain(answer))
            .await?;
        return Ok(None);
    }
    if matches!(who, Who::Disabled) {
        return Ok(match msg.kind {
            InKind::Decide { .. } => Some("You are not allowed to answer here.".to_string()),
            InKind::Text(_) | InKind::Files { .. } => None,
        });
    }
    if matches!(who, Who::Stranger) {
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
                    "🔒 This tether does not know you yet. On its team? Make a link code \
                     on the tether page and send /link <code> here.\n\
                     Else your pairing code is {}. Ask the operator to run: tether pair \
                     approve {}",
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
    let (rt, by) = who.acting(core, &msg);
    let to = To { rt: &rt, by: &by };
    let done = act(core, &msg, &chat_key, &who, &to).await;
    match done {
        // A linked person's role or the conversation's owner says no (a viewer writing):
        // they are told, and nothing else happens.
        Err(ChannelError::Runtime(e))
            if matches!(e.code(), ErrorCode::Forbidden | ErrorCode::NotFound) =>
        {
            let key = format!("in:{}:refused", msg.key);
            let text = format!("⚠️ {e}");
            core.reply(&chat_key, &msg.address(), key, OutMessage::plain(text))
                .await?;
            Ok(None)
        }
        other => other,
    }
}

/// The message of an allowed sender: a button press, files or a text.
async fn act(
    core: &SharedCore,
    msg: &Inbound,
    chat_key: &str,
    who: &Who,
    to: &To<'_>,
) -> Result<Option<String>, ChannelError> {
    let rt = to.rt;
    match &msg.kind {
        InKind::Decide {
            approval_id,
            decision,
        } => decide(core, msg, approval_id, *decision, to)
            .await
            .map(Some),
        InKind::Files { caption, files } => {
            let mut chat = chat_for(core, rt, msg, chat_key).await?;
            identity::claim(core, msg, who, &chat.conversation_id).await?;
            let Some(req) =
                crate::inbound_files::message(core, rt, msg, chat_key, &mut chat, caption, files)
                    .await?
            else {
                return Ok(None);
            };
            send(core, msg, chat_key, chat, req, to).await
        }
        InKind::Text(text) => {
            let req = SendMessage {
                text: text.clone(),
                ..SendMessage::default()
            };
            let chat = chat_for(core, rt, msg, chat_key).await?;
            identity::claim(core, msg, who, &chat.conversation_id).await?;
            send(core, msg, chat_key, chat, req, to).await
        }
    }
}

/// Who a message acts as: the runtime to call (a linked person's, or tether's own for
/// an admitted account) and the name history records.
struct To<'a> {
    rt: &'a Runtime,
    by: &'a str,
}

/// Routes a person's message (once: its turn id comes from the inbound key) and tells
/// them right away what happened to it.
async fn send(
    core: &SharedCore,
    msg: &Inbound,
    chat_key: &str,
    chat: ChannelChat,
    req: SendMessage,
    to: &To<'_>,
) -> Result<Option<String>, ChannelError> {
    // Replies go to the chat the latest message came from (issue 28).
    core.store
        .channels()
        .reply_here(core.name(), chat_key, &chat.conversation_id)
        .await?;
    let mut sent = to
        .rt
        .send_message_once(
            &chat.conversation_id,
            req.clone(),
            to.by,
            &turn_id(core.name(), &chat.conversation_id, &msg.key),
        )
        .await;
    if matches!(sent, Err(RuntimeError::Archived(_))) && req.attachments.is_empty() {
        // Archived elsewhere (web page): this chat goes on in a new conversation.
        // (Not with attachments: they belong to the archived one, and are gone.)
        let chat = new_conversation(core, to.rt, msg, chat_key, Some(&chat)).await?;
        sent = to
            .rt
            .send_message_once(
                &chat.conversation_id,
                req,
                to.by,
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
        Err(e) if waits(e.code()) => {
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

/// A button press: resolves exactly the approval it names, if it was asked in this chat.
async fn decide(
    core: &SharedCore,
    msg: &Inbound,
    approval_id: &ApprovalId,
    decision: Decision,
    to: &To<'_>,
) -> Result<String, ChannelError> {
    let Some(approval) = core.store.requests().get_approval(approval_id).await? else {
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
    match to.rt.answer_approval(approval_id, decision, to.by).await {
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
            let now = core.store.requests().get_approval(approval_id).await?;
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
