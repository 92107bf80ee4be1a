//! Inbound Telegram, as the durable intake sees it (`crate::intake`): an update from long
//! polling or the webhook is recorded by `update_id` together with the raw update (a
//! repeat is dropped before any work), normalized, and handled in arrival order within
//! its chat (chats in parallel), button presses included; a callback query is answered
//! once its update is handled. Updates a crash left unhandled are replayed first at
//! start-up.

use std::sync::Arc;

use serde_json::{Value, json};

use super::api::{self, Update};
use super::{CALL_TIMEOUT, Telegram};
use crate::buttons::parse_callback;
use crate::core::SharedCore;
use crate::inbound::{InChat, InFile, InKind, Inbound, Sender};
use crate::intake::{Intake, Platform};

/// Telegram's intake.
pub(crate) type UpdatesIntake = Intake<Updates>;

/// An update as it came: parsed, and the raw JSON that is recorded.
pub(crate) struct Incoming {
    pub update: Update,
    pub raw: String,
}

/// Telegram's side of the intake.
pub(crate) struct Updates {
    pub core: SharedCore,
    pub tg: Arc<Telegram>,
}

#[async_trait::async_trait]
impl Platform for Updates {
    type Delivery = Incoming;
    /// The message, and the callback query to answer once it is handled.
    type Work = (Inbound, Option<String>);
    /// The answer to the callback query, if there is one.
    type Done = (Option<String>, Option<String>);
    type Answer = ();

    const NOUN: &'static str = "update";
    const AFTER_REPLAY: bool = true;

    fn key(&self, d: &Incoming) -> Option<String> {
        Some(d.update.update_id.to_string())
    }

    fn payload(&self, d: &Incoming) -> String {
        d.raw.clone()
    }

    fn read(&self, payload: &str) -> Result<Incoming, String> {
        let update = serde_json::from_str::<Update>(payload).map_err(|e| e.to_string())?;
        Ok(Incoming {
            update,
            raw: payload.to_owned(),
        })
    }

    async fn route(&self, intake: &UpdatesIntake, key: String, d: Incoming, _replay: bool) {
        match self.tg.normalize(&d.update) {
            Some((msg, callback)) => {
                let lane = msg.chat_key(self.core.group_mode);
                intake.lane(lane, key, (msg, callback));
            }
            None => intake.handled(&key).await,
        }
    }

    async fn handle(&self, (msg, callback): (Inbound, Option<String>)) -> Self::Done {
        let key = msg.key.clone();
        let answer = match (&callback, &msg.kind) {
            (Some(_), InKind::Text(_)) => Some("This button is not known.".to_string()),
            _ => match crate::route::handle(&self.core, msg).await {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(channel = "telegram", "update {key} failed: {e}");
                    Some(format!("⚠️ {e}"))
                }
            },
        };
        (answer, callback)
    }

    /// Answers the update's callback query, if any.
    async fn follow_up(&self, (answer, callback): Self::Done) {
        let Some(id) = callback else {
            return;
        };
        let body = json!({
            "callback_query_id": id,
            "text": answer.unwrap_or_default(),
        });
        if let Err(e) = self
            .tg
            .bot
            .call::<Value>("answerCallbackQuery", &body, CALL_TIMEOUT)
            .await
        {
            tracing::info!(channel = "telegram", "answerCallbackQuery failed: {e}");
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::{TelegramConfig, TelegramMode};

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
