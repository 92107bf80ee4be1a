//! What Slack delivers, the same over Socket Mode and the Events API, turned into
//! [`Inbound`] messages (pure parsing here; [`super::intake`] dedupes and dispatches):
//!
//! - `event_callback` with a `message` or `app_mention` event. A direct message (`D…`
//!   channel) belongs to the one DM conversation, whatever thread it is in; in a channel a
//!   message belongs to a thread (`thread_ts`, or its own `ts` when it starts one) and
//!   counts only when it mentions the app or continues a thread tether already serves.
//!   Bot messages, edits and other subtypes are ignored; a `file_share` brings files.
//! - `block_actions` from an approval button: a decision on the approval it names.
//! - the `/tether` slash command: `/tether new codex fix it` is `/new codex fix it`.

use tether_proto::ApprovalId;

use super::blocks::ACTION_PREFIX;
use super::wire::{BlockActions, ButtonValue, CommandFields, EventBody};
use crate::buttons::decision_from;
use crate::inbound::{InChat, InKind, Inbound, Sender};

/// A message event, normalized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub event_id: String,
    /// `channel:ts`: the same message delivered as `message` and `app_mention`, or again
    /// after a reconnect, has one key.
    pub message_key: String,
    /// It mentions the app (or is a DM): it may start a conversation.
    pub addressed: bool,
    pub inbound: Inbound,
}

/// A button press on an approval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Press {
    pub key: String,
    pub inbound: Inbound,
}

/// The `/tether` slash command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlashCommand {
    pub key: String,
    pub channel: String,
    pub user: String,
    /// The command as a chat command (`/new …`).
    pub text: String,
}

/// Whether a channel id is a direct message with the app.
pub fn is_dm(channel: &str) -> bool {
    channel.starts_with('D')
}

/// Slack escapes `&`, `<` and `>` in what people type; the agent gets them back.
pub fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

fn chat(channel: &str, thread: Option<&str>, user: &str) -> InChat {
    let dm = is_dm(channel);
    InChat {
        chat_id: channel.to_string(),
        thread_id: if dm { None } else { thread.map(str::to_string) },
        is_group: !dm,
        title: if dm {
            format!("DM with {user}")
        } else {
            format!("thread in {channel}")
        },
    }
}

fn sender(user: &str) -> Sender {
    Sender {
        id: user.to_string(),
        name: user.to_string(),
    }
}

/// Slack's client takes a message that starts with `/` for a slash command, and app
/// slash commands cannot run in threads: there a command is typed with `!` instead
/// (`!new`, `!detach`, `!stop`, …), or after a mention (`@tether /new`). Only tether's
/// command words count (`!important` reaches the agent as typed); `!!new` sends `!new`.
pub fn bang_command(text: String) -> String {
    let word = |t: &str| {
        t.split(char::is_whitespace)
            .next()
            .is_some_and(tether_core::command::is_command_word)
    };
    if let Some(rest) = text.strip_prefix("!!")
        && word(rest)
    {
        return format!("!{rest}");
    }
    match text.strip_prefix('!') {
        Some(rest) if word(rest) => format!("/{rest}"),
        _ => text,
    }
}

