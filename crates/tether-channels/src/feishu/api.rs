//! The Feishu / Lark Open API calls tether uses, over plain reqwest: the tenant access
//! token (cached until shortly before it expires) and message send / update. Replies are
//! `{code, msg, data}`; errors are classified for the outbox (HTTP 429 or code 99991400
//! with `x-ogw-ratelimit-reset`, and 5xx, are retried; an expired token is refreshed and
//! retried; other codes are permanent).

use std::time::{Duration, Instant};

use reqwest::Method;
use serde::Deserialize;
use serde_json::{Value, json};

use super::wire::Data;
use crate::channel::SendError;

const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Rate limited.
const CODE_RATE_LIMIT: i64 = 99991400;
/// Invalid or expired tenant access token.
const CODES_BAD_TOKEN: [i64; 3] = [99991661, 99991663, 99991668];

#[derive(Debug, Deserialize)]
struct Reply {
    #[serde(default)]
    code: i64,
    #[serde(default)]
    msg: String,
    #[serde(default, deserialize_with = "crate::json::lenient")]
    data: Data,
    #[serde(default)]
    tenant_access_token: Option<String>,
    #[serde(default)]
    expire: Option<u64>,
}

/// An Open API client for one app.
pub struct Client {
    http: reqwest::Client,
    base: String,
    app_id: String,
    app_secret: String,
    token: tokio::sync::Mutex<Option<(String, Instant)>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

use crate::net::transport;

impl Client {
    pub fn new(base_url: &str, app_id: &str, app_secret: &str) -> Result<Client, SendError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(CALL_TIMEOUT)
            .build()
            .map_err(|e| SendError::Permanent(format!("HTTP client: {e}")))?;
        Ok(Client {
            http,
            base: base_url.trim_end_matches('/').to_string(),
            app_id: app_id.to_string(),
            app_secret: app_secret.to_string(),
            token: tokio::sync::Mutex::new(None),
        })
    }

    pub(crate) async fn token(&self) -> Result<String, SendError> {
        let mut cached = self.token.lock().await;
        if let Some((t, until)) = cached.as_ref()
            && Instant::now() < *until
        {
            return Ok(t.clone());
        }
        let what = "tenant_access_token";
        let resp = self
            .http
            .post(format!(
                "{}/open-apis/auth/v3/tenant_access_token/internal",
                self.base
            ))
            .json(&json!({"app_id": self.app_id, "app_secret": self.app_secret}))
            .send()
            .await
            .map_err(|e| transport(what, &e))?;
        let (status, retry) = (resp.status().as_u16(), reset_after(&resp));
        let reply: Reply = resp.json().await.map_err(|e| transport(what, &e))?;
        match reply.tenant_access_token {
            Some(t) if reply.code == 0 => {
                // Refresh five minutes early (tokens last two hours).
                let life = reply.expire.unwrap_or(7200).saturating_sub(300).max(60);
                *cached = Some((t.clone(), Instant::now() + Duration::from_secs(life)));
                Ok(t)
            }
            _ => Err(classify(what, status, reply.code, &reply.msg, retry)),
        }
    }

    /// Calls an Open API path with the tenant token; returns `data`.
    pub async fn call(&self, method: Method, path: &str, body: &Value) -> Result<Data, SendError> {
        let token = self.token().await?;
        let resp = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(token)
            .json(body)
            .send()
            .await
            .map_err(|e| transport(path, &e))?;
        let (status, retry) = (resp.status().as_u16(), reset_after(&resp));
        let text = resp.text().await.map_err(|e| transport(path, &e))?;
        let reply: Reply = serde_json::from_str(&text).unwrap_or(Reply {
            code: -1,
            msg: format!("unreadable reply (HTTP {status})"),
            data: Data::default(),
            tenant_access_token: None,
            expire: None,
        });
        if status == 200 && reply.code == 0 {
            return Ok(reply.data);
        }
        if CODES_BAD_TOKEN.contains(&reply.code) {
            *self.token.lock().await = None;
            return Err(SendError::Retry {
                after: Some(Duration::ZERO),
                reason: format!("{path}: token expired ({})", reply.code),
            });
        }
        Err(classify(path, status, reply.code, &reply.msg, retry))
    }
}

