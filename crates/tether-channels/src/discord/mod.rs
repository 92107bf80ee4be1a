//! Discord: the Gateway (WebSocket) for messages and button presses, the REST API for
//! sending, a thread per conversation in server channels, and the HTTP interactions
//! endpoint (`POST /hooks/discord`, Ed25519-signed) as the other way button presses can
//! arrive. Messages go out with mentions disabled and carry a `nonce` derived from the
//! outbox key (`enforce_nonce`), so Discord itself drops a repeated send; approvals carry
//! buttons (message components) whose `custom_id` names the approval.

mod events;
mod gateway;
pub(crate) mod interactions;
mod rest;
pub mod wire;

use std::sync::{Arc, RwLock};

use reqwest::Method;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tether_proto::Decision;

use crate::channel::{Address, Capabilities, Channel, FetchError, OutMessage, SendError, TextKind};
use crate::config::{DiscordConfig, DiscordMode};
use crate::core::SharedCore;
use crate::inbound::InFile;

pub use interactions::parse_public_key;

/// Discord's limit on a message's content (characters).
pub const MAX_TEXT: usize = 2000;

/// The Gateway intents tether asks for: guilds (threads), server and direct messages,
/// and message content (privileged: enable "Message Content Intent" for the bot).
pub const INTENTS: u64 = (1 << 0) | (1 << 9) | (1 << 12) | (1 << 15);

/// The Discord adapter.
pub struct Discord {
    rest: rest::Rest,
    /// The bot's own user id (from `READY`), to recognise mentions of it.
    bot_id: RwLock<Option<String>>,
    token: String,
}

impl std::fmt::Debug for Discord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Discord")
            .field("rest", &self.rest)
            .finish_non_exhaustive()
    }
}

impl Discord {
    pub fn new(cfg: &DiscordConfig) -> Result<Discord, SendError> {
        Ok(Discord {
            rest: rest::Rest::new(&cfg.api_base, &cfg.bot_token)?,
            bot_id: RwLock::new(None),
            token: cfg.bot_token.clone(),
        })
    }

    pub(crate) fn bot_id(&self) -> Option<String> {
        self.bot_id
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(crate) fn set_bot_id(&self, id: &str) {
        *self.bot_id.write().unwrap_or_else(|e| e.into_inner()) = Some(id.to_string());
    }

    fn body(msg: &OutMessage) -> Value {
        let text = match msg.kind {
            TextKind::Plain => escape(&msg.text),
            TextKind::Markdown => msg.text.clone(),
        };
        let text = match &msg.title {
            Some(t) => format!("**{}**\n{text}", escape(t)),
            None => text,
        };
        json!({
            "content": clip(&text),
            // Agent output never pings anyone (no @everyone, no role or user mentions).
            "allowed_mentions": {"parse": []},
            "components": components(msg),
        })
    }
}

/// One action row of buttons (none: an empty list, which removes buttons on an edit).
fn components(msg: &OutMessage) -> Value {
    if msg.actions.is_empty() {
        return json!([]);
    }
    let buttons: Vec<Value> = msg
        .actions
        .iter()
        .filter_map(|a| {
            // The `custom_id`: the callback data (at most 100 characters).
            let id = crate::buttons::callback_data(&a.approval_id, a.decision);
            (id.len() <= 100).then(|| {
                json!({
                    "type": 2,
                    "style": match a.decision {
                        Decision::Allow => 3,
                        Decision::AllowAlways => 1,
                        Decision::Deny => 4,
                    },
                    "label": a.label,
                    "custom_id": id,
                })
            })
        })
        .take(5)
        .collect();
    json!([{ "type": 1, "components": buttons }])
}

/// Plain text shown literally: Discord's Markdown characters escaped.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(
            c,
            '\\' | '*' | '_' | '~' | '`' | '|' | '>' | '#' | '-' | '[' | ']' | '(' | ')' | '<'
        ) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// At most [`MAX_TEXT`] characters (escaping can lengthen a text the renderer fitted).
fn clip(text: &str) -> String {
    if text.chars().count() <= MAX_TEXT {
        return text.to_string();
    }
    let mut out: String = text.chars().take(MAX_TEXT - 1).collect();
    // Never end on a lone escape.
    if out.ends_with('\\') {
        out.pop();
    }
    out.push('…');
    out
}

/// Discord's `nonce` (at most 25 characters) for an outbox key.
fn nonce(key: &str) -> String {
    crate::hex::encode(&Sha256::digest(key.as_bytes()))[..25].to_string()
}

/// Where a message to `to` goes: the DM channel or the conversation's thread.
fn channel_of(to: &Address) -> &str {
    to.thread_id.as_deref().unwrap_or(&to.chat_id)
}

