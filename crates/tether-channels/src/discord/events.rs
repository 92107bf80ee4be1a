//! Inbound Discord: dispatches from the Gateway, in order. A `MESSAGE_CREATE` goes through
//! the durable intake (`crate::intake`): recorded by message id with its raw payload (a
//! repeat, such as a resume replaying what was already seen, is dropped before any work)
//! and handled within its channel's lane; the Gateway session (id, resume URL, sequence
//! number) is stored after each recorded message, so a restart resumes right after the
//! last message tether has. Messages recorded but not handled (a crash in between) are
//! handled first at start-up.
//!
//! Conversations: a DM channel is one conversation. In a server channel a message that
//! mentions the bot starts a thread from that message, and the thread is the
//! conversation (every message in it goes to the agent, no mention needed); other
//! channel messages are not for tether. A button press (`INTERACTION_CREATE`) is
//! deduplicated by interaction id and answered through the interaction callback with an
//! ephemeral message saying what happened.

use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::Discord;
use super::gateway::{self, Dispatch, Session};
use super::wire::{Interaction, Message, User};
use crate::channel::SendError;
use crate::core::SharedCore;
use crate::inbound::{InChat, InFile, InKind, Inbound, Sender};
use crate::intake::{Intake, Platform};
use crate::json::parse;
use crate::route;

const SESSION_KEY: &str = "gateway_session";
/// How long a button press may wait for its approval to resolve before the answer
/// (Discord wants the interaction callback within 3 seconds).
pub(crate) const ACTION_WAIT: Duration = Duration::from_millis(2500);
/// Discord's error code: a thread was already started from this message.
const THREAD_EXISTS: &str = "160004";

/// The Gateway and its worker (the interactions route is `interaction_routes`).
pub(crate) fn start(core: SharedCore, dc: Arc<Discord>) -> Vec<tokio::task::JoinHandle<()>> {
    let (tx, rx) = mpsc::unbounded_channel();
    let gw = {
        let (core, dc) = (core.clone(), dc.clone());
        async move {
            let stored = match core
                .store
                .channels()
                .channel_state("discord", SESSION_KEY)
                .await
            {
                Ok(v) => v.and_then(|v| serde_json::from_str::<Session>(&v).ok()),
                Err(e) => {
                    tracing::warn!(channel = "discord", "cannot read the gateway session: {e}");
                    None
                }
            };
            gateway::run(dc, stored, tx).await;
        }
    };
    let platform = Messages {
        core: core.clone(),
        dc: dc.clone(),
    };
    let (intake, lanes) = Intake::start(core, platform);
    vec![
        lanes,
        tokio::spawn(gw),
        tokio::spawn(worker(intake, dc, rx)),
    ]
}

/// A `MESSAGE_CREATE` as it came: parsed, and the raw payload that is recorded.
struct Incoming {
    message: Message,
    raw: String,
}

/// Discord's side of the intake: messages, laned by their channel (a thread is known
/// only once it is started, so a message is normalized when its lane handles it).
struct Messages {
    core: SharedCore,
    dc: Arc<Discord>,
}

#[async_trait::async_trait]
impl Platform for Messages {
    type Delivery = Incoming;
    type Work = Message;
    type Done = ();
    type Answer = ();

    const NOUN: &'static str = "message";
    const AFTER_REPLAY: bool = true;

    fn key(&self, d: &Incoming) -> Option<String> {
        d.message.id.as_deref().map(|id| format!("m:{id}"))
    }

    fn payload(&self, d: &Incoming) -> String {
        d.raw.clone()
    }

    fn read(&self, payload: &str) -> Result<Incoming, String> {
        let message = serde_json::from_str::<Message>(payload).map_err(|e| e.to_string())?;
        Ok(Incoming {
            message,
            raw: payload.to_owned(),
        })
    }

    async fn route(&self, intake: &Intake<Self>, key: String, d: Incoming, _replay: bool) {
        let lane = d.message.channel_id.clone().unwrap_or_default();
        intake.lane(lane, key, d.message);
    }

    async fn handle(&self, m: Message) {
        handle_message(&self.core, &self.dc, m).await;
    }
}

/// First what a crash left unhandled, then the Gateway's dispatches in order.
async fn worker(
    intake: Intake<Messages>,
    dc: Arc<Discord>,
    mut rx: mpsc::UnboundedReceiver<Dispatch>,
) {
    let core = intake.core().clone();
    intake.replay().await;
    while let Some(d) = rx.recv().await {
        match d.kind.as_str() {
            "READY" => store_session(&core, d.session.as_ref()).await,
            "MESSAGE_CREATE" => {
                let Some(message) = parse::<Message>(&d.data) else {
                    continue;
                };
                if message.id.is_none() {
                    continue;
                }
                let raw = d.data.to_string();
                if intake.accept(Incoming { message, raw }).await.is_err() {
                    // Not recorded: the session is not moved past it.
                    continue;
                }
                store_session(&core, d.session.as_ref()).await;
            }
            "INTERACTION_CREATE" => {
                let (core, dc) = (core.clone(), dc.clone());
                let Some(ix) = parse::<Interaction>(&d.data) else {
                    continue;
                };
                tokio::spawn(async move {
                    if let Some(text) = interaction_answer(&core, &ix).await {
                        callback(&dc, &ix, &text).await;
                    }
                });
            }
            _ => {}
        }
    }
}

