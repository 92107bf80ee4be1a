//! A fake Slack on loopback: the Web API methods tether calls (`auth.test`,
//! `apps.connections.open`, `chat.postMessage`, `chat.update`, `chat.postEphemeral`;
//! tokens checked, Block Kit limits checked, every call recorded, 429s on demand) and a
//! Socket Mode WebSocket server that says `hello`, sends envelopes, records acks and, as
//! Slack does, delivers again on the next connection what was not acknowledged. A test
//! can drop the socket, send `disconnect`, or ignore acks. [`sign`] signs Events API
//! requests for a test to POST to the daemon's `/hooks/slack` (written independently of
//! tether's check, so the two check each other).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::ws::{Message as WsMessage, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use tokio::sync::mpsc;

use crate::within;

pub const BOT_TOKEN: &str = "xoxb-fake-bot-token";
pub const APP_TOKEN: &str = "xapp-fake-app-token";
pub const SIGNING_SECRET: &str = "fake-signing-secret";
/// The bot's user id (`auth.test`): mentions of the app are `<@UTETHERBOT>`.
pub const BOT_USER: &str = "UTETHERBOT";

/// One recorded Web API call.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: String,
    pub body: Value,
    pub status: u16,
    pub at: Instant,
}

/// A message as the channel shows it now (after updates).
#[derive(Debug, Clone, PartialEq)]
pub struct Shown {
    pub ts: String,
    pub channel: String,
    pub thread_ts: Option<String>,
    /// The fallback `text`.
    pub fallback: String,
    pub blocks: Value,
    pub updates: u32,
    /// Files shared into the chat with this message (`files.completeUploadExternal`).
    pub files: Vec<String>,
}

