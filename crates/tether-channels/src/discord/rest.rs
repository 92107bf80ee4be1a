//! The Discord REST calls tether makes, over plain reqwest, with Discord's rate limits
//! honoured before and after each call: the per-route buckets the
//! `X-RateLimit-Bucket` / `-Remaining` / `-Reset-After` headers describe (a call to an
//! exhausted bucket waits for its reset), the global limit, and a 429's `retry_after`
//! (the route or everything is held that long; the caller is told to retry after it).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::Value;

use super::wire::Reply;

use crate::channel::SendError;

const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// A wait longer than this is not slept inside a call: the outbox retries the row later.
const MAX_INLINE_WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy)]
struct Bucket {
    remaining: u64,
    reset_at: Instant,
}

/// What the client knows of the limits.
#[derive(Debug, Default)]
struct Limits {
    /// Route key → bucket id (Discord names the bucket a route falls in).
    routes: HashMap<String, String>,
    buckets: HashMap<String, Bucket>,
    /// Routes held by a 429 before their bucket is known.
    held: HashMap<String, Instant>,
    global_until: Option<Instant>,
}

impl Limits {
    /// How long a call to `route` must wait now.
    fn wait(&self, route: &str, now: Instant) -> Duration {
        let mut until = self.global_until.filter(|t| *t > now);
        let bucket = self
            .routes
            .get(route)
            .and_then(|b| self.buckets.get(b))
            .filter(|b| b.remaining == 0 && b.reset_at > now)
            .map(|b| b.reset_at);
        let held = self.held.get(route).copied().filter(|t| *t > now);
        for t in [bucket, held].into_iter().flatten() {
            until = Some(until.map_or(t, |u| u.max(t)));
        }
        until.map_or(Duration::ZERO, |t| t - now)
    }
}

/// A REST client for one bot.
pub struct Rest {
    http: reqwest::Client,
    base: String,
    auth: String,
    limits: std::sync::Mutex<Limits>,
}

impl std::fmt::Debug for Rest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rest")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// The rate-limit route of a path: major parameters (channel, guild, webhook ids) kept,
/// other ids and tokens replaced, so one message's edits share the channel's bucket.
pub(crate) fn route_key(method: &Method, path: &str) -> String {
    let segs: Vec<&str> = path
        .split('?')
        .next()
        .unwrap_or_default()
        .split('/')
        .collect();
    let out: Vec<&str> = segs
        .iter()
        .enumerate()
        .map(|(i, seg)| {
            let before = |n: usize| i.checked_sub(n).map(|j| segs[j]);
            let is_id = !seg.is_empty() && seg.bytes().all(|b| b.is_ascii_digit());
            if matches!(before(1), Some("channels" | "guilds" | "webhooks")) {
                seg
            } else if is_id || before(2) == Some("interactions") {
                // An interaction's token is as unique as an id.
                ":id"
            } else {
                seg
            }
        })
        .collect();
    format!("{method} {}", out.join("/"))
}

fn header_f64(resp: &reqwest::Response, name: &str) -> Option<f64> {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v >= 0.0)
}

fn secs(v: f64) -> Duration {
    Duration::from_secs_f64(v.clamp(0.0, 3600.0))
}

