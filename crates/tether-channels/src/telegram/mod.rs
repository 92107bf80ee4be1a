//! Telegram: the Bot API adapter. Long polling (`getUpdates`) by default, or a webhook
//! checked against `X-Telegram-Bot-Api-Secret-Token`; updates are deduplicated by
//! `update_id` before any work and handled in arrival order by one worker. Messages go
//! out as HTML; approvals carry inline buttons whose `callback_data` names the approval.

mod api;
mod html;
mod poll;
mod updates;
pub(crate) mod webhook;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde_json::{Value, json};

use crate::channel::{Address, Capabilities, Channel, FetchError, OutMessage, SendError, TextKind};
use crate::config::{TelegramConfig, TelegramMode};
use crate::core::SharedCore;
use crate::inbound::InFile;
use crate::intake::Intake;

pub use api::{Bot, Update};

/// Telegram's message limit (UTF-16 code units, after entity parsing).
pub const MAX_TEXT: usize = 4096;
/// How long one ordinary Bot API call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The commands shown in Telegram's menu (`setMyCommands`).
const COMMANDS: [(&str, &str); 13] = [
    ("new", "Start a new session: /new [agent] [task]"),
    ("status", "Agent, model, session, state, queue, approvals"),
    ("stop", "Cancel the running turn"),
    ("approve", "Approve: /approve [id]"),
    ("deny", "Deny: /deny [id]"),
    ("detach", "Unbind; the next message starts a new session"),
    ("agent", "Choose the agent: /agent <name>"),
    ("model", "Choose the model: /model <name>"),
    ("sessions", "This chat's sessions"),
    ("usage", "Tokens and cost spent here, and the budgets"),
    ("cancel", "Cancel the continuation after a usage limit"),
    (
        "file",
        "Send a file from the working directory: /file <path>",
    ),
    ("help", "The commands"),
];

/// The Telegram adapter.
pub struct Telegram {
    bot: Bot,
    /// The bot's username (from `getMe`), to strip `/cmd@bot` suffixes.
    username: OnceLock<String>,
}

impl Telegram {
    pub fn new(cfg: &TelegramConfig) -> Result<Telegram, SendError> {
        Ok(Telegram {
            bot: Bot::new(&cfg.base_url, &cfg.bot_token)?,
            username: OnceLock::new(),
        })
    }

    fn chat_id(to: &Address) -> Value {
        match to.chat_id.parse::<i64>() {
            Ok(n) => json!(n),
            Err(_) => json!(to.chat_id),
        }
    }

    fn body(to: &Address, msg: &OutMessage) -> Value {
        let text = match msg.kind {
            TextKind::Plain => html::escape(&msg.text),
            TextKind::Markdown => html::markdown(&msg.text),
        };
        let mut body = json!({
            "chat_id": Self::chat_id(to),
            "text": text,
            "parse_mode": "HTML",
            "link_preview_options": {"is_disabled": true},
        });
        let buttons: Vec<Value> = msg
            .actions
            .iter()
            .filter_map(|a| {
                let data = crate::buttons::callback_data(&a.approval_id, a.decision);
                (data.len() <= 64).then(|| json!({"text": a.label, "callback_data": data}))
            })
            .collect();
        if !buttons.is_empty() {
            body["reply_markup"] = json!({ "inline_keyboard": [buttons] });
        }
        body
    }
}

/// `tether doctor`: `getMe` proves the bot token (and says which bot it is).
pub(crate) async fn check(cfg: &TelegramConfig) -> Result<String, String> {
    let bot = Bot::new(&cfg.base_url, &cfg.bot_token).map_err(|e| e.to_string())?;
    let me: api::User = bot
        .call("getMe", &json!({}), CALL_TIMEOUT)
        .await
        .map_err(|e| crate::net::check_failed(e, "check `bot_token`"))?;
    Ok(format!("bot {} answers", me.display()))
}

