//! Credential checks for `tether doctor`: one harmless call per configured channel that
//! proves its credentials work, sending nothing to anyone (Telegram `getMe`; Feishu a
//! tenant token and, on the long connection, the socket's endpoint; Slack `auth.test` and,
//! in Socket Mode, `apps.connections.open` for the app-level token; Discord `GET /users/@me`).

use std::time::Duration;

use crate::config::{ChannelsConfig, FeishuMode};

/// Each check is given at most this long.
const CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// What one channel's check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialCheck {
    pub channel: &'static str,
    /// What was proven (`Ok`) or why it failed (`Err`).
    pub result: Result<String, String>,
}

/// Checks every configured channel, at once.
pub async fn check_credentials(cfg: &ChannelsConfig) -> Vec<CredentialCheck> {
    let telegram = async {
        match &cfg.telegram {
            Some(tc) => Some(CredentialCheck {
                channel: "telegram",
                result: bounded(crate::telegram::check(tc)).await,
            }),
            None => None,
        }
    };
    let feishu = async {
        match &cfg.feishu {
            Some(fc) => Some(CredentialCheck {
                channel: "feishu",
                result: bounded(feishu(fc)).await,
            }),
            None => None,
        }
    };
    let slack = async {
        match &cfg.slack {
            Some(sc) => Some(CredentialCheck {
                channel: "slack",
                result: bounded(crate::slack::check(sc)).await,
            }),
            None => None,
        }
    };
    let discord = async {
        match &cfg.discord {
            Some(dc) => Some(CredentialCheck {
                channel: "discord",
                result: bounded(async {
                    let me = crate::discord::check_credentials(dc).await?;
                    Ok(format!(
                        "signed in as {me} (application {}, {:?} mode)",
                        dc.application_id, dc.mode
                    ))
                })
                .await,
            }),
            None => None,
        }
    };
    let (t, f, s, d) = tokio::join!(telegram, feishu, slack, discord);
    [t, f, s, d].into_iter().flatten().collect()
}

async fn bounded(
    check: impl std::future::Future<Output = Result<String, String>>,
) -> Result<String, String> {
    tokio::time::timeout(CHECK_TIMEOUT, check)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {}s", CHECK_TIMEOUT.as_secs())))
}

async fn feishu(fc: &crate::config::FeishuConfig) -> Result<String, String> {
    let ok = crate::feishu::check(fc).await?;
    match fc.mode {
        FeishuMode::Webhook => Ok(format!("{ok}; webhook mode (POST /hooks/feishu)")),
        FeishuMode::LongConnection => {
            crate::feishu::longconn::endpoint(&reqwest::Client::new(), fc)
                .await
                .map_err(|e| format!("{ok}, but the long connection: {e}"))?;
            Ok(format!("{ok}; long connection endpoint answered"))
        }
    }
}
