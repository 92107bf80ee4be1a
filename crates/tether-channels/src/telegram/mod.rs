//! Telegram: the Bot API adapter. Long polling (`getUpdates`) by default, or a webhook
//! checked against `X-Telegram-Bot-Api-Secret-Token`; updates are deduplicated by
//! `update_id` before any work and handled in arrival order by one worker. Messages go
//! out as HTML; approvals carry inline buttons whose `callback_data` names the approval.

mod api;
mod html;
mod poll;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::{Value, json};
use tether_proto::Decision;
use tokio::sync::mpsc;

use crate::channel::{Address, Capabilities, Channel, OutMessage, SendError, TextKind};
use crate::config::{TelegramConfig, TelegramMode};
use crate::core::SharedCore;
use crate::inbound::{self, InChat, InKind, Inbound, Sender};

pub use api::{Bot, Update};

/// Telegram's message limit (UTF-16 code units, after entity parsing).
pub const MAX_TEXT: usize = 4096;
/// How long one ordinary Bot API call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The commands shown in Telegram's menu (`setMyCommands`).
const COMMANDS: [(&str, &str); 10] = [
    ("new", "Start a new session: /new [agent] [task]"),
    ("status", "Agent, model, session, state, queue, approvals"),
    ("stop", "Cancel the running turn"),
    ("approve", "Approve: /approve [id]"),
    ("deny", "Deny: /deny [id]"),
    ("detach", "Unbind; the next message starts a new session"),
    ("agent", "Choose the agent: /agent <name>"),
    ("model", "Choose the model: /model <name>"),
    ("sessions", "This chat's sessions"),
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
                let data = callback_data(&a.approval_id, a.decision);
                (data.len() <= 64).then(|| json!({"text": a.label, "callback_data": data}))
            })
            .collect();
        if !buttons.is_empty() {
            body["reply_markup"] = json!({ "inline_keyboard": [buttons] });
        }
        body
    }
}

/// `a:<approval id>:<y|a|n>` (at most 64 bytes for tether's 32-character ids).
pub fn callback_data(approval_id: &str, d: Decision) -> String {
    let c = match d {
        Decision::Allow => 'y',
        Decision::AllowAlways => 'a',
        Decision::Deny => 'n',
    };
    format!("a:{approval_id}:{c}")
}

fn parse_callback(data: &str) -> Option<(String, Decision)> {
    let rest = data.strip_prefix("a:")?;
    let (id, d) = rest.rsplit_once(':')?;
    let d = match d {
        "y" => Decision::Allow,
        "a" => Decision::AllowAlways,
        "n" => Decision::Deny,
        _ => return None,
    };
    (!id.is_empty()).then(|| (id.to_string(), d))
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
}

impl Telegram {
    /// Normalizes an update; `None` for updates tether does not act on. The callback
    /// query id comes back separately so the worker can answer it.
    fn normalize(&self, u: &Update) -> Option<(Inbound, Option<String>)> {
        let key = u.update_id.to_string();
        if let Some(m) = &u.message {
            let from = m.from.as_ref().filter(|f| !f.is_bot)?;
            let text = self.strip_bot_name(m.text.as_deref()?)?;
            return Some((
                Inbound {
                    key,
                    chat: chat_of(m),
                    sender: Sender {
                        id: from.id.to_string(),
                        name: from.display(),
                    },
                    kind: InKind::Text(text),
                },
                None,
            ));
        }
        let q = u.callback_query.as_ref()?;
        let m = q.message.as_ref()?;
        let kind = match q.data.as_deref().and_then(parse_callback) {
            Some((approval_id, decision)) => InKind::Decide {
                approval_id,
                decision,
            },
            None => InKind::Text(String::new()),
        };
        Some((
            Inbound {
                key,
                chat: chat_of(m),
                sender: Sender {
                    id: q.from.id.to_string(),
                    name: q.from.display(),
                },
                kind,
            },
            Some(q.id.clone()),
        ))
    }

    /// `/cmd@thisbot args` → `/cmd args`; a command for another bot → `None`.
    fn strip_bot_name(&self, text: &str) -> Option<String> {
        let trimmed = text.trim_start();
        let Some(first) = trimmed.split_whitespace().next() else {
            return Some(text.to_string());
        };
        let Some((cmd, bot)) = first.strip_prefix('/').and_then(|c| c.split_once('@')) else {
            return Some(text.to_string());
        };
        match self.username.get() {
            Some(me) if !me.eq_ignore_ascii_case(bot) => None,
            _ => Some(format!("/{cmd}{}", &trimmed[first.len()..])),
        }
    }
}

fn chat_of(m: &api::Message) -> InChat {
    let is_group = m.chat.kind != "private";
    let thread_id = m
        .message_thread_id
        .filter(|_| m.is_topic_message == Some(true))
        .map(|t| t.to_string());
    let title = m.chat.title.clone().unwrap_or_else(|| {
        m.from
            .as_ref()
            .map_or_else(|| m.chat.id.to_string(), api::User::display)
    });
    InChat {
        chat_id: m.chat.id.to_string(),
        thread_id,
        is_group,
        title,
    }
}