#[async_trait::async_trait]
impl Channel for Telegram {
    fn name(&self) -> &'static str {
        "telegram"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            buttons: true,
            edit: true,
            cards: false,
            // Room for the few characters HTML rendering can add (none are counted by
            // Telegram, but stay safe).
            max_text_len: MAX_TEXT - 96,
        }
    }

    async fn send(&self, to: &Address, msg: &OutMessage, _key: &str) -> Result<String, SendError> {
        let mut body = Self::body(to, msg);
        if let Some(t) = to.thread_id.as_deref().and_then(|t| t.parse::<i64>().ok()) {
            body["message_thread_id"] = json!(t);
        }
        let sent: api::Message = self.bot.call("sendMessage", &body, CALL_TIMEOUT).await?;
        Ok(sent.message_id.to_string())
    }

    async fn edit(
        &self,
        to: &Address,
        message_id: &str,
        msg: &OutMessage,
    ) -> Result<(), SendError> {
        let mut body = Self::body(to, msg);
        body["message_id"] = json!(message_id.parse::<i64>().unwrap_or_default());
        match self
            .bot
            .call::<Value>("editMessageText", &body, CALL_TIMEOUT)
            .await
        {
            Ok(_) => Ok(()),
            // The same content again is not an error for tether.
            Err(SendError::Permanent(e)) if e.contains("message is not modified") => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn send_file(
        &self,
        to: &Address,
        msg: &OutMessage,
        bytes: Vec<u8>,
        _key: &str,
    ) -> Result<String, SendError> {
        let Some(file) = &msg.file else {
            return Err(SendError::Permanent("no file to send".to_owned()));
        };
        // Images the agent produced go as photos, anything else as a document.
        let (method, field) = if file.image {
            ("sendPhoto", "photo")
        } else {
            ("sendDocument", "document")
        };
        let mut fields = vec![
            ("chat_id", to.chat_id.clone()),
            ("caption", msg.text.clone()),
        ];
        if let Some(t) = &to.thread_id {
            fields.push(("message_thread_id", t.clone()));
        }
        let sent: api::Message = self
            .bot
            .upload(
                method,
                &fields,
                (field, &file.name, bytes),
                Duration::from_secs(120),
            )
            .await?;
        Ok(sent.message_id.to_string())
    }

    async fn fetch(&self, file: &InFile, limit: u64) -> Result<Vec<u8>, FetchError> {
        // Downloads get longer than one API call: 20 MB over a slow link.
        self.bot
            .download(&file.source, limit, Duration::from_secs(120))
            .await
    }
}

/// Learns the bot's name and publishes the command menu, retrying until it works.
async fn introduce(tg: Arc<Telegram>, webhook: Option<(String, String)>) {
    let commands: Vec<api::BotCommand> = COMMANDS
        .iter()
        .map(|(command, description)| api::BotCommand {
            command,
            description,
        })
        .collect();
    let mut wait = Duration::from_millis(500);
    loop {
        let me = tg
            .bot
            .call::<api::User>("getMe", &json!({}), CALL_TIMEOUT)
            .await;
        let set = tg
            .bot
            .call::<Value>(
                "setMyCommands",
                &json!({ "commands": commands }),
                CALL_TIMEOUT,
            )
            .await;
        let hooked = match &webhook {
            Some((url, secret)) => {
                let body = json!({
                    "url": url,
                    "secret_token": secret,
                    "allowed_updates": ["message", "callback_query"],
                });
                tg.bot
                    .call::<Value>("setWebhook", &body, CALL_TIMEOUT)
                    .await
            }
            None => Ok(Value::Null),
        };
        match (me, set.and(hooked)) {
            (Ok(me), Ok(_)) => {
                if let Some(u) = me.username {
                    let _ = tg.username.set(u);
                }
                return;
            }
            (me, set) => {
                let err = me
                    .err()
                    .or(set.err())
                    .map(|e| e.to_string())
                    .unwrap_or_default();
                tracing::warn!(
                    channel = "telegram",
                    "getMe/setMyCommands/setWebhook failed: {err}"
                );
            }
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_secs(60));
    }
}

/// The running adapter's tasks and its webhook route (webhook mode only).
pub(crate) struct Started {
    pub tasks: Vec<tokio::task::JoinHandle<()>>,
    pub hook: Option<axum::Router>,
}

/// Starts the intake (replaying what a crash left unhandled), the introduction, and the
/// poller (or the webhook route).
pub(crate) fn start(core: SharedCore, tg: Arc<Telegram>, cfg: &TelegramConfig) -> Started {
    let platform = updates::Updates {
        core: core.clone(),
        tg: tg.clone(),
    };
    let (intake, lanes) = Intake::start(core, platform);
    let webhook = match (cfg.mode, &cfg.webhook_url, &cfg.webhook_secret) {
        (TelegramMode::Webhook, Some(url), Some(secret)) => Some((url.clone(), secret.clone())),
        _ => None,
    };
    let replay = {
        let intake = intake.clone();
        async move { intake.replay().await }
    };
    let mut tasks = vec![
        lanes,
        tokio::spawn(replay),
        tokio::spawn(introduce(tg.clone(), webhook)),
    ];
    let hook = match cfg.mode {
        TelegramMode::Polling => {
            tasks.push(tokio::spawn(poll::run(intake, tg, cfg.poll_timeout)));
            None
        }
        TelegramMode::Webhook => {
            let secret = cfg.webhook_secret.clone().unwrap_or_default();
            Some(webhook::routes(intake, secret))
        }
    };
    Started { tasks, hook }
}
