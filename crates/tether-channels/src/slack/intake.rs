//! Slack's side of the durable intake (`crate::intake`), for deliveries from either
//! transport: each is recorded (dedupe key and the raw delivery, in one transaction)
//! before the transport acknowledges it, handled after, and marked handled once the
//! runtime has it; unhandled ones (a crash in between) are replayed at start-up. Messages
//! run in per-conversation lanes (arrival order within a thread or DM); a message in a
//! channel counts when it mentions the app or continues a thread tether serves, and is
//! deduplicated by `channel:ts` there (Slack sends a mention both as `message` and as
//! `app_mention`). A button press is handled at once and answered with an ephemeral
//! message; the approval's own message is updated from its `approval_resolved` event. The
//! slash command in a channel first posts the message that anchors its new thread.

use std::sync::Arc;

use serde_json::{Value, json};

use super::Slack;
use super::events::{self, Message, Press, SlashCommand};
use crate::ChannelError;
use crate::core::SharedCore;
use crate::inbound::Inbound;
use crate::intake::{Intake, Platform};
use crate::json::parse;
use crate::route;

/// Slack's intake.
pub(crate) type SlackIntake = Intake<Deliveries>;

/// What a transport delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// An Events API body (`event_callback`).
    Event,
    /// An interactivity payload (`block_actions`).
    Interactive,
    /// A slash command's fields.
    Command,
}

impl Delivery {
    fn name(self) -> &'static str {
        match self {
            Delivery::Event => "event",
            Delivery::Interactive => "interactive",
            Delivery::Command => "command",
        }
    }

    fn from_name(name: &str) -> Option<Delivery> {
        match name {
            "event" => Some(Delivery::Event),
            "interactive" => Some(Delivery::Interactive),
            "command" => Some(Delivery::Command),
            _ => None,
        }
    }
}

/// One delivery: its kind and its payload.
pub(crate) struct Incoming {
    pub kind: Delivery,
    pub payload: Value,
}

/// A delivery as it is recorded until handled.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct Journal {
    kind: Option<String>,
    payload: Value,
}

pub(crate) enum Work {
    /// `replay`: accepted before a restart and not handled then.
    Message {
        m: Message,
        replay: bool,
    },
    Command(Inbound),
    Press(Press),
}

/// Slack's side of the intake.
pub(crate) struct Deliveries {
    pub core: SharedCore,
    pub slack: Arc<Slack>,
}

#[async_trait::async_trait]
impl Platform for Deliveries {
    type Delivery = Incoming;
    type Work = Work;
    /// A button press's answer, for the ephemeral message.
    type Done = Option<(Inbound, String)>;
    type Answer = ();

    const NOUN: &'static str = "delivery";
    const AFTER_REPLAY: bool = false;

    /// The dedupe key of a delivery tether acts on (`None`: nothing to do).
    fn key(&self, d: &Incoming) -> Option<String> {
        match d.kind {
            Delivery::Event => events::message(&parse(&d.payload)?, self.slack.bot_user())
                .map(|m| format!("event:{}", m.event_id)),
            Delivery::Interactive => events::press(&parse(&d.payload)?).map(|p| p.key),
            Delivery::Command => events::slash_command(&parse(&d.payload)?).map(|c| c.key),
        }
    }

    fn payload(&self, d: &Incoming) -> String {
        json!({"kind": d.kind.name(), "payload": d.payload}).to_string()
    }

    fn read(&self, payload: &str) -> Result<Incoming, String> {
        let j = serde_json::from_str::<Journal>(payload).map_err(|e| e.to_string())?;
        let kind = j
            .kind
            .as_deref()
            .and_then(Delivery::from_name)
            .ok_or("no delivery kind")?;
        Ok(Incoming {
            kind,
            payload: j.payload,
        })
    }

    async fn route(&self, intake: &SlackIntake, key: String, d: Incoming, replay: bool) {
        let payload = &d.payload;
        match d.kind {
            Delivery::Event => {
                if let Some(m) =
                    parse(payload).and_then(|b| events::message(&b, self.slack.bot_user()))
                {
                    let lane = m.inbound.chat_key(self.core.group_mode);
                    intake.lane(lane, key, Work::Message { m, replay });
                }
            }
            Delivery::Interactive => {
                if let Some(p) = parse(payload).and_then(|p| events::press(&p)) {
                    let job = intake.now(key, Work::Press(p));
                    let intake = intake.clone();
                    tokio::spawn(async move {
                        if let Ok(done) = job.await {
                            intake.platform().follow_up(done).await;
                        }
                    });
                }
            }
            Delivery::Command => {
                if let Some(c) = parse(payload).and_then(|c| events::slash_command(&c)) {
                    tokio::spawn(command(intake.clone(), c, key));
                }
            }
        }
    }

