//! `[channels]`, `[channels.telegram]` and `[channels.feishu]` of the config file,
//! validated into [`tether_channels::ChannelsConfig`]. A channel is on when its section
//! is present.
//!
//! ```toml
//! [channels.telegram]
//! bot_token = "123:abc"
//! mode = "polling"            # or "webhook" (POST /hooks/telegram; needs webhook_secret)
//! webhook_secret = "..."
//! webhook_url = "https://example.org/hooks/telegram"  # optional: registered at start
//! allowed_users = [12345678]  # Telegram user ids; others get a pairing code
//! group_mode = "chat"         # or "user": one conversation per member of a group
//!
//! [channels.feishu]
//! app_id = "cli_..."
//! app_secret = "..."
//! mode = "long_connection"    # default without a verification_token: tether opens
//!                             # Feishu's event WebSocket, no public URL needed; or
//!                             # "webhook" (POST /hooks/feishu; the default with a token)
//! verification_token = "..."  # required for the webhook
//! encrypt_key = "..."         # optional: encrypted (and over HTTP signed) events
//! allowed_users = ["ou_..."]  # open_ids
//!
//! [channels.discord]
//! bot_token = "..."
//! application_id = "123..."
//! public_key = "hex..."       # needed for mode = "http"
//! mode = "gateway"            # or "http": button presses at POST /hooks/discord
//! allowed_users = ["123..."]  # Discord user ids; others get a pairing code
//! ```

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Result, bail};
use serde::Deserialize;
use tether_channels::{
    ChannelsConfig, DiscordConfig, DiscordMode, FeishuConfig, FeishuMode, GroupMode,
    TelegramConfig, TelegramMode, Tuning,
};

/// `[channels]`: the channels and delivery tuning.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelsFile {
    pub telegram: Option<TelegramFile>,
    pub feishu: Option<FeishuFile>,
    pub slack: Option<crate::config_slack::SlackFile>,
    pub discord: Option<DiscordFile>,
    /// At most one progress edit per turn per this many milliseconds (default 3000).
    pub progress_interval_ms: Option<u64>,
    /// First retry delay of a failed send (default 1000), doubled per attempt.
    pub retry_base_ms: Option<u64>,
    /// Longest retry delay (default 300000).
    pub retry_max_ms: Option<u64>,
    /// A message is given up after this many failed attempts (default 50).
    pub max_attempts: Option<u32>,
    /// How often the outbox is checked for rows written elsewhere (default 2000).
    pub idle_poll_ms: Option<u64>,
}

/// A user id written as a number or a string.
#[derive(Debug, Clone)]
pub enum UserId {
    Number(i64),
    Text(String),
}

