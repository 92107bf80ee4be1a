//! The Slack Web API calls tether uses, over plain reqwest: `auth.test`,
//! `apps.connections.open` (with the app-level token), `chat.postMessage`, `chat.update`
//! and `chat.postEphemeral`. Replies are `{ok, error, ...}`; failures are classified for
//! the outbox: HTTP 429 (with `Retry-After`), `ratelimited`, 5xx and Slack's transient
//! errors are retried, anything else is permanent.

use std::time::Duration;

use serde_json::Value;

use super::wire::Reply;
use crate::channel::SendError;

const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// `ok: false` errors that a later attempt can get past.
const TRANSIENT: [&str; 5] = [
    "ratelimited",
    "internal_error",
    "fatal_error",
    "service_unavailable",
    "request_timeout",
];

/// A Web API client: one bot token, optionally the app-level token.
pub struct Client {
    http: reqwest::Client,
    base: String,
    bot_token: String,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// What `auth.test` says about the bot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub team: String,
    /// The bot's user id (`U…`): how mentions of the app look in texts (`<@U…>`).
    pub user_id: String,
    pub bot_id: Option<String>,
}

impl Client {
    pub fn new(base_url: &str, bot_token: &str) -> Result<Client, SendError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(CALL_TIMEOUT)
            .build()
            .map_err(|e| SendError::Permanent(format!("HTTP client: {e}")))?;
        Ok(Client {
            http,
            base: base_url.trim_end_matches('/').to_string(),
            bot_token: bot_token.to_string(),
        })
    }

    /// Calls a Web API method with the bot token; returns the fields tether reads.
    pub async fn call(&self, method: &str, body: &Value) -> Result<Reply, SendError> {
        self.call_with(&self.bot_token, method, body).await
    }

    pub(super) fn base(&self) -> &str {
        &self.base
    }

    pub(super) fn http(&self) -> &reqwest::Client {
        &self.http
    }

    pub(super) fn bot_token(&self) -> &str {
        &self.bot_token
    }

    async fn call_with(&self, token: &str, method: &str, body: &Value) -> Result<Reply, SendError> {
        let req = self
            .http
            .post(format!("{}/{method}", self.base))
            .bearer_auth(token)
            .json(body);
        self.finish(method, req).await
    }

    /// Calls a method that takes form fields (the file upload methods).
    pub async fn call_form(
        &self,
        method: &str,
        fields: &[(&str, &str)],
    ) -> Result<Reply, SendError> {
        let body = serde_urlencoded::to_string(fields)
            .map_err(|e| SendError::Permanent(format!("{method}: {e}")))?;
        let req = self
            .http
            .post(format!("{}/{method}", self.base))
            .bearer_auth(&self.bot_token)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        self.finish(method, req).await
    }

    async fn finish(&self, method: &str, req: reqwest::RequestBuilder) -> Result<Reply, SendError> {
        let resp = req
            .send()
            .await
            .map_err(|e| crate::net::transport(method, &e))?;
        let status = resp.status().as_u16();
        let after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let text = resp.text().await.map_err(|e| SendError::Retry {
            after: None,
            reason: format!("{method}: {e}"),
        })?;
        let reply: Reply = serde_json::from_str(&text).unwrap_or_default();
        if status == 200 && reply.ok == Some(true) {
            return Ok(reply);
        }
        let error = reply.error.as_deref().unwrap_or("unreadable reply");
        Err(classify(method, status, error, after))
    }

    /// `auth.test`: checks the bot token and names the bot.
    pub async fn auth_test(&self) -> Result<Identity, SendError> {
        let r = self
            .call("auth.test", &Value::Object(Default::default()))
            .await?;
        Ok(Identity {
            team: r.team.unwrap_or_default(),
            user_id: r.user_id.unwrap_or_default(),
            bot_id: r.bot_id,
        })
    }

    /// `apps.connections.open`: a fresh Socket Mode WebSocket URL (single use).
    pub async fn connections_open(&self, app_token: &str) -> Result<String, SendError> {
        let r = self
            .call_with(
                app_token,
                "apps.connections.open",
                &Value::Object(Default::default()),
            )
            .await?;
        r.url
            .ok_or_else(|| SendError::Permanent("apps.connections.open: no url".to_string()))
    }
}

/// Rate limits, server errors and Slack's transient errors are retried; everything
/// else (bad token, channel gone, not in channel) is permanent.
pub fn classify(method: &str, status: u16, error: &str, after: Option<Duration>) -> SendError {
    let reason = format!("{method}: HTTP {status}, {error}");
    if status == 429 || error == "ratelimited" {
        SendError::Retry {
            after: Some(after.unwrap_or(Duration::from_secs(1))),
            reason,
        }
    } else if status >= 500 || TRANSIENT.contains(&error) {
        SendError::Retry {
            after: None,
            reason,
        }
    } else {
        SendError::Permanent(reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_classified() {
        assert!(matches!(
            classify("x", 429, "ratelimited", Some(Duration::from_secs(7))),
            SendError::Retry { after: Some(d), .. } if d == Duration::from_secs(7)
        ));
        assert!(matches!(
            classify("x", 200, "internal_error", None),
            SendError::Retry { after: None, .. }
        ));
        assert!(matches!(
            classify("x", 502, "unreadable reply", None),
            SendError::Retry { .. }
        ));
        assert!(matches!(
            classify("x", 200, "channel_not_found", None),
            SendError::Permanent(_)
        ));
    }
}
