//! Where Slack deliveries go, from either transport: each is recorded (dedupe key and
//! the raw delivery, in one transaction) before the transport acknowledges it, handled
//! after, and marked handled once the runtime has it; unhandled ones (a crash in
//! between) are replayed at start-up. Messages run in per-conversation
//! lanes (arrival order within a thread or DM); a message in a channel counts when it
//! mentions the app or continues a thread tether serves, and is deduplicated by
//! `channel:ts` there (Slack sends a mention both as `message` and as `app_mention`).
//! A button press is handled at once and answered with an ephemeral message; the
//! approval's own message is updated from its `approval_resolved` event. The slash
//! command in a channel first posts the message that anchors its new thread.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::Slack;
use super::events::{self, Message, Press, SlashCommand};
use crate::ChannelError;
use crate::core::SharedCore;
use crate::inbound::{self, Inbound};
use crate::json::parse;

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

/// A delivery as it is recorded until handled.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct Journal {
    kind: Option<String>,
    payload: Value,
}

enum Work {
    /// `replay`: accepted before a restart and not handled then.
    Message {
        m: Message,
        journal: String,
        replay: bool,
    },
    Command {
        inbound: Inbound,
        journal: String,
    },
}

#[derive(Clone)]
pub(crate) struct Intake {
    core: SharedCore,
    slack: Arc<Slack>,
    lanes: mpsc::UnboundedSender<(String, Work)>,
}

impl Intake {
    /// The intake and its lanes task.
    pub fn start(core: SharedCore, slack: Arc<Slack>) -> (Intake, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let handler = {
            let core = core.clone();
            move |work: Work| {
                let core = core.clone();
                async move { run(&core, work).await }
            }
        };
        let task = tokio::spawn(crate::lanes::run_lanes(rx, handler));
        (
            Intake {
                core,
                slack,
                lanes: tx,
            },
            task,
        )
    }

    /// Records a key that is only deduplicated (a request's signature); `true` when new.
    pub async fn remember(&self, key: &str) -> Result<bool, ChannelError> {
        Ok(self.core.store.remember_inbound("slack", key).await?)
    }

    /// Records and queues one delivery, keeping it until handled (a crash in between
    /// replays it at start-up). `Err`: it could not be recorded, so it must not be
    /// acknowledged (Slack delivers it again).
    pub async fn accept(&self, kind: Delivery, payload: &Value) -> Result<(), ChannelError> {
        let Some(key) = self.key_of(kind, payload) else {
            return Ok(());
        };
        let journal = json!({"kind": kind.name(), "payload": payload}).to_string();
        if !self
            .core
            .store
            .accept_inbound("slack", &key, &journal)
            .await?
        {
            tracing::info!(channel = "slack", key, "duplicate delivery ignored");
            return Ok(());
        }
        self.dispatch(kind, payload, key, false);
        Ok(())
    }

    /// The dedupe key of a delivery tether acts on (`None`: nothing to do).
    fn key_of(&self, kind: Delivery, payload: &Value) -> Option<String> {
        match kind {
            Delivery::Event => events::message(&parse(payload)?, self.slack.bot_user())
                .map(|m| format!("event:{}", m.event_id)),
            Delivery::Interactive => events::press(&parse(payload)?).map(|p| p.key),
            Delivery::Command => events::slash_command(&parse(payload)?).map(|c| c.key),
        }
    }

    fn dispatch(&self, kind: Delivery, payload: &Value, journal: String, replay: bool) {
        match kind {
            Delivery::Event => {
                if let Some(m) =
                    parse(payload).and_then(|b| events::message(&b, self.slack.bot_user()))
                {
                    let lane = m.inbound.chat_key(self.core.group_mode);
                    let _ = self
                        .lanes
                        .send((lane, Work::Message { m, journal, replay }));
                }
            }
            Delivery::Interactive => {
                if let Some(p) = parse(payload).and_then(|p| events::press(&p)) {
                    tokio::spawn(press(self.core.clone(), self.slack.clone(), p, journal));
                }
            }
            Delivery::Command => {
                if let Some(c) = parse(payload).and_then(|c| events::slash_command(&c)) {
                    tokio::spawn(command(self.clone(), c, journal));
                }
            }
        }
    }

    /// Dispatches again what was accepted before the last stop and never handled.
    pub async fn replay(&self) {
        let pending = match self.core.store.unhandled_inbound("slack").await {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(channel = "slack", "cannot read unhandled deliveries: {e}");
                return;
            }
        };
        for p in pending {
            let stored = serde_json::from_str::<Journal>(&p.payload).ok();
            match stored.and_then(|j| Some((Delivery::from_name(&j.kind?)?, j.payload))) {
                Some((kind, payload)) => {
                    tracing::info!(channel = "slack", key = p.key, "replaying a delivery");
                    self.dispatch(kind, &payload, p.key, true);
                }
                None => handled(&self.core, &p.key).await,
            }
        }
    }
}