/// By hand rather than `untagged`, whose error ("did not match any variant of untagged
/// enum UserId") names neither the key nor what is expected.
impl<'de> Deserialize<'de> for UserId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = UserId;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an `allowed_users` entry: a user id as a number or a string")
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> std::result::Result<UserId, E> {
                Ok(UserId::Number(n))
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> std::result::Result<UserId, E> {
                i64::try_from(n)
                    .map(UserId::Number)
                    .map_err(|_| E::invalid_value(serde::de::Unexpected::Unsigned(n), &self))
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> std::result::Result<UserId, E> {
                Ok(UserId::Text(s.to_owned()))
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl UserId {
    fn text(&self) -> String {
        match self {
            UserId::Number(n) => n.to_string(),
            UserId::Text(s) => s.trim().to_string(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelegramFile {
    pub bot_token: Option<String>,
    pub base_url: Option<String>,
    pub mode: Option<String>,
    pub webhook_secret: Option<String>,
    pub webhook_url: Option<String>,
    #[serde(default)]
    pub allowed_users: Vec<UserId>,
    pub group_mode: Option<String>,
    pub poll_timeout_secs: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeishuFile {
    pub app_id: Option<String>,
    pub app_secret: Option<String>,
    pub base_url: Option<String>,
    /// `long_connection` or `webhook`; by default `webhook` when a verification token is
    /// given, else `long_connection`.
    pub mode: Option<String>,
    pub verification_token: Option<String>,
    pub encrypt_key: Option<String>,
    #[serde(default)]
    pub allowed_users: Vec<UserId>,
    pub group_mode: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiscordFile {
    pub bot_token: Option<String>,
    pub application_id: Option<UserId>,
    pub public_key: Option<String>,
    pub api_base: Option<String>,
    pub mode: Option<String>,
    #[serde(default)]
    pub allowed_users: Vec<UserId>,
}

pub(crate) fn required(section: &str, key: &str, value: Option<String>) -> Result<String> {
    match value.map(|v| v.trim().to_string()) {
        Some(v) if !v.is_empty() => Ok(v),
        _ => bail!("[channels.{section}] needs `{key}`"),
    }
}

/// An optional URL key: absent gives `default`; present must be an http(s) URL.
pub(crate) fn http_url(
    section: &str,
    key: &str,
    value: Option<String>,
    default: &str,
) -> Result<String> {
    let Some(text) = value else {
        return Ok(default.to_owned());
    };
    let text = text.trim();
    match url::Url::parse(text) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host() => {
            Ok(text.to_owned())
        }
        Ok(url) => bail!(
            "[channels.{section}] {key} must be an http:// or https:// URL, not {:?}",
            url.as_str()
        ),
        Err(e) => bail!("[channels.{section}] {key} is not a URL ({e}): {text:?}"),
    }
}

pub(crate) fn group_mode(section: &str, value: Option<&str>) -> Result<GroupMode> {
    Ok(match value.unwrap_or("chat") {
        "chat" => GroupMode::Chat,
        "user" => GroupMode::User,
        other => {
            bail!("[channels.{section}] group_mode must be \"chat\" or \"user\", not {other:?}")
        }
    })
}

pub(crate) fn users(list: &[UserId]) -> BTreeSet<String> {
    list.iter()
        .map(UserId::text)
        .filter(|u| !u.is_empty())
        .collect()
}

fn telegram(f: TelegramFile) -> Result<TelegramConfig> {
    let mode = match f.mode.as_deref().unwrap_or("polling") {
        "polling" => TelegramMode::Polling,
        "webhook" => TelegramMode::Webhook,
        other => {
            bail!("[channels.telegram] mode must be \"polling\" or \"webhook\", not {other:?}")
        }
    };
    let webhook_secret = f.webhook_secret.filter(|s| !s.trim().is_empty());
    if mode == TelegramMode::Webhook && webhook_secret.is_none() {
        bail!("[channels.telegram] mode = \"webhook\" needs `webhook_secret`");
    }
    let poll_timeout = f.poll_timeout_secs.unwrap_or(30);
    if poll_timeout > 60 {
        bail!("[channels.telegram] poll_timeout_secs must be at most 60");
    }
    Ok(TelegramConfig {
        bot_token: required("telegram", "bot_token", f.bot_token)?,
        base_url: http_url(
            "telegram",
            "base_url",
            f.base_url,
            "https://api.telegram.org",
        )?,
        mode,
        webhook_secret,
        webhook_url: match f.webhook_url.filter(|u| !u.trim().is_empty()) {
            Some(u) => Some(http_url("telegram", "webhook_url", Some(u), "")?),
            None => None,
        },
        allowed_users: users(&f.allowed_users),
        group_mode: group_mode("telegram", f.group_mode.as_deref())?,
        poll_timeout: Duration::from_secs(poll_timeout),
    })
}

fn feishu(f: FeishuFile) -> Result<FeishuConfig> {
    let token = f
        .verification_token
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty());
    let mode = match f.mode.as_deref().map(str::trim) {
        Some("webhook") => FeishuMode::Webhook,
        Some("long_connection") => FeishuMode::LongConnection,
        Some(other) => {
            bail!(
                "[channels.feishu] mode must be \"long_connection\" or \"webhook\", not {other:?}"
            )
        }
        None if token.is_some() => FeishuMode::Webhook,
        None => FeishuMode::LongConnection,
    };
    if mode == FeishuMode::Webhook && token.is_none() {
        bail!(
            "[channels.feishu] needs `verification_token` in webhook mode (or leave out \
             `mode` to use the long connection, which needs no public URL)"
        );
    }
    Ok(FeishuConfig {
        app_id: required("feishu", "app_id", f.app_id)?,
        app_secret: required("feishu", "app_secret", f.app_secret)?,
        base_url: http_url("feishu", "base_url", f.base_url, "https://open.feishu.cn")?,
        mode,
        verification_token: token,
        encrypt_key: f.encrypt_key.filter(|k| !k.trim().is_empty()),
        allowed_users: users(&f.allowed_users),
        group_mode: group_mode("feishu", f.group_mode.as_deref())?,
    })
}

fn discord(f: DiscordFile) -> Result<DiscordConfig> {
    let mode = match f.mode.as_deref().unwrap_or("gateway") {
        "gateway" => DiscordMode::Gateway,
        "http" => DiscordMode::Http,
        other => bail!("[channels.discord] mode must be \"gateway\" or \"http\", not {other:?}"),
    };
    let public_key = f.public_key.filter(|k| !k.trim().is_empty());
    match &public_key {
        Some(k) => {
            if let Err(e) = tether_channels::discord::parse_public_key(k) {
                bail!("[channels.discord] public_key: {e}");
            }
        }
        None if mode == DiscordMode::Http => {
            bail!("[channels.discord] mode = \"http\" needs `public_key` (the app's public key)")
        }
        None => {}
    }
    Ok(DiscordConfig {
        bot_token: required("discord", "bot_token", f.bot_token)?,
        application_id: required(
            "discord",
            "application_id",
            f.application_id.as_ref().map(UserId::text),
        )?,
        public_key,
        api_base: http_url(
            "discord",
            "api_base",
            f.api_base,
            "https://discord.com/api/v10",
        )?,
        mode,
        allowed_users: users(&f.allowed_users),
    })
}

/// Validates `[channels]` (absent: no channel runs).
pub fn resolve(file: Option<ChannelsFile>) -> Result<ChannelsConfig> {
    let Some(f) = file else {
        return Ok(ChannelsConfig::default());
    };
    let d = Tuning::default();
    let ms = |v: Option<u64>, default: Duration| v.map_or(default, Duration::from_millis);
    let tuning = Tuning {
        progress_interval: ms(f.progress_interval_ms, d.progress_interval),
        retry_base: ms(f.retry_base_ms, d.retry_base),
        retry_max: ms(f.retry_max_ms, d.retry_max),
        max_attempts: f.max_attempts.unwrap_or(d.max_attempts),
        idle_poll: ms(f.idle_poll_ms, d.idle_poll),
    };
    if tuning.max_attempts == 0 {
        bail!("[channels] max_attempts must be at least 1 (0 would never send anything)");
    }
    if tuning.progress_interval.is_zero() || tuning.idle_poll.is_zero() {
        bail!("[channels] progress_interval_ms and idle_poll_ms must be greater than 0");
    }
    Ok(ChannelsConfig {
        telegram: f.telegram.map(telegram).transpose()?,
        feishu: f.feishu.map(feishu).transpose()?,
        slack: f.slack.map(crate::config_slack::slack).transpose()?,
        discord: f.discord.map(discord).transpose()?,
        tuning,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ChannelsConfig> {
        #[derive(Deserialize)]
        struct Wrap {
            channels: Option<ChannelsFile>,
        }
        let w: Wrap = toml::from_str(text)?;
        resolve(w.channels)
    }

    #[test]
    fn channels_are_off_by_default_and_validated() {
        let c = parse("").unwrap();
        assert!(c.telegram.is_none() && c.feishu.is_none());
        let c = parse(
            "[channels]\nretry_base_ms = 50\n[channels.telegram]\nbot_token = \"1:x\"\n\
             allowed_users = [42, \"43\"]\ngroup_mode = \"user\"\n",
        )
        .unwrap();
        let t = c.telegram.unwrap();
        assert_eq!(t.mode, TelegramMode::Polling);
        assert_eq!(t.base_url, "https://api.telegram.org");
        assert_eq!(
            t.allowed_users.into_iter().collect::<Vec<_>>(),
            ["42", "43"]
        );
        assert_eq!(t.group_mode, GroupMode::User);
        assert_eq!(c.tuning.retry_base, Duration::from_millis(50));

        let err = |text: &str| parse(text).unwrap_err().to_string();
        assert!(err("[channels.telegram]\n").contains("bot_token"));
        assert!(
            err("[channels.telegram]\nbot_token = \"x\"\nmode = \"webhook\"\n")
                .contains("webhook_secret")
        );
        assert!(
            err("[channels.telegram]\nbot_token = \"x\"\nmode = \"push\"\n").contains("polling")
        );
        assert!(
            err("[channels.feishu]\napp_id = \"a\"\napp_secret = \"b\"\nmode = \"webhook\"\n")
                .contains("verification_token")
        );
        assert!(
            err("[channels.feishu]\napp_id = \"a\"\napp_secret = \"b\"\nmode = \"push\"\n")
                .contains("long_connection")
        );
        let lc = parse("[channels.feishu]\napp_id = \"a\"\napp_secret = \"b\"\n")
            .unwrap()
            .feishu
            .unwrap();
        assert_eq!(lc.mode, FeishuMode::LongConnection);
        assert!(lc.verification_token.is_none());
        assert!(err("[channels.telegram]\nbot_token = \"x\"\ntypo = 1\n").contains("typo"));
        let f = parse(
            "[channels.feishu]\napp_id = \"a\"\napp_secret = \"b\"\nverification_token = \"v\"\n\
             encrypt_key = \"\"\n",
        )
        .unwrap()
        .feishu
        .unwrap();
        assert!(f.encrypt_key.is_none());
        assert_eq!(f.mode, FeishuMode::Webhook);
        assert_eq!(f.base_url, "https://open.feishu.cn");
        let dc = "[channels.discord]\nbot_token = \"t\"\napplication_id = 42\n";
        let d = parse(dc).unwrap().discord.unwrap();
        assert_eq!(d.mode, DiscordMode::Gateway);
        assert_eq!(d.application_id, "42");
        assert_eq!(d.api_base, "https://discord.com/api/v10");
        assert!(err(&format!("{dc}mode = \"http\"\n")).contains("public_key"));
        assert!(err(&format!("{dc}public_key = \"zz\"\n")).contains("public_key"));
        assert!(err("[channels.discord]\napplication_id = 1\n").contains("bot_token"));
    }

    #[test]
    fn bad_values_name_their_key() {
        let err = |text: &str| format!("{:#}", parse(text).unwrap_err());
        let tg = "[channels.telegram]\nbot_token = \"x\"\n";
        let e = err(&format!("{tg}allowed_users = [1.5]\n"));
        assert!(
            e.contains("allowed_users") && !e.contains("untagged"),
            "{e}"
        );
        let e = err(&format!("[channels]\nmax_attempts = 0\n{tg}"));
        assert!(e.contains("max_attempts"), "{e}");
        for url in ["banana", "ftp://x.org", "file:///etc"] {
            let e = err(&format!("{tg}base_url = {url:?}\n"));
            assert!(e.contains("[channels.telegram] base_url"), "{e}");
        }
        let e = err(&format!(
            "{tg}mode = \"webhook\"\nwebhook_secret = \"s\"\nwebhook_url = \"x\"\n"
        ));
        assert!(e.contains("webhook_url"), "{e}");
        let ok = parse(&format!("{tg}base_url = \"http://127.0.0.1:9/\"\n"))
            .unwrap()
            .telegram
            .unwrap();
        assert_eq!(ok.base_url, "http://127.0.0.1:9/");
    }
}