    async fn handle(&self, work: Work) -> Self::Done {
        let core = &self.core;
        let result = match work {
            Work::Message { m, replay } => message(core, m, replay).await,
            Work::Command(inbound) => route::handle(core, inbound).await.map(|_| ()),
            Work::Press(p) => {
                let answer = match route::handle(core, p.inbound.clone()).await {
                    Ok(a) => a,
                    Err(e) => Some(format!("⚠️ {e}")),
                };
                return answer.map(|a| (p.inbound, a));
            }
        };
        if let Err(e) = result {
            tracing::warn!(channel = "slack", "message failed: {e}");
        }
        None
    }

    /// Answers a button press with a message only its presser sees.
    async fn follow_up(&self, done: Self::Done) {
        let Some((inbound, answer)) = done else {
            return;
        };
        let chat = &inbound.chat;
        if let Err(e) = self
            .slack
            .ephemeral(
                &chat.chat_id,
                &inbound.sender.id,
                chat.thread_id.as_deref(),
                &answer,
            )
            .await
        {
            tracing::warn!(channel = "slack", "ephemeral answer not sent: {e}");
        }
    }
}

async fn message(core: &SharedCore, m: Message, replay: bool) -> Result<(), ChannelError> {
    if !m.addressed {
        let key = m.inbound.chat_key(core.group_mode);
        if core
            .store
            .channels()
            .channel_chat(core.name(), &key)
            .await?
            .is_none()
        {
            // A channel message that is not for tether.
            return Ok(());
        }
    }
    // A mention comes twice (`message` and `app_mention`): the second is dropped here. A
    // replay after a crash skips this check (the key may be recorded while the message
    // was not handled); the turn id derived from the message keeps it from running twice.
    let first = core
        .store
        .channels()
        .remember_inbound("slack", &format!("message:{}", m.message_key))
        .await?;
    if !first && !replay {
        return Ok(());
    }
    route::handle(core, m.inbound).await?;
    Ok(())
}

/// `/tether …`: in a DM, a command of the DM conversation; in a channel, a new thread
/// (anchored by a message naming who started it) whose conversation gets the command.
async fn command(intake: SlackIntake, c: SlashCommand, key: String) {
    let thread = if events::is_dm(&c.channel) {
        None
    } else {
        // A stranger cannot make tether post in a channel: pairing happens in a DM.
        let core = intake.core();
        let allowed = core.allowed_users.contains(&c.user)
            || core
                .store
                .channels()
                .channel_user_allowed(core.name(), &c.user)
                .await
                .unwrap_or(false);
        if !allowed {
            let why = "🔒 This tether does not know you yet: send the app a direct message \
                       to get a pairing code.";
            let _ = intake
                .platform()
                .slack
                .ephemeral(&c.channel, &c.user, None, why)
                .await;
            intake.handled(&key).await;
            return;
        }
        // Slack runs app commands only outside threads and says nothing of a thread: in a
        // channel, `/tether new …` starts a thread; any other command is for a thread,
        // typed there as `!cmd` (or `@app /cmd`).
        if let Some(hint) = channel_command_hint(&c.text) {
            let _ = intake
                .platform()
                .slack
                .ephemeral(&c.channel, &c.user, None, &hint)
                .await;
            intake.handled(&key).await;
            return;
        }
        let anchor = format!(
            "<@{}> started a tether thread: `/tether {}`",
            c.user,
            blocks_safe(&c.text)
        );
        match intake.platform().slack.post_now(&c.channel, &anchor).await {
            Ok(ts) => Some(ts),
            Err(e) => {
                tracing::warn!(channel = "slack", "cannot start a thread for /tether: {e}");
                let why = format!("⚠️ Could not start a thread here: {e}");
                let _ = intake
                    .platform()
                    .slack
                    .ephemeral(&c.channel, &c.user, None, &why)
                    .await;
                intake.handled(&key).await;
                return;
            }
        }
    };
    let inbound = events::command_inbound(&c, thread.as_deref());
    let lane = inbound.chat_key(intake.core().group_mode);
    intake.lane(lane, key, Work::Command(inbound));
}

/// What `/tether <text>` typed in a channel (not a DM) answers instead of acting, when
/// it is not `new`: Slack gives a command no thread, so a thread's command is typed in
/// the thread. `None`: it starts a thread.
fn channel_command_hint(text: &str) -> Option<String> {
    let word = text
        .trim_start_matches('/')
        .split(char::is_whitespace)
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    if word == "new" {
        return None;
    }
    let forms = |w: &str| {
        format!(
            "In a thread, type the command with `!` (`!{w}`; also `!new <task>`, \
             `!detach`, `!stop`, `!model <name>`, `!status`) or after a mention of the app \
             (`@tether /{w}`). In a channel, `/tether new [task]` starts a new thread; in a \
             direct message with the app, `/tether <command>` (or `!<command>`) acts on it."
        )
    };
    if word == "help" {
        return Some(format!(
            "{}\n\n{}",
            tether_core::command::help_text(),
            forms("new")
        ));
    }
    Some(format!(
        "Slack does not let apps' commands run in a thread, so `/tether {word}` here cannot \
         know which thread you mean. {}",
        forms(&word)
    ))
}

/// The command as shown in the anchor: escaped, without its leading slash.
fn blocks_safe(text: &str) -> String {
    super::blocks::escape(text.trim_start_matches('/'))
}
