//! `[channels.slack]` of the config file, validated into
//! [`tether_channels::SlackConfig`]. The channel is on when the section is present.
//!
//! ```toml
//! [channels.slack]
//! bot_token = "xoxb-..."
//! mode = "socket"             # default: Socket Mode, needs app_token (no public URL)
//! app_token = "xapp-..."      # app-level token with connections:write
//! # mode = "events"           # the Events API at POST /hooks/slack, needs signing_secret
//! signing_secret = "..."
//! allowed_users = ["U012AB3CD"]  # Slack user ids; others get a pairing code
//! group_mode = "chat"         # or "user": one conversation per member in a thread
//! ```

use anyhow::{Result, bail};
use serde::Deserialize;
use tether_channels::{SlackConfig, SlackMode};

use crate::config_channels::{UserId, group_mode, http_url, required, users};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlackFile {
    pub bot_token: Option<String>,
    pub app_token: Option<String>,
    pub signing_secret: Option<String>,
    pub base_url: Option<String>,
    pub mode: Option<String>,
    #[serde(default)]
    pub allowed_users: Vec<UserId>,
    pub group_mode: Option<String>,
}

fn nonempty(v: Option<String>) -> Option<String> {
    v.map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

pub fn slack(f: SlackFile) -> Result<SlackConfig> {
    let mode = match f.mode.as_deref().unwrap_or("socket") {
        "socket" => SlackMode::Socket,
        "events" => SlackMode::Events,
        other => bail!("[channels.slack] mode must be \"socket\" or \"events\", not {other:?}"),
    };
    let app_token = nonempty(f.app_token);
    let signing_secret = nonempty(f.signing_secret);
    if mode == SlackMode::Socket && app_token.is_none() {
        bail!("[channels.slack] mode = \"socket\" needs `app_token` (an xapp- app-level token)");
    }
    if mode == SlackMode::Events && signing_secret.is_none() {
        bail!("[channels.slack] mode = \"events\" needs `signing_secret`");
    }
    Ok(SlackConfig {
        bot_token: required("slack", "bot_token", f.bot_token)?,
        app_token,
        signing_secret,
        base_url: http_url("slack", "base_url", f.base_url, "https://slack.com/api")?,
        mode,
        allowed_users: users(&f.allowed_users),
        group_mode: group_mode("slack", f.group_mode.as_deref())?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<SlackConfig> {
        slack(toml::from_str(text)?)
    }

    #[test]
    fn slack_defaults_to_socket_mode_and_names_what_a_mode_needs() {
        let c = parse("bot_token = \"xoxb-1\"\napp_token = \"xapp-1\"\nallowed_users = [\"U1\"]\n")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.mode, SlackMode::Socket);
        assert_eq!(c.base_url, "https://slack.com/api");
        assert!(c.allowed_users.contains("U1"));
        let err = |t: &str| parse(t).map(|_| ()).unwrap_err().to_string();
        assert!(err("bot_token = \"x\"\n").contains("app_token"));
        assert!(err("bot_token = \"x\"\nmode = \"events\"\n").contains("signing_secret"));
        assert!(err("app_token = \"x\"\n").contains("bot_token"));
        assert!(err("bot_token = \"x\"\nmode = \"rtm\"\n").contains("socket"));
    }
}