#[async_trait::async_trait]
impl Channel for Discord {
    fn name(&self) -> &'static str {
        "discord"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            buttons: true,
            edit: true,
            cards: false,
            max_text_len: MAX_TEXT,
        }
    }

    async fn send(&self, to: &Address, msg: &OutMessage, key: &str) -> Result<String, SendError> {
        let mut body = Self::body(msg);
        body["nonce"] = json!(nonce(key));
        body["enforce_nonce"] = json!(true);
        let path = format!("/channels/{}/messages", channel_of(to));
        let sent = self.rest.call(Method::POST, &path, Some(&body)).await?;
        sent.id
            .ok_or_else(|| SendError::Permanent("send: no id in the reply".to_string()))
    }

    async fn edit(
        &self,
        to: &Address,
        message_id: &str,
        msg: &OutMessage,
    ) -> Result<(), SendError> {
        let path = format!("/channels/{}/messages/{message_id}", channel_of(to));
        self.rest
            .call(Method::PATCH, &path, Some(&Self::body(msg)))
            .await?;
        Ok(())
    }

    async fn send_file(
        &self,
        to: &Address,
        msg: &OutMessage,
        bytes: Vec<u8>,
        key: &str,
    ) -> Result<String, SendError> {
        let Some(file) = &msg.file else {
            return Err(SendError::Permanent("no file to send".to_owned()));
        };
        let mut payload = Self::body(msg);
        payload["nonce"] = json!(nonce(key));
        payload["enforce_nonce"] = json!(true);
        payload["attachments"] = json!([{"id": 0, "filename": file.name}]);
        let (content_type, body) = crate::multipart::form(
            &[("payload_json", payload.to_string())],
            "files[0]",
            &file.name,
            &bytes,
        );
        let path = format!("/channels/{}/messages", channel_of(to));
        let sent = self.rest.upload(&path, content_type, body).await?;
        sent.id
            .ok_or_else(|| SendError::Permanent("send: no id in the reply".to_string()))
    }

    async fn fetch(&self, file: &InFile, limit: u64) -> Result<Vec<u8>, FetchError> {
        if let Some(size) = file.size
            && size > limit
        {
            return Err(FetchError::TooLarge { size, limit });
        }
        self.rest
            .download(&file.source, limit)
            .await
            .map_err(FetchError::Unavailable)
    }
}

/// Checks the bot token (`GET /users/@me`): the bot's name, or why it failed.
pub async fn check_credentials(cfg: &DiscordConfig) -> Result<String, String> {
    let rest = rest::Rest::new(&cfg.api_base, &cfg.bot_token).map_err(|e| e.to_string())?;
    let me = rest
        .call(Method::GET, "/users/@me", None)
        .await
        .map_err(|e| crate::net::check_failed(e, "check `bot_token`"))?;
    Ok(format!(
        "{} (id {})",
        me.username.as_deref().unwrap_or("?"),
        me.id.as_deref().unwrap_or("?")
    ))
}

/// Starts the Gateway and its worker (on the channel's leader).
pub(crate) fn start(core: SharedCore, dc: Arc<Discord>) -> Vec<tokio::task::JoinHandle<()>> {
    events::start(core, dc)
}

/// The interactions route in HTTP mode (on every node).
pub(crate) fn interaction_routes(
    core: SharedCore,
    dc: Arc<Discord>,
    cfg: &DiscordConfig,
) -> Option<axum::Router> {
    (cfg.mode == DiscordMode::Http).then(|| interactions::routes(core, dc, Arc::new(cfg.clone())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channel::Action;

    #[test]
    fn approvals_carry_one_button_per_option_and_plain_text_is_escaped() {
        let mut msg = OutMessage::plain("rm -rf *build*");
        msg.actions = vec![
            Action {
                label: "Allow".into(),
                approval_id: "a1".into(),
                decision: Decision::Allow,
            },
            Action {
                label: "Deny".into(),
                approval_id: "a1".into(),
                decision: Decision::Deny,
            },
        ];
        let b = Discord::body(&msg);
        assert_eq!(b["content"], "rm \\-rf \\*build\\*");
        let buttons = &b["components"][0]["components"];
        assert_eq!(buttons[1]["custom_id"], "a:a1:n");
        assert_eq!(buttons[1]["style"], 4);
        assert_eq!(b["allowed_mentions"], json!({"parse": []}));
        assert_eq!(
            Discord::body(&OutMessage::plain("x"))["components"],
            json!([])
        );
        assert_eq!(nonce("k").len(), 25);
        let long = "*".repeat(1500);
        let clipped = clip(&escape(&long));
        assert!(clipped.chars().count() <= MAX_TEXT);
        assert!(
            clipped.ends_with("*…"),
            "no lone escape before the ellipsis"
        );
    }
}
