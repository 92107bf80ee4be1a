//! Feishu / Lark: the Open API adapter. Events arrive over the long connection (the
//! event WebSocket tether opens, no public URL needed: `longconn`) or at
//! `POST /hooks/feishu` (webhook mode: challenge, token, signature and decryption checked
//! there); either way `events` handles them. Messages go out as
//! text, approvals as interactive cards whose buttons come back as
//! `card.action.trigger` and whose content is updated when the approval resolves.
//! Sends carry the outbox key (hashed) as Feishu's `uuid`, so the platform itself
//! drops a repeated send within its idempotency window.

mod api;
pub mod crypto;
mod events;
mod frame;
pub mod longconn;
mod media;
pub(crate) mod webhook;
pub mod wire;

use std::sync::Arc;

use reqwest::Method;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tether_proto::Decision;

use crate::buttons::decision_name;
use crate::channel::{Address, Capabilities, Channel, FetchError, OutMessage, SendError};
use crate::config::{FeishuConfig, FeishuMode};
use crate::core::SharedCore;
use crate::inbound::InFile;

/// The channel's tasks, and its webhook route in webhook mode.
pub(crate) struct Started {
    pub tasks: Vec<tokio::task::JoinHandle<()>>,
    pub hook: Option<axum::Router>,
}

/// Longest text of one message tether sends (characters): Feishu accepts far more
/// (150 KB text, 30 KB cards), but results read better on a phone in parts, and the
/// card limit holds even for CJK text.
pub const MAX_TEXT: usize = 4000;

/// The Feishu adapter.
#[derive(Debug)]
pub struct Feishu {
    client: api::Client,
}

impl Feishu {
    pub fn new(cfg: &FeishuConfig) -> Result<Feishu, SendError> {
        Ok(Feishu {
            client: api::Client::new(&cfg.base_url, &cfg.app_id, &cfg.app_secret)?,
        })
    }
}

/// `tether doctor`: a tenant access token proves the app id and secret.
pub(crate) async fn check(cfg: &FeishuConfig) -> Result<String, String> {
    let client =
        api::Client::new(&cfg.base_url, &cfg.app_id, &cfg.app_secret).map_err(|e| e.to_string())?;
    client
        .token()
        .await
        .map_err(|e| crate::net::check_failed(e, "check `app_id` and `app_secret`"))?;
    Ok(format!("app {} has a tenant access token", cfg.app_id))
}

/// An interactive card (JSON 1.0 format) for a message with a title and buttons.
pub fn card(msg: &OutMessage) -> Value {
    let mut elements = vec![json!({
        "tag": "div",
        "text": {"tag": "plain_text", "content": msg.text},
    })];
    if !msg.actions.is_empty() {
        let buttons: Vec<Value> = msg
            .actions
            .iter()
            .map(|a| {
                json!({
                    "tag": "button",
                    "text": {"tag": "plain_text", "content": a.label},
                    "type": match a.decision {
                        Decision::Allow => "primary",
                        Decision::AllowAlways => "default",
                        Decision::Deny => "danger",
                    },
                    "value": {
                        "approval_id": a.approval_id,
                        "decision": decision_name(a.decision),
                    },
                })
            })
            .collect();
        elements.push(json!({"tag": "action", "actions": buttons}));
    }
    let title = msg.title.clone().unwrap_or_else(|| "tether".to_string());
    json!({
        "config": {"wide_screen_mode": true, "update_multi": true},
        "header": {
            "title": {"tag": "plain_text", "content": title},
            "template": if msg.actions.is_empty() { "grey" } else { "orange" },
        },
        "elements": elements,
    })
}

/// Feishu's `uuid` (at most 50 characters) for an outbox key.
fn idempotency_key(key: &str) -> String {
    crate::hex::encode(&Sha256::digest(key.as_bytes()))[..40].to_string()
}

fn content(msg: &OutMessage) -> (&'static str, String) {
    if msg.card {
        ("interactive", card(msg).to_string())
    } else {
        ("text", json!({ "text": msg.text }).to_string())
    }
}