/// An `event_callback` body → a message worth handling, if it is one. `bot_user`: the
/// app's own user id (mentions of it are removed from the text).
pub fn message(body: &EventBody, bot_user: Option<&str>) -> Option<Message> {
    if body.kind.as_deref() != Some("event_callback") {
        return None;
    }
    let event_id = body.event_id.as_deref()?;
    let ev = &body.event;
    let kind = ev.kind.as_deref()?;
    if !matches!(kind, "message" | "app_mention") {
        return None;
    }
    // Edits, joins, bot messages (tether's own included): not a person talking. A
    // message with files is `file_share`.
    let subtype = ev.subtype.as_deref();
    if subtype.is_some_and(|s| s != "file_share") || ev.bot_id.is_some() {
        return None;
    }
    let user = ev.user.as_deref()?;
    if bot_user == Some(user) {
        return None;
    }
    let channel = ev.channel.as_deref()?;
    let ts = ev.ts.as_deref()?;
    let raw = ev.text.as_deref().unwrap_or_default();
    let mention = bot_user.map(|u| format!("<@{u}>"));
    let mentioned = kind == "app_mention" || mention.as_deref().is_some_and(|m| raw.contains(m));
    let mut text = raw.to_string();
    if let Some(m) = &mention {
        text = text.replace(m.as_str(), "");
    }
    let thread = ev.thread_ts.as_deref().unwrap_or(ts);
    Some(Message {
        event_id: event_id.to_string(),
        message_key: format!("{channel}:{ts}"),
        addressed: mentioned || is_dm(channel),
        inbound: Inbound {
            key: format!("{channel}:{ts}"),
            chat: chat(channel, Some(thread), user),
            sender: sender(user),
            kind: match super::files::in_files(&ev.files) {
                files if files.is_empty() => InKind::Text(bang_command(unescape(text.trim()))),
                files => InKind::Files {
                    caption: unescape(text.trim()),
                    files,
                },
            },
        },
    })
}

/// A `block_actions` payload → a decision, if the button is one of tether's.
pub fn press(payload: &BlockActions) -> Option<Press> {
    if payload.kind.as_deref() != Some("block_actions") {
        return None;
    }
    let user = payload.user.id.as_deref()?;
    let channel = payload
        .channel
        .id
        .as_deref()
        .or(payload.container.channel_id.as_deref())?;
    let action = payload.actions.iter().find(|a| {
        a.action_id
            .as_deref()
            .is_some_and(|id| id.starts_with(ACTION_PREFIX))
    })?;
    let value: ButtonValue = serde_json::from_str(action.value.as_deref()?).ok()?;
    let approval_id = ApprovalId::from(value.approval_id.as_deref()?);
    let decision = decision_from(value.decision.as_deref()?)?;
    let thread = payload
        .message
        .thread_ts
        .as_deref()
        .or(payload.container.thread_ts.as_deref());
    let key = payload.trigger_id.clone().or_else(|| {
        let at = action.action_ts.as_deref()?;
        Some(format!("{channel}:{user}:{at}"))
    })?;
    Some(Press {
        key: format!("action:{key}"),
        inbound: Inbound {
            key: format!("action:{key}"),
            chat: chat(channel, thread, user),
            sender: sender(user),
            kind: InKind::Decide {
                approval_id,
                decision,
            },
        },
    })
}

/// A slash command's fields → the command it stands for.
pub fn slash_command(fields: &CommandFields) -> Option<SlashCommand> {
    let channel = fields.channel_id.as_deref()?;
    let user = fields.user_id.as_deref()?;
    let trigger = fields.trigger_id.as_deref()?;
    let words = fields.text.as_deref().unwrap_or_default().trim();
    let text = match words {
        "" => "/help".to_string(),
        w if w.starts_with('/') => w.to_string(),
        w => format!("/{w}"),
    };
    Some(SlashCommand {
        key: format!("command:{trigger}"),
        channel: channel.to_string(),
        user: user.to_string(),
        text,
    })
}

