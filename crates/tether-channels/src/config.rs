//! Resolved channel settings (the binary reads them from `[channels.*]` in its config).

use std::collections::BTreeSet;
use std::time::Duration;

/// Who gets one conversation in a group chat.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum GroupMode {
    /// The whole chat (or forum topic) shares one conversation.
    #[default]
    Chat,
    /// Each member of a group gets their own conversation.
    User,
}

/// How Telegram updates arrive.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TelegramMode {
    /// `getUpdates` long polling.
    #[default]
    Polling,
    /// `POST /hooks/telegram`, checked against the secret token header.
    Webhook,
}

#[derive(Clone)]
pub struct TelegramConfig {
    pub bot_token: String,
    /// Bot API base, e.g. `https://api.telegram.org` (the bot path is appended).
    pub base_url: String,
    pub mode: TelegramMode,
    /// Required in webhook mode; checked against `X-Telegram-Bot-Api-Secret-Token`.
    pub webhook_secret: Option<String>,
    /// Webhook mode: the public URL of `/hooks/telegram`, registered with `setWebhook`
    /// at start (with the secret); unset: the operator registers it.
    pub webhook_url: Option<String>,
    /// Numeric Telegram user ids allowed without pairing.
    pub allowed_users: BTreeSet<String>,
    pub group_mode: GroupMode,
    /// `getUpdates` long-poll timeout.
    pub poll_timeout: Duration,
}

impl std::fmt::Debug for TelegramConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TelegramConfig")
            .field("base_url", &self.base_url)
            .field("mode", &self.mode)
            .field("allowed_users", &self.allowed_users)
            .field("group_mode", &self.group_mode)
            .finish_non_exhaustive()
    }
}

/// How Feishu events reach tether.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeishuMode {
    /// Feishu POSTs them to `/hooks/feishu` (needs a public URL).
    Webhook,
    /// tether opens Feishu's event WebSocket (the "long connection" of Feishu's SDKs):
    /// no public URL needed.
    LongConnection,
}

#[derive(Clone)]
pub struct FeishuConfig {
    pub app_id: String,
    pub app_secret: String,
    /// Open API base, e.g. `https://open.feishu.cn` (Lark: `https://open.larksuite.com`).
    pub base_url: String,
    /// How events arrive.
    pub mode: FeishuMode,
    /// Checked against the token in every event (required for the webhook; on the long
    /// connection, checked when set).
    pub verification_token: Option<String>,
    /// When set, events arrive AES-256-CBC encrypted (and, over HTTP, signed with
    /// `X-Lark-Signature`).
    pub encrypt_key: Option<String>,
    /// Feishu `open_id`s allowed without pairing.
    pub allowed_users: BTreeSet<String>,
    pub group_mode: GroupMode,
}

impl std::fmt::Debug for FeishuConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FeishuConfig")
            .field("app_id", &self.app_id)
            .field("base_url", &self.base_url)
            .field("mode", &self.mode)
            .field("encrypted", &self.encrypt_key.is_some())
            .field("allowed_users", &self.allowed_users)
            .field("group_mode", &self.group_mode)
            .finish_non_exhaustive()
    }
}

/// How Slack events reach tether.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SlackMode {
    /// Socket Mode: a WebSocket tether opens with the app-level token (no public URL).
    #[default]
    Socket,
    /// The Events API: Slack POSTs to `/hooks/slack`, signed with the signing secret.
    Events,
}

#[derive(Clone)]
pub struct SlackConfig {
    /// The bot token (`xoxb-…`) for the Web API.
    pub bot_token: String,
    /// The app-level token (`xapp-…`, scope `connections:write`): Socket Mode.
    pub app_token: Option<String>,
    /// The signing secret: checks every request to `/hooks/slack` (Events API mode).
    pub signing_secret: Option<String>,
    /// Web API base, e.g. `https://slack.com/api` (the method name is appended).
    pub base_url: String,
    pub mode: SlackMode,
    /// Slack user ids (`U…`) allowed without pairing.
    pub allowed_users: BTreeSet<String>,
    pub group_mode: GroupMode,
}

impl std::fmt::Debug for SlackConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlackConfig")
            .field("base_url", &self.base_url)
            .field("mode", &self.mode)
            .field("allowed_users", &self.allowed_users)
            .field("group_mode", &self.group_mode)
            .finish_non_exhaustive()
    }
}

/// How Discord button presses (interactions) arrive. Messages always come over the
/// Gateway.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DiscordMode {
    /// `INTERACTION_CREATE` over the Gateway WebSocket (no public URL needed).
    #[default]
    Gateway,
    /// `POST /hooks/discord` (the app's Interactions Endpoint URL), checked with the
    /// app's Ed25519 public key.
    Http,
}

#[derive(Clone)]
pub struct DiscordConfig {
    pub bot_token: String,
    /// The application id (shown by the doctor; interactions carry it).
    pub application_id: String,
    /// The app's Ed25519 public key (hex): required in HTTP mode.
    pub public_key: Option<String>,
    /// REST base, e.g. `https://discord.com/api/v10`.
    pub api_base: String,
    pub mode: DiscordMode,
    /// Discord user ids (snowflakes) allowed without pairing.
    pub allowed_users: BTreeSet<String>,
}

impl std::fmt::Debug for DiscordConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiscordConfig")
            .field("application_id", &self.application_id)
            .field("api_base", &self.api_base)
            .field("mode", &self.mode)
            .field("allowed_users", &self.allowed_users)
            .finish_non_exhaustive()
    }
}

/// Delivery tuning shared by the channels.
#[derive(Debug, Clone, Copy)]
pub struct Tuning {
    /// At most one progress edit per turn per this interval.
    pub progress_interval: Duration,
    /// First retry delay; doubled per attempt up to `retry_max`.
    pub retry_base: Duration,
    pub retry_max: Duration,
    /// A row is given up after this many failed attempts.
    pub max_attempts: u32,
    /// How often the dispatcher looks for rows written by another process (`tether pair`).
    pub idle_poll: Duration,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            progress_interval: Duration::from_secs(3),
            retry_base: Duration::from_secs(1),
            retry_max: Duration::from_secs(300),
            max_attempts: 50,
            idle_poll: Duration::from_secs(2),
        }
    }
}

/// Everything the channels need; a channel is off when its section is absent.
#[derive(Debug, Clone, Default)]
pub struct ChannelsConfig {
    pub telegram: Option<TelegramConfig>,
    pub feishu: Option<FeishuConfig>,
    pub slack: Option<SlackConfig>,
    pub discord: Option<DiscordConfig>,
    pub tuning: Tuning,
}