impl Shown {
    /// What the blocks show: header and section texts, one per line (the fallback text
    /// when there are no blocks).
    pub fn text(&self) -> String {
        let Some(blocks) = self.blocks.as_array() else {
            return self.fallback.clone();
        };
        blocks
            .iter()
            .filter_map(|b| b["text"]["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The section text alone (what the limit applies to).
    pub fn section(&self) -> String {
        self.blocks
            .as_array()
            .into_iter()
            .flatten()
            .filter(|b| b["type"] == "section")
            .filter_map(|b| b["text"]["text"].as_str())
            .collect()
    }

    /// `(label, action_id, value)` of the buttons.
    pub fn buttons(&self) -> Vec<(String, String, String)> {
        self.blocks
            .as_array()
            .into_iter()
            .flatten()
            .filter(|b| b["type"] == "actions")
            .filter_map(|b| b["elements"].as_array())
            .flatten()
            .map(|e| {
                let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
                (s(&e["text"]["text"]), s(&e["action_id"]), s(&e["value"]))
            })
            .collect()
    }
}

/// A message only one user sees.
#[derive(Debug, Clone, PartialEq)]
pub struct Ephemeral {
    pub channel: String,
    pub user: String,
    pub thread_ts: Option<String>,
    pub text: String,
}

enum ToSocket {
    Text(String),
    /// Drop the TCP connection without a close frame.
    Drop,
}

#[derive(Default)]
struct Socket {
    conn: Option<mpsc::UnboundedSender<ToSocket>>,
    /// Connections that got `hello`.
    connections: u32,
    /// Envelopes sent and not acknowledged, in order: delivered again on reconnect.
    unacked: Vec<Value>,
    acked: Vec<String>,
    /// Acks are read but not honoured (the envelope stays unacknowledged).
    ignore_acks: bool,
    next_envelope: u64,
}

#[derive(Default)]
struct Inner {
    calls: Vec<Call>,
    shown: Vec<Shown>,
    ephemerals: Vec<Ephemeral>,
    next_ts: u64,
    next_event: u64,
    /// Files people shared, served at `/files/{id}` to the bot token.
    hosted: std::collections::HashMap<String, Vec<u8>>,
    /// Uploads by file id: (name, bytes once POSTed to the upload URL).
    uploads: std::collections::HashMap<String, (String, Option<Vec<u8>>)>,
    /// The next calls of a method answer 429 with this `Retry-After`.
    rate_limited: Vec<(String, u64)>,
    socket: Socket,
}

type Shared = Arc<Mutex<Inner>>;

#[derive(Clone)]
struct App {
    inner: Shared,
    ws_url: String,
    origin: String,
}

/// The running fake (stops when dropped).
pub struct FakeSlack {
    pub base_url: String,
    inner: Shared,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for FakeSlack {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn lock(s: &Shared) -> std::sync::MutexGuard<'_, Inner> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

fn fail(error: &str) -> Value {
    json!({"ok": false, "error": error})
}

async fn web_api(
    State(app): State<App>,
    Path(method): Path<String>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let form = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("application/x-www-form-urlencoded"));
    let body: Value = if form {
        let url = reqwest::Url::parse(&format!("http://x/?{body}"))
            .unwrap_or_else(|e| panic!("form: {e}"));
        Value::Object(
            url.query_pairs()
                .map(|(k, v)| (k.into_owned(), Value::String(v.into_owned())))
                .collect(),
        )
    } else {
        serde_json::from_str(&body).unwrap_or(Value::Null)
    };
    let token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default()
        .to_string();
    let mut g = lock(&app.inner);
    if let Some(i) = g.rate_limited.iter().position(|(m, _)| *m == method) {
        let (_, secs) = g.rate_limited.remove(i);
        g.calls.push(Call {
            method,
            body,
            status: 429,
            at: Instant::now(),
        });
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", secs.to_string())],
            Json(fail("ratelimited")),
        )
            .into_response();
    }
    let wanted = if method == "apps.connections.open" {
        APP_TOKEN
    } else {
        BOT_TOKEN
    };
    let reply = if token != wanted {
        fail("invalid_auth")
    } else {
        answer(&mut g, &app, &method, &body)
    };
    g.calls.push(Call {
        method,
        body,
        status: 200,
        at: Instant::now(),
    });
    Json(reply).into_response()
}

/// Slack's section limit, checked as Slack does (`invalid_blocks`).
fn blocks_ok(blocks: &Value) -> bool {
    blocks.as_array().into_iter().flatten().all(|b| {
        let n = b["text"]["text"].as_str().map_or(0, |t| t.chars().count());
        match b["type"].as_str() {
            Some("section") => (1..=3000).contains(&n),
            Some("header") => (1..=150).contains(&n),
            _ => true,
        }
    })
}

fn answer(g: &mut Inner, app: &App, method: &str, body: &Value) -> Value {
    let s = |v: &Value| v.as_str().map(str::to_string);
    match method {
        "auth.test" => json!({"ok": true, "team": "Fake Team", "team_id": "T0FAKE",
                              "user_id": BOT_USER, "bot_id": "B0FAKE"}),
        "apps.connections.open" => json!({"ok": true, "url": app.ws_url}),
        "files.getUploadURLExternal" => {
            let (Some(name), Some(_)) = (s(&body["filename"]), s(&body["length"])) else {
                return fail("invalid_arguments");
            };
            g.next_ts += 1;
            let id = format!("F{:06}", g.next_ts);
            g.uploads.insert(id.clone(), (name, None));
            json!({"ok": true, "file_id": id, "upload_url": format!("{}/upload/{id}", app.origin)})
        }
        "files.completeUploadExternal" => {
            let Some(channel) = s(&body["channel_id"]) else {
                return fail("invalid_arguments");
            };
            let ids: Vec<String> = body["files"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| s(&f["id"]))
                .collect();
            if ids.is_empty()
                || ids
                    .iter()
                    .any(|id| !matches!(g.uploads.get(id), Some((_, Some(_)))))
            {
                return fail("file_not_found");
            }
            g.next_ts += 1;
            let ts = format!("1700000000.{:06}", g.next_ts);
            g.shown.push(Shown {
                ts,
                channel,
                thread_ts: s(&body["thread_ts"]),
                fallback: s(&body["initial_comment"]).unwrap_or_default(),
                blocks: Value::Null,
                updates: 0,
                files: ids.clone(),
            });
            json!({"ok": true, "files": ids.iter().map(|id| json!({"id": id})).collect::<Vec<_>>()})
        }
        "chat.postMessage" => {
            let Some(channel) = s(&body["channel"]) else {
                return fail("channel_not_found");
            };
            if !blocks_ok(&body["blocks"]) {
                return fail("invalid_blocks");
            }
            g.next_ts += 1;
            let ts = format!("1700000000.{:06}", g.next_ts);
            g.shown.push(Shown {
                ts: ts.clone(),
                channel: channel.clone(),
                thread_ts: s(&body["thread_ts"]),
                fallback: s(&body["text"]).unwrap_or_default(),
                blocks: body["blocks"].clone(),
                updates: 0,
                files: Vec::new(),
            });
            json!({"ok": true, "channel": channel, "ts": ts})
        }
        "chat.update" => {
            if !blocks_ok(&body["blocks"]) {
                return fail("invalid_blocks");
            }
            let (channel, ts) = (s(&body["channel"]), s(&body["ts"]));
            match g
                .shown
                .iter_mut()
                .find(|m| Some(&m.channel) == channel.as_ref() && Some(&m.ts) == ts.as_ref())
            {
                Some(m) => {
                    m.fallback = s(&body["text"]).unwrap_or_default();
                    m.blocks = body["blocks"].clone();
                    m.updates += 1;
                    json!({"ok": true, "channel": channel, "ts": ts})
                }
                None => fail("message_not_found"),
            }
        }
        "chat.postEphemeral" => {
            g.ephemerals.push(Ephemeral {
                channel: s(&body["channel"]).unwrap_or_default(),
                user: s(&body["user"]).unwrap_or_default(),
                thread_ts: s(&body["thread_ts"]),
                text: s(&body["text"]).unwrap_or_default(),
            });
            json!({"ok": true, "message_ts": "1700000000.999999"})
        }
        _ => fail("unknown_method"),
    }
}

async fn upload(
    State(app): State<App>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> StatusCode {
    match lock(&app.inner).uploads.get_mut(&id) {
        Some(u) => {
            u.1 = Some(body.to_vec());
            StatusCode::OK
        }
        None => StatusCode::NOT_FOUND,
    }
}

async fn hosted(State(app): State<App>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    let auth = headers.get("authorization").and_then(|v| v.to_str().ok());
    if auth != Some(&format!("Bearer {BOT_TOKEN}")) {
        // Slack answers an unauthorised file request with its sign-in page.
        return ([("content-type", "text/html")], "<html>sign in</html>").into_response();
    }
    match lock(&app.inner).hosted.get(&id) {
        Some(bytes) => bytes.clone().into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn link(State(app): State<App>, ws: WebSocketUpgrade) -> Response {
    ws.on_upgrade(move |socket| serve_socket(app.inner, socket))
}

/// One Socket Mode connection: `hello`, then what was not acknowledged yet, then
/// whatever the test sends; acks are recorded.
async fn serve_socket(inner: Shared, mut socket: WebSocket) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let backlog = {
        let mut g = lock(&inner);
        g.socket.conn = Some(tx);
        g.socket.connections += 1;
        for e in &mut g.socket.unacked {
            e["retry_attempt"] = json!(e["retry_attempt"].as_u64().unwrap_or(0) + 1);
            e["retry_reason"] = json!("timeout");
        }
        g.socket.unacked.clone()
    };
    let hello = json!({"type": "hello", "num_connections": 1,
                       "connection_info": {"app_id": "A0FAKE"}});
    if socket
        .send(WsMessage::Text(hello.to_string().into()))
        .await
        .is_err()
    {
        return;
    }
    for e in backlog {
        if socket
            .send(WsMessage::Text(e.to_string().into()))
            .await
            .is_err()
        {
            return;
        }
    }
    loop {
        tokio::select! {
            out = rx.recv() => match out {
                Some(ToSocket::Text(t)) => {
                    if socket.send(WsMessage::Text(t.into())).await.is_err() {
                        return;
                    }
                }
                Some(ToSocket::Drop) | None => return,
            },
            got = socket.recv() => match got {
                Some(Ok(WsMessage::Text(t))) => {
                    let Ok(v) = serde_json::from_str::<Value>(&t) else { continue };
                    let Some(id) = v["envelope_id"].as_str() else { continue };
                    let mut g = lock(&inner);
                    g.socket.acked.push(id.to_string());
                    if !g.socket.ignore_acks {
                        g.socket.unacked.retain(|e| e["envelope_id"] != id);
                    }
                }
                Some(Ok(_)) => {}
                _ => return,
            },
        }
    }
}

impl FakeSlack {
    pub async fn start() -> FakeSlack {
        let inner: Shared = Arc::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("bind: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("addr: {e}"));
        let app = App {
            inner: inner.clone(),
            ws_url: format!("ws://{addr}/link/?ticket=fake"),
            origin: format!("http://{addr}"),
        };
        let router = axum::Router::new()
            .route("/api/{method}", post(web_api))
            .route("/upload/{id}", post(upload))
            .route("/files/{id}", get(hosted))
            .route("/link/", get(link))
            .with_state(app);
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        FakeSlack {
            base_url: format!("http://{addr}/api"),
            inner,
            server,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        lock(&self.inner)
    }

    /// `[channels]` tuned for tests and `[channels.slack]` pointing here (`mode`
    /// `socket` or `events`).
    pub fn config(&self, mode: &str, allowed_users: &[&str], extra: &str) -> String {
        format!(
            "[channels]\nprogress_interval_ms = 300\nretry_base_ms = 100\nidle_poll_ms = 200\n\n{}",
            self.section(mode, allowed_users, extra)
        )
    }

    /// `[channels.slack]` alone (beside another channel's config).
    pub fn section(&self, mode: &str, allowed_users: &[&str], extra: &str) -> String {
        let users: Vec<String> = allowed_users.iter().map(|u| format!("{u:?}")).collect();
        format!(
            "[channels.slack]\nbot_token = \"{BOT_TOKEN}\"\napp_token = \"{APP_TOKEN}\"\n\
             signing_secret = \"{SIGNING_SECRET}\"\nbase_url = \"{}\"\nmode = \"{mode}\"\n\
             allowed_users = [{}]\n{extra}\n",
            self.base_url,
            users.join(", ")
        )
    }

    /// The next `n` calls of `method` answer HTTP 429 with `Retry-After: secs`.
    pub fn rate_limit(&self, method: &str, n: usize, secs: u64) {
        let mut g = self.lock();
        for _ in 0..n {
            g.rate_limited.push((method.to_string(), secs));
        }
    }

    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// Messages in a channel, in send order, as they look now.
    pub fn shown(&self, channel: &str) -> Vec<Shown> {
        self.lock()
            .shown
            .iter()
            .filter(|m| m.channel == channel)
            .cloned()
            .collect()
    }

    pub fn ephemerals(&self) -> Vec<Ephemeral> {
        self.lock().ephemerals.clone()
    }

    pub async fn wait<T>(&self, what: &str, f: impl Fn(&FakeSlack) -> Option<T>) -> T {
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

    pub async fn wait_shown(&self, channel: &str, needle: &str) -> Shown {
        self.wait(&format!("a message with {needle:?} in {channel}"), |f| {
            f.shown(channel)
                .into_iter()
                .find(|m| m.text().contains(needle))
        })
        .await
    }

    pub fn count_shown(&self, channel: &str, needle: &str) -> usize {
        self.shown(channel)
            .iter()
            .filter(|m| m.text().contains(needle))
            .count()
    }

    /// Hosts a file a person shares; returns its `url_private_download`.
    pub fn host_file(&self, id: &str, bytes: &[u8]) -> String {
        self.lock().hosted.insert(id.to_string(), bytes.to_vec());
        format!("{}/files/{id}", self.base_url.trim_end_matches("/api"))
    }

    /// An upload's name and bytes, once complete.
    pub fn uploaded(&self, file_id: &str) -> Option<(String, Vec<u8>)> {
        let g = self.lock();
        let (name, bytes) = g.uploads.get(file_id)?;
        Some((name.clone(), bytes.clone()?))
    }

    /// A `file_share` message: `files` as `(id, name, mimetype, url)`.
    pub fn file_message(
        &self,
        channel: &str,
        user: &str,
        caption: &str,
        ts: &str,
        files: &[(&str, &str, &str, &str)],
    ) -> Value {
        let mut body = self.message(channel, user, caption, ts, None);
        body["event"]["subtype"] = json!("file_share");
        body["event"]["files"] = files
            .iter()
            .map(|(id, name, mime, url)| {
                json!({"id": id, "name": name, "mimetype": mime, "url_private": url,
                       "url_private_download": url})
            })
            .collect();
        body
    }

    // --- Socket Mode ---

    /// Connections that got `hello` so far.
    pub fn connections(&self) -> u32 {
        self.lock().socket.connections
    }

    pub async fn wait_connections(&self, n: u32) {
        self.wait(&format!("{n} socket mode connections"), |f| {
            (f.connections() >= n && f.lock().socket.conn.is_some()).then_some(())
        })
        .await;
    }

    /// Sends an envelope (now if connected, else on the next connection); returns its id.
    pub fn push(&self, kind: &str, payload: Value) -> String {
        let mut g = self.lock();
        g.socket.next_envelope += 1;
        let id = format!("env-{}", g.socket.next_envelope);
        let envelope = json!({"envelope_id": id, "type": kind, "payload": payload,
                              "accepts_response_payload": false, "retry_attempt": 0});
        g.socket.unacked.push(envelope.clone());
        if let Some(conn) = &g.socket.conn {
            let _ = conn.send(ToSocket::Text(envelope.to_string()));
        }
        id
    }

    /// Slack's retry: every envelope not acknowledged yet is sent again on the live
    /// connection, its `retry_attempt` counted up (Slack retries an envelope that was not
    /// acknowledged within 3 s; see "Socket Mode: retries").
    pub fn redeliver(&self) {
        let mut g = self.lock();
        let Some(conn) = g.socket.conn.clone() else {
            return;
        };
        for e in &mut g.socket.unacked {
            e["retry_attempt"] = json!(e["retry_attempt"].as_u64().unwrap_or(0) + 1);
            e["retry_reason"] = json!("timeout");
            let _ = conn.send(ToSocket::Text(e.to_string()));
        }
    }

    /// Sends a frame as it is (junk, or an envelope without an id).
    pub fn push_raw(&self, text: &str) {
        let g = self.lock();
        if let Some(conn) = &g.socket.conn {
            let _ = conn.send(ToSocket::Text(text.to_string()));
        }
    }

    /// Envelopes sent and not acknowledged yet.
    pub fn unacked(&self) -> Vec<Value> {
        self.lock().socket.unacked.clone()
    }

    pub fn acked(&self, envelope_id: &str) -> bool {
        self.lock().socket.acked.iter().any(|a| a == envelope_id)
    }

    pub async fn wait_acked(&self, envelope_id: &str) {
        self.wait(&format!("the ack of {envelope_id}"), |f| {
            f.acked(envelope_id).then_some(())
        })
        .await;
    }

    /// Drops the connection without a close frame (as a network failure would).
    pub fn drop_socket(&self) {
        let mut g = self.lock();
        if let Some(conn) = g.socket.conn.take() {
            let _ = conn.send(ToSocket::Drop);
        }
    }

    /// Slack's "please reconnect" (`disconnect`, `refresh_requested`).
    pub fn disconnect(&self) {
        let msg = json!({"type": "disconnect", "reason": "refresh_requested",
                         "debug_info": {"host": "fake"}});
        let g = self.lock();
        if let Some(conn) = &g.socket.conn {
            let _ = conn.send(ToSocket::Text(msg.to_string()));
        }
    }

    /// While set, acks are read but the envelopes stay unacknowledged (so the next
    /// connection delivers them again).
    pub fn ignore_acks(&self, on: bool) {
        self.lock().socket.ignore_acks = on;
    }

    // --- payloads ---

    fn event_id(&self) -> String {
        let mut g = self.lock();
        g.next_event += 1;
        format!("Ev{:08}", g.next_event)
    }

    /// A person's message as `event_callback` (`message`); `ts` must be unique.
    pub fn message(
        &self,
        channel: &str,
        user: &str,
        text: &str,
        ts: &str,
        thread_ts: Option<&str>,
    ) -> Value {
        self.event("message", channel, user, text, ts, thread_ts)
    }

    /// The `app_mention` Slack sends beside the `message` of a mention.
    pub fn mention(
        &self,
        channel: &str,
        user: &str,
        text: &str,
        ts: &str,
        thread_ts: Option<&str>,
    ) -> Value {
        self.event("app_mention", channel, user, text, ts, thread_ts)
    }

    fn event(
        &self,
        kind: &str,
        channel: &str,
        user: &str,
        text: &str,
        ts: &str,
        thread_ts: Option<&str>,
    ) -> Value {
        let mut ev = json!({"type": kind, "channel": channel, "user": user, "text": text,
                            "ts": ts, "event_ts": ts,
                            "channel_type": if channel.starts_with('D') { "im" } else { "channel" }});
        if let Some(t) = thread_ts {
            ev["thread_ts"] = json!(t);
        }
        json!({"token": "legacy", "team_id": "T0FAKE", "api_app_id": "A0FAKE",
               "type": "event_callback", "event_id": self.event_id(), "event_time": 1, "event": ev})
    }

    /// A `block_actions` payload: `user` presses the button labelled `label` on `msg`.
    pub fn press(&self, user: &str, msg: &Shown, label: &str) -> Value {
        let (_, action_id, value) = msg
            .buttons()
            .into_iter()
            .find(|b| b.0 == label)
            .unwrap_or_else(|| panic!("no button {label:?} on {msg:?}"));
        let trigger = self.event_id();
        json!({
            "type": "block_actions",
            "user": {"id": user, "username": user, "team_id": "T0FAKE"},
            "api_app_id": "A0FAKE",
            "trigger_id": format!("trigger-{trigger}"),
            "container": {"type": "message", "message_ts": msg.ts, "channel_id": msg.channel,
                          "thread_ts": msg.thread_ts},
            "channel": {"id": msg.channel, "name": "fake"},
            "message": {"ts": msg.ts, "thread_ts": msg.thread_ts, "text": msg.fallback},
            "response_url": "https://hooks.slack.invalid/actions/1",
            "actions": [{"action_id": action_id, "block_id": "tether_approval", "value": value,
                         "type": "button", "action_ts": "1700000001.000001"}],
        })
    }

    /// The `/tether` slash command's fields.
    pub fn slash(&self, channel: &str, user: &str, text: &str) -> Value {
        let trigger = self.event_id();
        json!({"token": "legacy", "team_id": "T0FAKE", "channel_id": channel, "user_id": user,
               "user_name": user, "command": "/tether", "text": text,
               "trigger_id": format!("trigger-{trigger}"),
               "response_url": "https://hooks.slack.invalid/commands/1"})
    }
}

/// The headers of an Events API request signed at `timestamp` (Unix seconds).
pub fn sign(secret: &str, timestamp: i64, body: &[u8]) -> Vec<(&'static str, String)> {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap_or_else(|e| panic!("hmac: {e}"));
    mac.update(format!("v0:{timestamp}:").as_bytes());
    mac.update(body);
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    vec![
        ("x-slack-request-timestamp", timestamp.to_string()),
        ("x-slack-signature", format!("v0={hex}")),
    ]
}

/// Now, in Unix seconds.
pub fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// A form body (`application/x-www-form-urlencoded`) of string fields.
pub fn form(fields: &Value) -> String {
    let mut out = Vec::new();
    for (k, v) in fields.as_object().into_iter().flatten() {
        let v = match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        out.push(format!("{}={}", encode(k), encode(&v)));
    }
    out.join("&")
}

fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}