#[async_trait::async_trait]
impl Channel for Feishu {
    fn name(&self) -> &'static str {
        "feishu"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            buttons: true,
            edit: true,
            cards: true,
            max_text_len: MAX_TEXT,
        }
    }

    async fn send(&self, to: &Address, msg: &OutMessage, key: &str) -> Result<String, SendError> {
        let (msg_type, content) = content(msg);
        let body = json!({
            "receive_id": to.chat_id,
            "msg_type": msg_type,
            "content": content,
            "uuid": idempotency_key(key),
        });
        let data = self
            .client
            .call(
                Method::POST,
                "/open-apis/im/v1/messages?receive_id_type=chat_id",
                &body,
            )
            .await?;
        data.message_id
            .ok_or_else(|| SendError::Permanent("send: no message_id in the reply".to_string()))
    }

    async fn edit(
        &self,
        _to: &Address,
        message_id: &str,
        msg: &OutMessage,
    ) -> Result<(), SendError> {
        let path = format!("/open-apis/im/v1/messages/{message_id}");
        let (msg_type, content) = content(msg);
        if msg.card {
            // Cards are updated in place (PATCH).
            self.client
                .call(Method::PATCH, &path, &json!({ "content": content }))
                .await?;
        } else {
            // Text messages are edited (PUT).
            self.client
                .call(
                    Method::PUT,
                    &path,
                    &json!({ "msg_type": msg_type, "content": content }),
                )
                .await?;
        }
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
        // Upload first (an image as an image, anything else as a file), then send the
        // message that shows it, with the outbox key as its idempotency key.
        let (msg_type, content) = if file.image {
            let data = self
                .client
                .upload(
                    "/open-apis/im/v1/images",
                    &[("image_type", "message".to_owned())],
                    ("image", &file.name, &bytes),
                )
                .await?;
            ("image", json!({"image_key": data.image_key}))
        } else {
            let data = self
                .client
                .upload(
                    "/open-apis/im/v1/files",
                    &[
                        ("file_type", "stream".to_owned()),
                        ("file_name", file.name.clone()),
                    ],
                    ("file", &file.name, &bytes),
                )
                .await?;
            ("file", json!({"file_key": data.file_key}))
        };
        let body = json!({
            "receive_id": to.chat_id,
            "msg_type": msg_type,
            "content": content.to_string(),
            "uuid": idempotency_key(key),
        });
        let data = self
            .client
            .call(
                Method::POST,
                "/open-apis/im/v1/messages?receive_id_type=chat_id",
                &body,
            )
            .await?;
        data.message_id
            .ok_or_else(|| SendError::Permanent("send: no message_id in the reply".to_string()))
    }

    async fn fetch(&self, file: &InFile, limit: u64) -> Result<Vec<u8>, FetchError> {
        let Some(path) = media::resource_path(&file.source) else {
            return Err(FetchError::Unavailable("not a Feishu resource".to_owned()));
        };
        self.client.download(&path, limit).await
    }
}

/// Starts the intake (replaying what a crash left unhandled) and, by mode, the webhook
/// route or the long connection.
pub(crate) fn start(core: SharedCore, cfg: &FeishuConfig) -> Started {
    let cfg = Arc::new(cfg.clone());
    let platform = events::Events { core: core.clone() };
    let (intake, lanes) = crate::intake::Intake::start(core, platform);
    let replay = {
        let intake = intake.clone();
        async move { intake.replay().await }
    };
    let mut tasks = vec![lanes, tokio::spawn(replay)];
    let hook = match (cfg.mode, cfg.verification_token.clone()) {
        (FeishuMode::Webhook, Some(token)) => Some(webhook::hook_routes(intake, cfg, token)),
        (FeishuMode::Webhook, None) => {
            // The config refuses this; without a token nothing could be checked.
            tracing::error!(
                channel = "feishu",
                "webhook mode without a verification token: no events"
            );
            None
        }
        (FeishuMode::LongConnection, _) => {
            tasks.push(longconn::start(intake, cfg));
            None
        }
    };
    Started { tasks, hook }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channel::Action;

    #[test]
    fn approval_cards_carry_one_button_per_option_naming_the_approval() {
        let mut msg = OutMessage::plain("rm -rf build");
        msg.title = Some("Approval needed".into());
        msg.card = true;
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
        let c = card(&msg);
        let buttons = c["elements"][1]["actions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(buttons.len(), 2);
        assert_eq!(
            buttons[1]["value"],
            json!({"approval_id": "a1", "decision": "deny"})
        );
        assert_eq!(c["config"]["update_multi"], true);
        let (kind, text) = content(&OutMessage::plain("hi"));
        assert_eq!((kind, text.as_str()), ("text", r#"{"text":"hi"}"#));
        assert_eq!(idempotency_key("k").len(), 40);
    }
}
