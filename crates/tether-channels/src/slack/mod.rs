//! Slack: the Web API adapter. Events arrive over Socket Mode (default: a WebSocket
//! tether opens with the app-level token, so no public URL is needed) or the Events API
//! (`POST /hooks/slack`, signed with the signing secret); both feed the same intake,
//! which deduplicates by event id and by message (`channel:ts`). A DM is one
//! conversation; in a channel each thread started by mentioning the app is one, and
//! tether replies in that thread. Messages go out as Block Kit (a section of mrkdwn or
//! plain text; approvals with buttons naming the approval), edited with `chat.update`.
//! Slack has no idempotency key for `chat.postMessage`, so (as with Telegram) a send
//! interrupted between Slack's answer and the outbox commit is sent again.

mod api;
pub mod blocks;
pub mod events;
pub mod files;
mod intake;
mod socket;
pub(crate) mod webhook;
pub mod wire;

use std::sync::{Arc, OnceLock};

use serde_json::json;

use crate::channel::{Address, Capabilities, Channel, FetchError, OutMessage, SendError};
use crate::config::{SlackConfig, SlackMode};
use crate::core::SharedCore;
use crate::inbound::InFile;

pub use api::Identity;

/// The Slack adapter.
#[derive(Debug)]
pub struct Slack {
    client: api::Client,
    /// The bot (from `auth.test` at start): its mentions are recognised and removed.
    identity: OnceLock<Identity>,
}

impl Slack {
    pub fn new(cfg: &SlackConfig) -> Result<Slack, SendError> {
        Ok(Slack {
            client: api::Client::new(&cfg.base_url, &cfg.bot_token)?,
            identity: OnceLock::new(),
        })
    }

    /// The bot's own user id, once `auth.test` answered.
    pub fn bot_user(&self) -> Option<&str> {
        self.identity.get().map(|i| i.user_id.as_str())
    }

    /// A message only `user` sees (the answer to a button press).
    pub async fn ephemeral(
        &self,
        channel: &str,
        user: &str,
        thread: Option<&str>,
        text: &str,
    ) -> Result<(), SendError> {
        let mut body = json!({
            "channel": channel,
            "user": user,
            "text": blocks::escape(text),
        });
        if let Some(t) = thread {
            body["thread_ts"] = json!(t);
        }
        self.client.call("chat.postEphemeral", &body).await?;
        Ok(())
    }

    /// Posts a message outside the outbox (the anchor of a thread a slash command
    /// starts, which must exist before its conversation does); returns its `ts`.
    async fn post_now(&self, channel: &str, text: &str) -> Result<String, SendError> {
        let reply = self
            .client
            .call(
                "chat.postMessage",
                &json!({"channel": channel, "text": text}),
            )
            .await?;
        ts_of(reply)
    }
}

fn ts_of(reply: wire::Reply) -> Result<String, SendError> {
    reply
        .ts
        .ok_or_else(|| SendError::Permanent("chat.postMessage: no ts in the reply".to_string()))
}

#[async_trait::async_trait]
impl Channel for Slack {
    fn name(&self) -> &'static str {
        "slack"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            buttons: true,
            edit: true,
            cards: true,
            max_text_len: blocks::MAX_TEXT,
        }
    }

    async fn send(&self, to: &Address, msg: &OutMessage, _key: &str) -> Result<String, SendError> {
        let (text, blocks) = blocks::body(msg);
        let mut body = json!({
            "channel": to.chat_id,
            "text": text,
            "blocks": blocks,
            "unfurl_links": false,
            "unfurl_media": false,
        });
        if let Some(t) = &to.thread_id {
            body["thread_ts"] = json!(t);
        }
        let reply = self.client.call("chat.postMessage", &body).await?;
        ts_of(reply)
    }

    async fn edit(
        &self,
        to: &Address,
        message_id: &str,
        msg: &OutMessage,
    ) -> Result<(), SendError> {
        let (text, blocks) = blocks::body(msg);
        let body = json!({
            "channel": to.chat_id,
            "ts": message_id,
            "text": text,
            "blocks": blocks,
        });
        self.client.call("chat.update", &body).await?;
        Ok(())
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
        // The caption is the file name: the file shows it already.
        let comment = if msg.text == file.name {
            ""
        } else {
            msg.text.as_str()
        };
        self.client.upload(to, &file.name, comment, bytes).await
    }

    async fn fetch(&self, file: &InFile, limit: u64) -> Result<Vec<u8>, FetchError> {
        self.client.download(file, limit).await
    }
}

/// `tether doctor`: checks the bot token (`auth.test`) and, in Socket Mode, the
/// app-level token (`apps.connections.open`, which hands out a URL without connecting).
pub async fn check(cfg: &SlackConfig) -> Result<String, String> {
    let client = api::Client::new(&cfg.base_url, &cfg.bot_token).map_err(|e| e.to_string())?;
    let who = client.auth_test().await.map_err(|e| {
        format!(
            "bot token: {}",
            crate::net::check_failed(e, "check `bot_token`")
        )
    })?;
    let mode = match cfg.mode {
        SlackMode::Socket => {
            let app = cfg.app_token.as_deref().unwrap_or_default();
            client.connections_open(app).await.map_err(|e| {
                format!(
                    "app-level token: {}",
                    crate::net::check_failed(e, "check `app_token`")
                )
            })?;
            "Socket Mode, app-level token accepted"
        }
        SlackMode::Events => "Events API at POST /hooks/slack",
    };
    Ok(format!("bot {} in team {} ({mode})", who.user_id, who.team))
}

/// The intake's tasks and, in Events API mode, the webhook route.
pub(crate) struct Started {
    pub tasks: Vec<tokio::task::JoinHandle<()>>,
    pub hook: Option<axum::Router>,
}

/// Learns the bot's identity, then starts Socket Mode or returns the webhook route.
pub(crate) fn start(core: SharedCore, slack: Arc<Slack>, cfg: &SlackConfig) -> Started {
    let platform = intake::Deliveries {
        core: core.clone(),
        slack: slack.clone(),
    };
    let (intake, lanes) = crate::intake::Intake::start(core, platform);
    let mut tasks = vec![lanes];
    let identify = {
        let slack = slack.clone();
        async move { identify(&slack).await }
    };
    match cfg.mode {
        SlackMode::Socket => {
            let app_token = cfg.app_token.clone().unwrap_or_default();
            tasks.push(tokio::spawn(async move {
                identify.await;
                intake.replay().await;
                socket::run(intake, slack, app_token).await;
            }));
            Started { tasks, hook: None }
        }
        SlackMode::Events => {
            let secret = cfg.signing_secret.clone().unwrap_or_default();
            let hook = webhook::routes(intake.clone(), secret);
            tasks.push(tokio::spawn(async move {
                identify.await;
                intake.replay().await;
            }));
            Started {
                tasks,
                hook: Some(hook),
            }
        }
    }
}

/// `auth.test` until it answers (the bot's user id tells its mentions apart).
async fn identify(slack: &Slack) {
    let mut wait = std::time::Duration::from_millis(500);
    loop {
        match slack.client.auth_test().await {
            Ok(who) => {
                tracing::info!(
                    channel = "slack",
                    bot = who.user_id,
                    team = who.team,
                    "slack bot identified"
                );
                let _ = slack.identity.set(who);
                return;
            }
            Err(SendError::Permanent(e)) => {
                tracing::error!(channel = "slack", "auth.test refused the bot token: {e}");
            }
            Err(e) => tracing::warn!(channel = "slack", "auth.test failed: {e}"),
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(std::time::Duration::from_secs(60));
    }
}