/// Handles updates in arrival order, answering callback queries at once.
async fn worker(core: SharedCore, tg: Arc<Telegram>, mut rx: mpsc::UnboundedReceiver<Update>) {
    while let Some(u) = rx.recv().await {
        let Some((msg, callback)) = tg.normalize(&u) else {
            continue;
        };
        let answer = match (&callback, &msg.kind) {
            (Some(_), InKind::Text(_)) => Some("This button is not known.".to_string()),
            _ => match inbound::handle(&core, msg).await {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(channel = "telegram", "update {} failed: {e}", u.update_id);
                    Some(format!("⚠️ {e}"))
                }
            },
        };
        if let Some(id) = callback {
            let body = json!({
                "callback_query_id": id,
                "text": answer.unwrap_or_default(),
            });
            if let Err(e) = tg
                .bot
                .call::<Value>("answerCallbackQuery", &body, CALL_TIMEOUT)
                .await
            {
                tracing::info!(channel = "telegram", "answerCallbackQuery failed: {e}");
            }
        }
    }
}

/// Records the update id; `true` when it is new (then it is queued).
async fn accept(core: &SharedCore, tx: &mpsc::UnboundedSender<Update>, u: Update) -> bool {
    match core
        .store
        .remember_inbound("telegram", &u.update_id.to_string())
        .await
    {
        Ok(true) => {
            let _ = tx.send(u);
            true
        }
        Ok(false) => {
            tracing::info!(
                channel = "telegram",
                update = u.update_id,
                "duplicate update ignored"
            );
            false
        }
        Err(e) => {
            tracing::warn!(channel = "telegram", "cannot record update: {e}");
            false
        }
    }
}

/// Learns the bot's name and publishes the command menu, retrying until it works.
async fn introduce(tg: Arc<Telegram>) {
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
        match (me, set) {
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
                tracing::warn!(channel = "telegram", "getMe/setMyCommands failed: {err}");
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

#[derive(Clone)]
struct HookState {
    core: SharedCore,
    tx: mpsc::UnboundedSender<Update>,
    secret: Arc<[u8]>,
}

/// `POST /hooks/telegram`: a wrong or missing secret token → 401 and nothing done.
async fn hook(State(s): State<HookState>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let presented = headers
        .get("x-telegram-bot-api-secret-token")
        .map(|v| v.as_bytes())
        .unwrap_or_default();
    if s.secret.is_empty() || !crate::constant_time_eq(&s.secret, presented) {
        tracing::warn!(
            channel = "telegram",
            "webhook with a wrong secret token rejected"
        );
        return StatusCode::UNAUTHORIZED;
    }
    let Ok(update) = serde_json::from_slice::<Update>(&body) else {
        return StatusCode::BAD_REQUEST;
    };
    accept(&s.core, &s.tx, update).await;
    StatusCode::OK
}

/// Starts the worker, the introduction, and the poller (or the webhook route).
pub(crate) fn start(core: SharedCore, tg: Arc<Telegram>, cfg: &TelegramConfig) -> Started {
    let (tx, rx) = mpsc::unbounded_channel();
    let mut tasks = vec![
        tokio::spawn(worker(core.clone(), tg.clone(), rx)),
        tokio::spawn(introduce(tg.clone())),
    ];
    let hook = match cfg.mode {
        TelegramMode::Polling => {
            tasks.push(tokio::spawn(poll::run(core, tg, tx, cfg.poll_timeout)));
            None
        }
        TelegramMode::Webhook => {
            let secret = cfg.webhook_secret.clone().unwrap_or_default();
            let state = HookState {
                core,
                tx,
                secret: Arc::from(secret.into_bytes()),
            };
            Some(
                axum::Router::new()
                    .route("/hooks/telegram", post(hook))
                    .with_state(state),
            )
        }
    };
    Started { tasks, hook }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callback_data_round_trips_and_fits() {
        let id = "0123456789abcdef0123456789abcdef";
        for d in [Decision::Allow, Decision::AllowAlways, Decision::Deny] {
            let data = callback_data(id, d);
            assert!(data.len() <= 64);
            assert_eq!(parse_callback(&data), Some((id.to_string(), d)));
        }
        assert_eq!(parse_callback("a::y"), None);
        assert_eq!(parse_callback("x:1:y"), None);
        assert_eq!(parse_callback("a:1:q"), None);
    }

    #[test]
    fn bot_names_are_stripped_from_commands() {
        let tg = Telegram::new(&TelegramConfig {
            bot_token: "t".into(),
            base_url: "http://127.0.0.1:1".into(),
            mode: TelegramMode::Polling,
            webhook_secret: None,
            allowed_users: Default::default(),
            group_mode: Default::default(),
            poll_timeout: Duration::from_secs(1),
        })
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            tg.strip_bot_name("/new@any codex x").as_deref(),
            Some("/new codex x")
        );
        let _ = tg.username.set("TetherBot".into());
        assert_eq!(
            tg.strip_bot_name("/status@tetherbot").as_deref(),
            Some("/status")
        );
        assert_eq!(tg.strip_bot_name("/status@otherbot"), None);
        assert_eq!(tg.strip_bot_name("hello @x").as_deref(), Some("hello @x"));
    }
}
