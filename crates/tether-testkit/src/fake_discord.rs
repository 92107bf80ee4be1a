//! A fake Discord on loopback: the REST API tether uses (`/api/v10`: gateway URL,
//! `users/@me`, message send with `nonce` idempotency, edit, thread from a message,
//! interaction callbacks), Discord's rate limits (bucket headers on every reply; a call to
//! an exhausted bucket, or during a global limit, is answered 429 and counted as a
//! violation; 429s on demand), and the Gateway WebSocket (see `fake_discord_gateway`):
//! hello, identify, resume with replay, heartbeats, and on demand a dropped socket,
//! op 7 and op 9. Signed HTTP interactions come from `fake_discord_interactions`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use serde_json::{Value, json};

pub use crate::fake_discord_gateway::Op;
use crate::fake_discord_gateway::{self as gateway, GatewayState};
use crate::fake_discord_limits::{limited, payload};
use crate::within;

pub const BOT_TOKEN: &str = "fake-discord-bot-token";
pub const BOT_ID: &str = "100000000000000001";
pub const APP_ID: &str = "200000000000000002";

/// One recorded REST call.
#[derive(Debug, Clone)]
pub struct Call {
    /// e.g. `POST /channels/{id}/messages`.
    pub route: String,
    pub path: String,
    pub body: Value,
    pub status: u16,
    pub at: Instant,
}

/// A message as the channel shows it now (after edits).
#[derive(Debug, Clone, PartialEq)]
pub struct Shown {
    pub id: String,
    pub channel_id: String,
    pub content: String,
    pub components: Value,
    pub nonce: Option<String>,
    pub edits: u32,
    /// A file sent with the message.
    pub file: Option<SentFile>,
}

/// A file sent with a message: (name, bytes).
pub type SentFile = (String, Vec<u8>);