async fn store_session(core: &SharedCore, session: Option<&Session>) {
    let Some(s) = session else { return };
    let Ok(v) = serde_json::to_string(s) else {
        return;
    };
    if let Err(e) = core
        .store
        .channels()
        .set_channel_state("discord", SESSION_KEY, &v)
        .await
    {
        tracing::warn!(channel = "discord", "cannot store the gateway session: {e}");
    }
}

async fn handle_message(core: &SharedCore, dc: &Discord, m: Message) {
    let key = format!("m:{}", m.id.as_deref().unwrap_or_default());
    match normalize(core, dc, &m, &key).await {
        Ok(Some(msg)) => {
            if let Err(e) = route::handle(core, msg).await {
                tracing::warn!(channel = "discord", key, "message failed: {e}");
            }
        }
        Ok(None) => {}
        Err(e) => tracing::warn!(channel = "discord", key, "message not handled: {e}"),
    }
}

/// Who wrote: the display name if set, else the user name.
fn sender_of(user: &User) -> Option<Sender> {
    let id = user.id.as_deref()?;
    let name = user
        .global_name
        .as_deref()
        .or(user.username.as_deref())
        .unwrap_or(id);
    Some(Sender {
        id: id.to_string(),
        name: name.to_string(),
    })
}

fn files_of(m: &Message) -> Vec<InFile> {
    m.attachments
        .iter()
        .filter_map(|a| {
            Some(InFile {
                name: a.filename.clone()?,
                declared: a.content_type.clone(),
                size: a.size,
                source: a.url.clone()?,
            })
        })
        .collect()
}

/// A thread's name from the message that starts it (Discord allows 100 characters).
fn thread_name(text: &str) -> String {
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("tether");
    let name: String = line.trim().chars().take(90).collect();
    if name.is_empty() {
        "tether".into()
    } else {
        name
    }
}

/// The message as tether sees it, `None` when it is not for tether (a bot's, or a
/// channel message that does not mention the bot).
async fn normalize(
    core: &SharedCore,
    dc: &Discord,
    raw: &Message,
    key: &str,
) -> Result<Option<Inbound>, String> {
    let author = &raw.author;
    let bot = dc.bot_id();
    if author.bot == Some(true) || author.id.as_deref() == bot.as_deref() {
        return Ok(None);
    }
    // Default messages and replies only (not joins, pins, thread notices).
    if !matches!(raw.kind, None | Some(0) | Some(19)) {
        return Ok(None);
    }
    let (Some(sender), Some(channel), Some(message_id)) = (
        sender_of(author),
        raw.channel_id.as_deref(),
        raw.id.as_deref(),
    ) else {
        return Ok(None);
    };
    let mut text = raw.content.clone().unwrap_or_default();
    let mentioned = bot.as_deref().is_some_and(|b| {
        raw.mentions.iter().any(|m| m.id.as_deref() == Some(b))
            || text.contains(&format!("<@{b}>"))
            || text.contains(&format!("<@!{b}>"))
    });
    if let Some(b) = &bot {
        text = text
            .replace(&format!("<@{b}>"), "")
            .replace(&format!("<@!{b}>"), "");
    }
    let text = text.trim().to_string();
    let files = files_of(raw);
    let kind = if files.is_empty() {
        InKind::Text(text.clone())
    } else {
        InKind::Files {
            caption: text.clone(),
            files,
        }
    };
    let chat = |chat_id: &str, is_group: bool, title: String| InChat {
        chat_id: chat_id.to_string(),
        thread_id: None,
        is_group,
        title,
    };
    let msg = |chat: InChat| Inbound {
        key: key.to_string(),
        chat,
        sender: sender.clone(),
        kind: kind.clone(),
    };
    if raw.guild_id.is_none() {
        let title = format!("DM with {}", sender.name);
        return Ok(Some(msg(chat(channel, false, title))));
    }
    // A thread that is already a conversation: everything in it is for the agent.
    let known = core
        .store
        .channels()
        .channel_chat("discord", channel)
        .await
        .map_err(|e| e.to_string())?;
    if known.is_some() {
        return Ok(Some(msg(chat(channel, true, String::new()))));
    }
    if !mentioned {
        return Ok(None);
    }
    // An unknown sender is answered where they wrote (no thread for them).
    if !crate::identity::allowed(core, &sender.id)
        .await
        .map_err(|e| e.to_string())?
    {
        return Ok(Some(msg(chat(channel, true, String::new()))));
    }
    let name = thread_name(&text);
    let thread = start_thread(dc, channel, message_id, &name).await?;
    Ok(Some(msg(chat(&thread, true, format!("thread {name}")))))
}