/// The inbound message a slash command becomes, in the thread `thread` of a channel
/// (or the DM).
pub fn command_inbound(cmd: &SlashCommand, thread: Option<&str>) -> Inbound {
    Inbound {
        key: cmd.key.clone(),
        chat: chat(&cmd.channel, thread, &cmd.user),
        sender: sender(&cmd.user),
        kind: InKind::Text(cmd.text.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::parse;
    use serde_json::{Value, json};

    fn event(ev: Value) -> EventBody {
        parse(&json!({"type": "event_callback", "event_id": "Ev1", "event": ev}))
            .unwrap_or_else(|| panic!("an event body"))
    }

    fn fields<T: serde::de::DeserializeOwned>(v: Value) -> T {
        parse(&v).unwrap_or_else(|| panic!("a payload"))
    }

    #[test]
    fn bang_commands_are_commands_and_other_bangs_are_text() {
        assert_eq!(bang_command("!new".into()), "/new");
        assert_eq!(
            bang_command("!new fix the build".into()),
            "/new fix the build"
        );
        assert_eq!(bang_command("!MODEL o3".into()), "/MODEL o3");
        assert_eq!(bang_command("!detach".into()), "/detach");
        assert_eq!(
            bang_command("!important: read this".into()),
            "!important: read this"
        );
        assert_eq!(bang_command("!!new".into()), "!new");
        assert_eq!(bang_command("!!wow".into()), "!!wow");
        assert_eq!(bang_command("hello !new".into()), "hello !new");
    }

    #[test]
    fn dms_are_one_conversation_and_channel_threads_are_their_own() {
        let dm = message(
            &event(json!({"type": "message", "channel": "D1", "user": "U1", "text": "a &lt; b", "ts": "1.1", "thread_ts": "0.5", "channel_type": "im"})),
            Some("UBOT"),
        )
        .unwrap_or_else(|| panic!("a DM"));
        assert!(dm.addressed);
        assert_eq!(dm.inbound.chat.thread_id, None);
        assert_eq!(dm.inbound.kind, InKind::Text("a < b".into()));

        let mention = message(
            &event(json!({"type": "app_mention", "channel": "C1", "user": "U1", "text": "<@UBOT> fix it", "ts": "2.2"})),
            Some("UBOT"),
        )
        .unwrap_or_else(|| panic!("a mention"));
        assert!(mention.addressed);
        assert_eq!(mention.inbound.chat.thread_id.as_deref(), Some("2.2"));
        assert_eq!(mention.inbound.kind, InKind::Text("fix it".into()));

        let reply = message(
            &event(json!({"type": "message", "channel": "C1", "user": "U2", "text": "more", "ts": "3.3", "thread_ts": "2.2"})),
            Some("UBOT"),
        )
        .unwrap_or_else(|| panic!("a thread reply"));
        assert!(
            !reply.addressed,
            "continues a thread only if tether serves it"
        );
        assert_eq!(reply.inbound.chat_key(crate::GroupMode::Chat), "C1/t2.2");

        let bot = event(
            json!({"type": "message", "channel": "C1", "bot_id": "B1", "user": "UBOT", "text": "x", "ts": "4.4"}),
        );
        assert!(message(&bot, Some("UBOT")).is_none());
        let edit = event(
            json!({"type": "message", "subtype": "message_changed", "channel": "C1", "ts": "5.5"}),
        );
        assert!(message(&edit, Some("UBOT")).is_none());
    }

    #[test]
    fn buttons_and_the_slash_command_are_understood() {
        let p = press(&fields(json!({
            "type": "block_actions", "user": {"id": "U1"}, "channel": {"id": "C1"},
            "trigger_id": "T1", "message": {"ts": "9.9", "thread_ts": "2.2"},
            "actions": [{"action_id": "tether_decide_deny", "value": "{\"approval_id\":\"a1\",\"decision\":\"deny\"}"}]
        })))
        .unwrap_or_else(|| panic!("a press"));
        assert_eq!(p.inbound.chat.thread_id.as_deref(), Some("2.2"));
        assert_eq!(
            p.inbound.kind,
            InKind::Decide {
                approval_id: "a1".into(),
                decision: tether_proto::Decision::Deny
            }
        );
        let c = slash_command(&fields(json!({"channel_id": "D1", "user_id": "U1", "trigger_id": "T2", "text": " new codex hi "})))
            .unwrap_or_else(|| panic!("a command"));
        assert_eq!(c.text, "/new codex hi");
        let c = slash_command(&fields(
            json!({"channel_id": "D1", "user_id": "U1", "trigger_id": "T3", "text": ""}),
        ))
        .unwrap_or_else(|| panic!("a command"));
        assert_eq!(c.text, "/help");
    }
}