impl Shown {
    /// `(label, custom_id)` of the message's buttons.
    pub fn buttons(&self) -> Vec<(String, String)> {
        self.components
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|row| row["components"].as_array())
            .flatten()
            .map(|b| {
                (
                    b["label"].as_str().unwrap_or_default().to_string(),
                    b["custom_id"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }
}

/// An injected 429.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    pub retry_after: f64,
    pub global: bool,
}

#[derive(Default)]
pub(crate) struct Inner {
    pub calls: Vec<Call>,
    pub shown: Vec<Shown>,
    pub next_id: u64,
    /// Thread id → parent channel id.
    pub threads: HashMap<String, String>,
    /// Route needle → the next 429s to answer.
    pub(crate) failures: Vec<(String, RateLimit)>,
    /// Bucket → exhausted until.
    pub(crate) exhausted: HashMap<String, Instant>,
    /// Buckets to exhaust on their next success: bucket → reset after (seconds).
    pub(crate) exhaust_next: HashMap<String, f64>,
    pub(crate) global_until: Option<Instant>,
    /// Calls that came while their bucket or the global limit said wait.
    pub violations: Vec<String>,
    /// Interaction callbacks: (interaction id, body).
    pub callbacks: Vec<(String, Value)>,
    /// Attachments people sent, served at `/cdn/{name}`.
    cdn: HashMap<String, Vec<u8>>,
    pub gateway: GatewayState,
}

impl Inner {
    pub(crate) fn snowflake(&mut self) -> String {
        self.next_id += 1;
        (300_000_000_000_000_000u64 + self.next_id).to_string()
    }
}

pub(crate) type Shared = Arc<Mutex<Inner>>;

pub(crate) fn lock(s: &Shared) -> std::sync::MutexGuard<'_, Inner> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

/// The running fake (stops when dropped).
pub struct FakeDiscord {
    pub base_url: String,
    pub(crate) inner: Shared,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for FakeDiscord {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn error(status: StatusCode, code: i64, message: &str) -> Response {
    (status, Json(json!({"code": code, "message": message}))).into_response()
}

fn authorized(h: &HeaderMap) -> bool {
    h.get("authorization").and_then(|v| v.to_str().ok()) == Some(&format!("Bot {BOT_TOKEN}"))
}

fn record(s: &Shared, route: &str, path: String, body: &Value, status: u16) {
    lock(s).calls.push(Call {
        route: route.to_string(),
        path,
        body: body.clone(),
        status,
        at: Instant::now(),
    });
}

async fn gateway_bot(State(s): State<Shared>, headers: HeaderMap) -> Response {
    if !authorized(&headers) {
        return error(StatusCode::UNAUTHORIZED, 0, "401: Unauthorized");
    }
    let url = lock(&s).gateway.url.clone();
    Json(json!({"url": url, "shards": 1, "session_start_limit": {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}})).into_response()
}

async fn me(State(s): State<Shared>, headers: HeaderMap) -> Response {
    record(&s, "GET /users/@me", "/users/@me".into(), &Value::Null, 200);
    if !authorized(&headers) {
        return error(StatusCode::UNAUTHORIZED, 0, "401: Unauthorized");
    }
    Json(json!({"id": BOT_ID, "username": "tether-bot", "bot": true})).into_response()
}

async fn cdn(State(s): State<Shared>, Path(name): Path<String>) -> Response {
    match lock(&s).cdn.get(&name).cloned() {
        Some(bytes) => (StatusCode::OK, bytes).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn send(
    State(s): State<Shared>,
    Path(ch): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let route = "POST /channels/{id}/messages";
    let parsed = payload(&headers, &body);
    let recorded = parsed.as_ref().map(|p| p.0.clone()).unwrap_or(Value::Null);
    let resp = if !authorized(&headers) {
        error(StatusCode::UNAUTHORIZED, 0, "401: Unauthorized")
    } else {
        limited(&s, route, &format!("messages-{ch}"), |g| {
            let Some((body, file)) = parsed else {
                return error(
                    StatusCode::BAD_REQUEST,
                    50109,
                    "The request body contains invalid JSON.",
                );
            };
            let content = body["content"].as_str().unwrap_or_default().to_string();
            if content.chars().count() > 2000 {
                return error(
                    StatusCode::BAD_REQUEST,
                    50035,
                    "Invalid Form Body (content: Must be 2000 or fewer in length.)",
                );
            }
            let nonce = body["nonce"].as_str().map(str::to_string);
            if body["enforce_nonce"] == true
                && let Some(n) = &nonce
                && let Some(m) = g
                    .shown
                    .iter()
                    .find(|m| m.channel_id == ch && m.nonce.as_ref() == Some(n))
            {
                return Json(json!({"id": m.id, "channel_id": ch})).into_response();
            }
            let id = g.snowflake();
            g.shown.push(Shown {
                id: id.clone(),
                channel_id: ch.clone(),
                content,
                components: body["components"].clone(),
                nonce,
                edits: 0,
                file,
            });
            Json(json!({"id": id, "channel_id": ch})).into_response()
        })
    };
    record(
        &s,
        route,
        format!("/channels/{ch}/messages"),
        &recorded,
        resp.status().as_u16(),
    );
    resp
}

async fn edit(
    State(s): State<Shared>,
    Path((ch, id)): Path<(String, String)>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let route = "PATCH /channels/{id}/messages/{id}";
    let resp = if !authorized(&headers) {
        error(StatusCode::UNAUTHORIZED, 0, "401: Unauthorized")
    } else {
        limited(&s, route, &format!("messages-{ch}"), |g| {
            match g
                .shown
                .iter_mut()
                .find(|m| m.id == id && m.channel_id == ch)
            {
                Some(m) => {
                    if let Some(c) = body["content"].as_str() {
                        m.content = c.to_string();
                    }
                    if !body["components"].is_null() {
                        m.components = body["components"].clone();
                    }
                    m.edits += 1;
                    Json(json!({"id": id, "channel_id": ch})).into_response()
                }
                None => error(StatusCode::NOT_FOUND, 10008, "Unknown Message"),
            }
        })
    };
    record(
        &s,
        route,
        format!("/channels/{ch}/messages/{id}"),
        &body,
        resp.status().as_u16(),
    );
    resp
}

async fn thread(
    State(s): State<Shared>,
    Path((ch, mid)): Path<(String, String)>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let route = "POST /channels/{id}/messages/{id}/threads";
    let resp = if !authorized(&headers) {
        error(StatusCode::UNAUTHORIZED, 0, "401: Unauthorized")
    } else {
        limited(&s, route, &format!("threads-{ch}"), |g| {
            if g.threads.contains_key(&mid) {
                return error(
                    StatusCode::BAD_REQUEST,
                    160004,
                    "A thread has already been created for this message",
                );
            }
            // As on Discord: a thread started from a message has the message's id.
            g.threads.insert(mid.clone(), ch.clone());
            Json(json!({"id": mid, "type": 11, "parent_id": ch, "name": body["name"]}))
                .into_response()
        })
    };
    record(
        &s,
        route,
        format!("/channels/{ch}/messages/{mid}/threads"),
        &body,
        resp.status().as_u16(),
    );
    resp
}

async fn callback(
    State(s): State<Shared>,
    Path((id, token)): Path<(String, String)>,
    Json(body): Json<Value>,
) -> Response {
    let known = lock(&s).gateway.tokens.get(&id) == Some(&token);
    let status = if known {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::NOT_FOUND
    };
    if known {
        lock(&s).callbacks.push((id.clone(), body.clone()));
    }
    record(
        &s,
        "POST /interactions/{id}/{token}/callback",
        format!("/interactions/{id}"),
        &body,
        status.as_u16(),
    );
    if known {
        status.into_response()
    } else {
        error(status, 10062, "Unknown interaction")
    }
}

impl FakeDiscord {
    pub async fn start() -> FakeDiscord {
        let inner: Shared = Arc::default();
        let api = axum::Router::new()
            .route("/gateway/bot", get(gateway_bot))
            .route("/users/@me", get(me))
            .route("/channels/{ch}/messages", post(send))
            .route("/channels/{ch}/messages/{id}", patch(edit))
            .route("/channels/{ch}/messages/{id}/threads", post(thread))
            .route("/interactions/{id}/{token}/callback", post(callback));
        let app = axum::Router::new()
            .nest("/api/v10", api)
            .route("/", get(gateway::upgrade))
            .route("/cdn/{name}", get(cdn))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("bind: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("addr: {e}"));
        {
            let mut g = lock(&inner);
            g.gateway.url = format!("ws://{addr}");
            g.gateway.heartbeat_ms = 1000;
            g.gateway.ack = true;
        }
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeDiscord {
            base_url: format!("http://{addr}/api/v10"),
            inner,
            server,
        }
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        lock(&self.inner)
    }

    /// `[channels.discord]` pointing here (and fast delivery tuning).
    pub fn config(&self, allowed_users: &[&str], extra: &str) -> String {
        format!(
            "[channels]\nprogress_interval_ms = 300\nretry_base_ms = 100\nidle_poll_ms = 200\n\n{}",
            self.section(allowed_users, extra)
        )
    }

    /// `[channels.discord]` alone (beside another channel's `[channels]` settings).
    pub fn section(&self, allowed_users: &[&str], extra: &str) -> String {
        let users: Vec<String> = allowed_users.iter().map(|u| format!("{u:?}")).collect();
        format!(
            "[channels.discord]\nbot_token = \"{BOT_TOKEN}\"\napplication_id = \"{APP_ID}\"\n\
             api_base = \"{}\"\nallowed_users = [{}]\n{extra}\n",
            self.base_url,
            users.join(", ")
        )
    }

    /// The next calls whose route contains `needle` are answered 429 as given.
    pub fn rate_limit(&self, needle: &str, limits: &[RateLimit]) {
        let mut g = self.lock();
        for l in limits {
            g.failures.push((needle.to_string(), *l));
        }
    }

    /// The next successful send to `channel_id` says its bucket is exhausted for
    /// `reset_after` seconds (`X-RateLimit-Remaining: 0`).
    pub fn exhaust_bucket(&self, channel_id: &str, reset_after: f64) {
        self.lock()
            .exhaust_next
            .insert(format!("messages-{channel_id}"), reset_after);
    }

    /// Makes `bytes` downloadable as an attachment; its URL.
    pub fn add_attachment(&self, name: &str, bytes: &[u8]) -> String {
        self.lock().cdn.insert(name.to_string(), bytes.to_vec());
        format!("{}/cdn/{name}", self.base_url.trim_end_matches("/api/v10"))
    }

    /// Calls that ignored a bucket or the global limit.
    pub fn violations(&self) -> Vec<String> {
        self.lock().violations.clone()
    }

    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// Messages in a channel (or thread), in send order, as they look now.
    pub fn shown(&self, channel_id: &str) -> Vec<Shown> {
        self.lock()
            .shown
            .iter()
            .filter(|m| m.channel_id == channel_id)
            .cloned()
            .collect()
    }

    /// The parent channel of each thread started so far.
    pub fn threads(&self) -> HashMap<String, String> {
        self.lock().threads.clone()
    }

    /// Interaction callbacks so far: (interaction id, body).
    pub fn callbacks(&self) -> Vec<(String, Value)> {
        self.lock().callbacks.clone()
    }

    pub async fn wait<T>(&self, what: &str, f: impl Fn(&FakeDiscord) -> Option<T>) -> T {
        within(what, async {
            loop {
                if let Some(v) = f(self) {
                    return v;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
    }

    pub async fn wait_shown(&self, channel_id: &str, needle: &str) -> Shown {
        self.wait(&format!("a message with {needle:?} in {channel_id}"), |f| {
            f.shown(channel_id)
                .into_iter()
                .find(|m| m.content.contains(needle))
        })
        .await
    }

    pub fn count_shown(&self, channel_id: &str, needle: &str) -> usize {
        self.shown(channel_id)
            .iter()
            .filter(|m| m.content.contains(needle))
            .count()
    }
}