/// Starts a thread from a message (retrying transient failures); its id. A thread
/// already started from it (a replay after a crash) has the message's id.
async fn start_thread(
    dc: &Discord,
    channel: &str,
    message_id: &str,
    name: &str,
) -> Result<String, String> {
    let path = format!("/channels/{channel}/messages/{message_id}/threads");
    let body = json!({"name": name, "auto_archive_duration": 1440});
    let mut wait = Duration::from_millis(500);
    for _ in 0..6 {
        match dc.rest.call(Method::POST, &path, Some(&body)).await {
            Ok(v) => {
                return v.id.ok_or_else(|| "no thread id in the reply".to_string());
            }
            Err(SendError::Permanent(e)) if e.contains(THREAD_EXISTS) => {
                return Ok(message_id.to_string());
            }
            Err(SendError::Permanent(e)) => return Err(format!("cannot start a thread: {e}")),
            Err(SendError::Retry { after, reason }) => {
                tracing::info!(channel = "discord", "start thread: {reason}");
                tokio::time::sleep(after.unwrap_or(wait).max(wait)).await;
                wait *= 2;
            }
        }
    }
    Err("cannot start a thread: Discord kept failing".to_string())
}

/// What to tell the person who pressed a button (`None`: not a button press, nothing to
/// answer). The same for Gateway and HTTP interactions; a repeat (same interaction id)
/// is not handled again.
pub(crate) async fn interaction_answer(core: &SharedCore, ix: &Interaction) -> Option<String> {
    if ix.kind != Some(3) {
        return None;
    }
    let id = ix.id.as_deref()?;
    match core
        .store
        .channels()
        .remember_inbound("discord", &format!("i:{id}"))
        .await
    {
        Ok(true) => {}
        Ok(false) => return None,
        Err(e) => return Some(format!("⚠️ {e}")),
    }
    let user = ix
        .member
        .as_ref()
        .and_then(|m| m.user.as_ref())
        .or(ix.user.as_ref());
    let (Some(sender), Some(channel)) = (user.and_then(sender_of), ix.channel_id.as_deref()) else {
        return Some("This button is not known.".to_string());
    };
    let Some((approval_id, decision)) = ix
        .data
        .custom_id
        .as_deref()
        .and_then(crate::buttons::parse_callback)
    else {
        return Some("This button is not known.".to_string());
    };
    let msg = Inbound {
        key: format!("i:{id}"),
        chat: InChat {
            chat_id: channel.to_string(),
            thread_id: None,
            is_group: ix.guild_id.is_some(),
            title: String::new(),
        },
        sender,
        kind: InKind::Decide {
            approval_id: approval_id.into(),
            decision,
        },
    };
    let core = core.clone();
    let job = tokio::spawn(async move { route::handle(&core, msg).await });
    Some(match tokio::time::timeout(ACTION_WAIT, job).await {
        Ok(Ok(Ok(Some(text)))) => text,
        Ok(Ok(Err(e))) => format!("⚠️ {e}"),
        _ => "Received.".to_string(),
    })
}

/// The interaction response: an ephemeral message only the presser sees.
pub(crate) fn ephemeral(text: &str) -> Value {
    json!({"type": 4, "data": {"content": super::clip(text), "flags": 64, "allowed_mentions": {"parse": []}}})
}

/// Answers a Gateway interaction through its callback.
async fn callback(dc: &Discord, ix: &Interaction, text: &str) {
    let (Some(id), Some(token)) = (ix.id.as_deref(), ix.token.as_deref()) else {
        return;
    };
    let path = format!("/interactions/{id}/{token}/callback");
    if let Err(e) = dc
        .rest
        .call(Method::POST, &path, Some(&ephemeral(text)))
        .await
    {
        tracing::info!(channel = "discord", "interaction callback failed: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_names_come_from_the_first_line() {
        assert_eq!(thread_name("\n  fix the build  \nmore"), "fix the build");
        assert_eq!(thread_name(""), "tether");
        assert_eq!(thread_name(&"x".repeat(200)).chars().count(), 90);
        let user = parse::<User>(&json!({"id": "1", "username": "al", "global_name": "Alice"}));
        let s = user.as_ref().and_then(sender_of);
        assert_eq!(s.map(|s| s.name), Some("Alice".to_string()));
    }
}