/// The delivery will not be replayed at start-up.
async fn handled(core: &SharedCore, journal: &str) {
    if let Err(e) = core.store.mark_inbound_handled("slack", journal).await {
        tracing::warn!(channel = "slack", "cannot mark {journal} handled: {e}");
    }
}

async fn run(core: &SharedCore, work: Work) {
    let (result, journal) = match work {
        Work::Message { m, journal, replay } => (message(core, m, replay).await, journal),
        Work::Command { inbound, journal } => {
            (inbound::handle(core, inbound).await.map(|_| ()), journal)
        }
    };
    if let Err(e) = result {
        tracing::warn!(channel = "slack", "message failed: {e}");
    }
    // The runtime has the message (its turn id comes from the message): a replay would
    // not run it again, and it need not be replayed.
    handled(core, &journal).await;
}

async fn message(core: &SharedCore, m: Message, replay: bool) -> Result<(), ChannelError> {
    if !m.addressed {
        let key = m.inbound.chat_key(core.group_mode);
        if core.store.channel_chat(core.name(), &key).await?.is_none() {
            // A channel message that is not for tether.
            return Ok(());
        }
    }
    // A mention comes twice (`message` and `app_mention`): the second is dropped here. A
    // replay after a crash skips this check (the key may be recorded while the message
    // was not handled); the turn id derived from the message keeps it from running twice.
    let first = core
        .store
        .remember_inbound("slack", &format!("message:{}", m.message_key))
        .await?;
    if !first && !replay {
        return Ok(());
    }
    inbound::handle(core, m.inbound).await?;
    Ok(())
}

async fn press(core: SharedCore, slack: Arc<Slack>, p: Press, journal: String) {
    let answer = match inbound::handle(&core, p.inbound.clone()).await {
        Ok(a) => a,
        Err(e) => Some(format!("⚠️ {e}")),
    };
    handled(&core, &journal).await;
    let Some(answer) = answer else {
        return;
    };
    let chat = &p.inbound.chat;
    if let Err(e) = slack
        .ephemeral(
            &chat.chat_id,
            &p.inbound.sender.id,
            chat.thread_id.as_deref(),
            &answer,
        )
        .await
    {
        tracing::warn!(channel = "slack", "ephemeral answer not sent: {e}");
    }
}

/// `/tether …`: in a DM, a command of the DM conversation; in a channel, a new thread
/// (anchored by a message naming who started it) whose conversation gets the command.
async fn command(intake: Intake, c: SlashCommand, journal: String) {
    let thread = if events::is_dm(&c.channel) {
        None
    } else {
        // A stranger cannot make tether post in a channel: pairing happens in a DM.
        let core = &intake.core;
        let allowed = core.allowed_users.contains(&c.user)
            || core
                .store
                .channel_user_allowed(core.name(), &c.user)
                .await
                .unwrap_or(false);
        if !allowed {
            let why = "🔒 This tether does not know you yet: send the app a direct message \
                       to get a pairing code.";
            let _ = intake.slack.ephemeral(&c.channel, &c.user, None, why).await;
            handled(core, &journal).await;
            return;
        }
        // Slack runs app commands only outside threads and says nothing of a thread: in a
        // channel, `/tether new …` starts a thread; any other command is for a thread,
        // typed there as `!cmd` (or `@app /cmd`).
        if let Some(hint) = channel_command_hint(&c.text) {
            let _ = intake
                .slack
                .ephemeral(&c.channel, &c.user, None, &hint)
                .await;
            handled(core, &journal).await;
            return;
        }
        let anchor = format!(
            "<@{}> started a tether thread: `/tether {}`",
            c.user,
            blocks_safe(&c.text)
        );
        match intake.slack.post_now(&c.channel, &anchor).await {
            Ok(ts) => Some(ts),
            Err(e) => {
                tracing::warn!(channel = "slack", "cannot start a thread for /tether: {e}");
                let why = format!("⚠️ Could not start a thread here: {e}");
                let _ = intake
                    .slack
                    .ephemeral(&c.channel, &c.user, None, &why)
                    .await;
                handled(&intake.core, &journal).await;
                return;
            }
        }
    };
    let inbound = events::command_inbound(&c, thread.as_deref());
    let lane = inbound.chat_key(intake.core.group_mode);
    let _ = intake
        .lanes
        .send((lane, Work::Command { inbound, journal }));
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
