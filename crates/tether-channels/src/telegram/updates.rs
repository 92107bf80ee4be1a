//! Inbound Telegram: updates from long polling or the webhook are recorded by
//! `update_id` together with the raw update (a repeat is dropped before any work) and
//! handled in arrival order within each chat (chats in parallel); callback queries are
//! answered at once. An update is marked handled once the runtime has it; unhandled ones
//! (a crash in between) are replayed first at start-up. Also publishes the command menu.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::api::{self, Update};
use super::{CALL_TIMEOUT, COMMANDS, Telegram, parse_callback, poll};
use crate::config::{TelegramConfig, TelegramMode};
use crate::core::SharedCore;
use crate::inbound::{self, InChat, InFile, InKind, Inbound, Sender};

impl Telegram {
    /// Normalizes an update; `None` for updates tether does not act on. The callback
    /// query id comes back separately so the worker can answer it.
    fn normalize(&self, u: &Update) -> Option<(Inbound, Option<String>)> {
        let key = u.update_id.to_string();
        if let Some(m) = &u.message {
            let from = m.from.as_ref().filter(|f| !f.is_bot)?;
            let files = files_of(m);
            let kind = if files.is_empty() {
                InKind::Text(self.strip_bot_name(m.text.as_deref()?)?)
            } else {
                InKind::Files {
                    caption: m.caption.clone().unwrap_or_default(),
                    files,
                }
            };
            return Some((
                Inbound {
                    key,
                    chat: chat_of(m),
                    sender: Sender {
                        id: from.id.to_string(),
                        name: from.display(),
                    },
                    kind,
                },
                None,
            ));
        }
        let q = u.callback_query.as_ref()?;
        let m = q.message.as_ref()?;
        let kind = match q.data.as_deref().and_then(parse_callback) {
            Some((approval_id, decision)) => InKind::Decide {
                approval_id: approval_id.into(),
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

/// The files of a message: the largest size of a photo (Telegram photos have no name;
/// they are JPEG, but the name claims nothing so the bytes decide), a document with its
/// name and declared type.
fn files_of(m: &api::Message) -> Vec<InFile> {
    let mut out = Vec::new();
    if let Some(p) = m.photo.as_ref().and_then(|sizes| sizes.last()) {
        out.push(InFile {
            name: format!("photo-{}", m.message_id),
            declared: None,
            size: p.file_size,
            source: p.file_id.clone(),
        });
    }
    if let Some(d) = &m.document {
        out.push(InFile {
            name: d
                .file_name
                .clone()
                .unwrap_or_else(|| format!("document-{}", m.message_id)),
            declared: d.mime_type.clone(),
            size: d.file_size,
            source: d.file_id.clone(),
        });
    }
    out
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

/// Handles updates in arrival order, answering callback queries at once: first the ones
/// accepted before a restart and not yet handled, then the new ones.
async fn worker(core: SharedCore, tg: Arc<Telegram>, mut rx: mpsc::UnboundedReceiver<Update>) {
    let (lanes_tx, lanes_rx) = mpsc::unbounded_channel();
    let handler = {
        let (core, tg) = (core.clone(), tg.clone());
        move |(msg, callback): (Inbound, Option<String>)| {
            let (core, tg) = (core.clone(), tg.clone());
            async move { handle(&core, &tg, msg, callback).await }
        }
    };
    tokio::spawn(crate::lanes::run_lanes(lanes_rx, handler));
    let dispatch = |u: Update| {
        let (core, lanes_tx) = (core.clone(), lanes_tx.clone());
        let normalized = tg.normalize(&u);
        async move {
            match normalized {
                Some((msg, callback)) => {
                    let lane = msg.chat_key(core.group_mode);
                    let _ = lanes_tx.send((lane, (msg, callback)));
                }
                None => mark_handled(&core, &u.update_id.to_string()).await,
            }
        }
    };
    // Accepted but not handled before the last stop. An update accepted meanwhile may be
    // both in this list and in `rx`: it is handled once.
    let pending = match core.store.unhandled_inbound("telegram").await {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(channel = "telegram", "cannot read unhandled updates: {e}");
            Vec::new()
        }
    };
    let mut replayed = HashSet::new();
    for p in pending {
        replayed.insert(p.key.clone());
        match serde_json::from_str::<Update>(&p.payload) {
            Ok(u) => {
                tracing::info!(channel = "telegram", update = p.key, "replaying an update");
                dispatch(u).await;
            }
            Err(e) => {
                tracing::warn!(
                    channel = "telegram",
                    "stored update {} unreadable: {e}",
                    p.key
                );
                mark_handled(&core, &p.key).await;
            }
        }
    }
    while let Some(u) = rx.recv().await {
        if !replayed.remove(&u.update_id.to_string()) {
            dispatch(u).await;
        }
    }
}

/// The update will not be replayed at start-up.
async fn mark_handled(core: &SharedCore, key: &str) {
    if let Err(e) = core.store.mark_inbound_handled("telegram", key).await {
        tracing::warn!(
            channel = "telegram",
            "cannot mark update {key} handled: {e}"
        );
    }
}

/// Handles one update and answers its callback query, if any.
async fn handle(core: &SharedCore, tg: &Telegram, msg: Inbound, callback: Option<String>) {
    let key = msg.key.clone();
    let answer = match (&callback, &msg.kind) {
        (Some(_), InKind::Text(_)) => Some("This button is not known.".to_string()),
        _ => match inbound::handle(core, msg).await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(channel = "telegram", "update {key} failed: {e}");
                Some(format!("⚠️ {e}"))
            }
        },
    };
    // The runtime has the message (its turn is stored, keyed by the update): a replay
    // would not run it again, and it need not be replayed.
    mark_handled(core, &key).await;
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

/// Records the update id with the raw update, in one transaction; `Ok(true)` when it is
/// new (then it is queued). `Err`: not recorded, so not to be confirmed.
pub(crate) async fn accept(
    core: &SharedCore,
    tx: &mpsc::UnboundedSender<Update>,
    u: Update,
    raw: &Value,
) -> Result<bool, tether_store::StoreError> {
    match core
        .store
        .accept_inbound("telegram", &u.update_id.to_string(), &raw.to_string())
        .await
    {
        Ok(true) => {
            let _ = tx.send(u);
            Ok(true)
        }
        Ok(false) => {
            tracing::info!(
                channel = "telegram",
                update = u.update_id,
                "duplicate update ignored"
            );
            Ok(false)
        }
        Err(e) => {
            tracing::warn!(channel = "telegram", "cannot record update: {e}");
            Err(e)
        }
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

#[derive(Clone)]
pub(crate) struct HookState {
    core: SharedCore,
    tx: mpsc::UnboundedSender<Update>,
    secret: Arc<[u8]>,
}

/// Largest update the webhook reads: a message of 4096 characters with its entities and
/// a reply it quotes stays far below this.
const MAX_UPDATE_BYTES: usize = 256 * 1024;

/// `POST /hooks/telegram`: a wrong or missing secret token → 401 and nothing done (the
/// body is not even read); a body over 256 KiB → 413; a body that is not JSON → 400; an
/// update that does not fit the types is logged and acknowledged (200), or Telegram
/// would redeliver it ahead of every later one; one that cannot be recorded → 500
/// (Telegram retries it).
#[utoipa::path(
    post,
    path = "/hooks/telegram",
    tag = "webhooks",
    description = "Telegram Bot API webhook (webhook mode only): an `Update` as Telegram \
                   sends it. Checked against the `X-Telegram-Bot-Api-Secret-Token` header \
                   before the body is read.",
    params(("X-Telegram-Bot-Api-Secret-Token" = String, Header, description = "The configured webhook secret")),
    request_body(content = serde_json::Value, content_type = "application/json", description = "A Telegram Update"),
    responses(
        (status = 200, description = "Accepted (or a duplicate, ignored)"),
        (status = 400, description = "Not JSON"),
        (status = 401, description = "Missing or wrong secret token"),
        (status = 413, description = "Larger than 256 KiB"),
        (status = 500, description = "Could not be recorded; Telegram retries"),
    )
)]
pub(crate) async fn hook(
    State(s): State<HookState>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> StatusCode {
    let presented = headers
        .get("x-telegram-bot-api-secret-token")
        .map(|v| v.as_bytes())
        .unwrap_or_default();
    if s.secret.is_empty() || !crate::constant_time_eq(&s.secret, presented) {
        crate::body::warn_refused("telegram", "a wrong secret token");
        return StatusCode::UNAUTHORIZED;
    }
    let body = match crate::body::read_body(&headers, body, MAX_UPDATE_BYTES).await {
        Ok(b) => b,
        Err(status) => return status,
    };
    let Ok(raw) = serde_json::from_slice::<Value>(&body) else {
        return StatusCode::BAD_REQUEST;
    };
    let update = match serde_json::from_value::<Update>(raw.clone()) {
        Ok(u) => u,
        Err(e) => {
            tracing::warn!(
                channel = "telegram",
                update = raw["update_id"].as_i64(),
                "webhook update skipped, it does not fit the Bot API types: {e}"
            );
            return StatusCode::OK;
        }
    };
    match accept(&s.core, &s.tx, update, &raw).await {
        Ok(_) => StatusCode::OK,
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// Starts the worker, the introduction, and the poller (or the webhook route).
pub(crate) fn start(core: SharedCore, tg: Arc<Telegram>, cfg: &TelegramConfig) -> Started {
    let (tx, rx) = mpsc::unbounded_channel();
    let webhook = match (cfg.mode, &cfg.webhook_url, &cfg.webhook_secret) {
        (TelegramMode::Webhook, Some(url), Some(secret)) => Some((url.clone(), secret.clone())),
        _ => None,
    };
    let mut tasks = vec![
        tokio::spawn(worker(core.clone(), tg.clone(), rx)),
        tokio::spawn(introduce(tg.clone(), webhook)),
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
    fn bot_names_are_stripped_from_commands() {
        let tg = Telegram::new(&TelegramConfig {
            bot_token: "t".into(),
            base_url: "http://127.0.0.1:1".into(),
            mode: TelegramMode::Polling,
            webhook_secret: None,
            webhook_url: None,
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