impl Client {
    /// Uploads a file (`multipart/form-data`: `fields`, then the file as `field`) and
    /// returns `data` (`image_key` or `file_key`).
    pub async fn upload(
        &self,
        path: &str,
        fields: &[(&str, String)],
        file: (&str, &str, &[u8]),
    ) -> Result<Data, SendError> {
        let token = self.token().await?;
        let (content_type, body) = crate::multipart::form(fields, file.0, file.1, file.2);
        let resp = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(token)
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .map_err(|e| transport(path, &e))?;
        let (status, retry) = (resp.status().as_u16(), reset_after(&resp));
        let text = resp.text().await.map_err(|e| transport(path, &e))?;
        match serde_json::from_str::<Reply>(&text) {
            Ok(r) if status == 200 && r.code == 0 => Ok(r.data),
            Ok(r) => Err(classify(path, status, r.code, &r.msg, retry)),
            Err(_) => Err(classify(path, status, -1, "unreadable reply", retry)),
        }
    }

    /// Downloads a binary resource (a message's image or file) with the tenant token, at
    /// most `limit` bytes; a JSON error reply (a resource that 404s) is unavailable.
    pub async fn download(
        &self,
        path: &str,
        limit: u64,
    ) -> Result<Vec<u8>, crate::channel::FetchError> {
        use crate::channel::FetchError;
        let token = self
            .token()
            .await
            .map_err(|e| FetchError::Unavailable(e.to_string()))?;
        let mut resp = self
            .http
            .get(format!("{}{path}", self.base))
            .bearer_auth(token)
            .send()
            .await
            .map_err(|e| FetchError::Unavailable(format!("{path}: {e}")))?;
        let status = resp.status().as_u16();
        if status != 200 {
            let text = resp.text().await.unwrap_or_default();
            let msg = serde_json::from_str::<Reply>(&text)
                .map(|r| format!("{} {}", r.code, r.msg))
                .unwrap_or_default();
            return Err(FetchError::Unavailable(format!(
                "{path}: HTTP {status} {msg}"
            )));
        }
        if let Some(size) = resp.content_length().filter(|s| *s > limit) {
            return Err(FetchError::TooLarge { size, limit });
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = resp
            .chunk()
            .await
            .map_err(|e| FetchError::Unavailable(format!("{path}: {e}")))?
        {
            bytes.extend_from_slice(&chunk);
            if bytes.len() as u64 > limit {
                return Err(FetchError::TooLarge {
                    size: bytes.len() as u64,
                    limit,
                });
            }
        }
        Ok(bytes)
    }
}

/// Seconds from `x-ogw-ratelimit-reset`, if present.
fn reset_after(resp: &reqwest::Response) -> Option<Duration> {
    resp.headers()
        .get("x-ogw-ratelimit-reset")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
}

/// Rate limits and server errors are retried; everything else is permanent.
pub fn classify(
    what: &str,
    status: u16,
    code: i64,
    msg: &str,
    after: Option<Duration>,
) -> SendError {
    let reason = format!("{what}: HTTP {status}, code {code} {msg}");
    if status == 429 || code == CODE_RATE_LIMIT {
        SendError::Retry {
            after: Some(after.unwrap_or(Duration::from_secs(1))),
            reason,
        }
    } else if status >= 500 || status == 0 || (status == 200 && code == -1) {
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
            classify("x", 429, 0, "", Some(Duration::from_secs(2))),
            SendError::Retry { after: Some(d), .. } if d == Duration::from_secs(2)
        ));
        assert!(matches!(
            classify("x", 400, CODE_RATE_LIMIT, "", None),
            SendError::Retry { .. }
        ));
        assert!(matches!(
            classify("x", 503, 0, "", None),
            SendError::Retry { after: None, .. }
        ));
        assert!(matches!(
            classify("x", 400, 230002, "bot not in chat", None),
            SendError::Permanent(_)
        ));
    }
}