impl Rest {
    pub fn new(base: &str, bot_token: &str) -> Result<Rest, SendError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(CALL_TIMEOUT)
            .user_agent(concat!(
                "DiscordBot (https://github.com/tether, ",
                env!("CARGO_PKG_VERSION"),
                ")"
            ))
            .build()
            .map_err(|e| SendError::Permanent(format!("HTTP client: {e}")))?;
        Ok(Rest {
            http,
            base: base.trim_end_matches('/').to_string(),
            auth: format!("Bot {bot_token}"),
            limits: std::sync::Mutex::new(Limits::default()),
        })
    }

    fn limits(&self) -> std::sync::MutexGuard<'_, Limits> {
        self.limits.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Calls `path` with a JSON body (or none); returns the JSON reply (`Null` for 204).
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Reply, SendError> {
        self.request(method, path, |req| match body {
            Some(b) => req.json(b),
            None => req,
        })
        .await
    }

    /// Calls `path` with a `multipart/form-data` body.
    pub async fn upload(
        &self,
        path: &str,
        content_type: String,
        body: Vec<u8>,
    ) -> Result<Reply, SendError> {
        self.request(Method::POST, path, move |req| {
            req.header("content-type", content_type.clone())
                .body(body.clone())
        })
        .await
    }

    async fn request(
        &self,
        method: Method,
        path: &str,
        build: impl Fn(reqwest::RequestBuilder) -> reqwest::RequestBuilder,
    ) -> Result<Reply, SendError> {
        let route = route_key(&method, path);
        let wait = self.limits().wait(&route, Instant::now());
        if wait > MAX_INLINE_WAIT {
            return Err(SendError::Retry {
                after: Some(wait),
                reason: format!("{route}: rate limited for {wait:?}"),
            });
        }
        if !wait.is_zero() {
            tracing::debug!(
                channel = "discord",
                route,
                "waiting {wait:?} for the rate limit"
            );
            tokio::time::sleep(wait).await;
        }
        let req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header("authorization", &self.auth);
        let resp = build(req)
            .send()
            .await
            .map_err(|e| crate::net::transport(&route, &e))?;
        self.learn(&route, &resp);
        let status = resp.status();
        let bucket = resp
            .headers()
            .get("x-ratelimit-bucket")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let global_header = resp
            .headers()
            .get("x-ratelimit-global")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"));
        let header_retry = header_f64(&resp, "retry-after");
        let text = resp.text().await.map_err(|e| SendError::Retry {
            after: None,
            reason: format!("{route}: {e}"),
        })?;
        let reply: Reply = if text.trim().is_empty() {
            Reply::default()
        } else {
            serde_json::from_str(&text).unwrap_or_default()
        };
        if status.is_success() {
            return Ok(reply);
        }
        if status == StatusCode::TOO_MANY_REQUESTS {
            let after = secs(reply.retry_after.or(header_retry).unwrap_or(1.0));
            let global = global_header || reply.global == Some(true);
            let until = Instant::now() + after;
            let mut l = self.limits();
            if global {
                l.global_until = Some(l.global_until.map_or(until, |u| u.max(until)));
            } else if let Some(b) = bucket {
                // The whole bucket waits, not only this route (edits share it).
                l.routes.insert(route.clone(), b.clone());
                l.buckets.insert(
                    b,
                    Bucket {
                        remaining: 0,
                        reset_at: until,
                    },
                );
            } else {
                l.held.insert(route.clone(), until);
            }
            tracing::info!(
                channel = "discord",
                route,
                global,
                "rate limited (429); retry after {after:?}"
            );
            return Err(SendError::Retry {
                after: Some(after),
                reason: format!("{route}: 429 (retry after {after:?}, global: {global})"),
            });
        }
        let reason = format!(
            "{route}: HTTP {} {} ({})",
            status.as_u16(),
            reply.message.as_deref().unwrap_or_default(),
            reply.code
        );
        if status.is_server_error() {
            Err(SendError::Retry {
                after: None,
                reason,
            })
        } else {
            Err(SendError::Permanent(reason))
        }
    }

    /// Takes note of a reply's bucket headers.
    fn learn(&self, route: &str, resp: &reqwest::Response) {
        let bucket = resp
            .headers()
            .get("x-ratelimit-bucket")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let remaining = header_f64(resp, "x-ratelimit-remaining");
        let reset_after = header_f64(resp, "x-ratelimit-reset-after");
        let (Some(bucket), Some(remaining), Some(reset_after)) = (bucket, remaining, reset_after)
        else {
            return;
        };
        let mut l = self.limits();
        l.routes.insert(route.to_string(), bucket.clone());
        l.buckets.insert(
            bucket,
            Bucket {
                remaining: remaining as u64,
                reset_at: Instant::now() + secs(reset_after),
            },
        );
    }

    /// Downloads an attachment (a CDN URL from a message), at most `limit` bytes.
    pub async fn download(&self, url: &str, limit: u64) -> Result<Vec<u8>, String> {
        let mut resp = self
            .http
            .get(url)
            .timeout(Duration::from_secs(120))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if !resp.status().is_success() {
            return Err(format!("HTTP {}", resp.status().as_u16()));
        }
        let mut out = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| e.to_string())? {
            if out.len() as u64 + chunk.len() as u64 > limit {
                return Err(format!("larger than {limit} bytes"));
            }
            out.extend_from_slice(&chunk);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_keep_major_parameters_only() {
        assert_eq!(
            route_key(&Method::PATCH, "/channels/123/messages/456"),
            "PATCH /channels/123/messages/:id"
        );
        assert_eq!(
            route_key(&Method::POST, "/channels/123/messages"),
            "POST /channels/123/messages"
        );
        assert_eq!(
            route_key(&Method::POST, "/interactions/99/tok-en/callback"),
            "POST /interactions/:id/:id/callback"
        );
    }

    #[test]
    fn exhausted_buckets_and_the_global_limit_make_calls_wait() {
        let now = Instant::now();
        let mut l = Limits::default();
        let r = "POST /channels/1/messages";
        assert_eq!(l.wait(r, now), Duration::ZERO);
        l.routes.insert(r.into(), "b1".into());
        l.buckets.insert(
            "b1".into(),
            Bucket {
                remaining: 0,
                reset_at: now + Duration::from_secs(2),
            },
        );
        assert_eq!(l.wait(r, now), Duration::from_secs(2));
        l.global_until = Some(now + Duration::from_secs(5));
        assert_eq!(l.wait("GET /users/@me", now), Duration::from_secs(5));
    }
}
