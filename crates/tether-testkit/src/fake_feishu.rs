//! A fake Feishu / Lark Open API on loopback (tenant token, message send with `uuid`
//! idempotency, card PATCH and text PUT updates, every call recorded with its status,
//! 429 / 500 failures on demand), plus [`Events`]: builds event callbacks as Feishu
//! sends them — encrypted (AES-256-CBC) and signed when an encrypt key is set — for a
//! test to POST to the daemon's `/hooks/feishu`, and the long connection (`ws`: the
//! endpoint and the event WebSocket). The crypto here is written
//! independently of tether's, so the two check each other.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{patch, post};
use serde_json::{Value, json};

use crate::within;

pub const APP_ID: &str = "cli_fake_app";
pub const APP_SECRET: &str = "fake-secret";
const TENANT_TOKEN: &str = "t-fake-tenant-token";

/// One recorded API call.
#[derive(Debug, Clone)]
pub struct Call {
    /// e.g. `POST /open-apis/im/v1/messages`.
    pub route: String,
    pub body: Value,
    pub status: u16,
    pub at: Instant,
}

/// An injected failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// HTTP 429, code 99991400, `x-ogw-ratelimit-reset` seconds.
    RateLimited { reset_secs: u64 },
    /// HTTP 500.
    ServerError,
}

/// A message as the chat shows it now (after updates).
#[derive(Debug, Clone, PartialEq)]
pub struct Shown {
    pub message_id: String,
    pub chat_id: String,
    pub msg_type: String,
    /// The `content` JSON.
    pub content: Value,
    pub uuid: Option<String>,
    pub updates: u32,
}

impl Shown {
    /// The visible text: a text message's text, or a card's title and texts.
    pub fn text(&self) -> String {
        if self.msg_type == "text" {
            return self.content["text"]
                .as_str()
                .unwrap_or_default()
                .to_string();
        }
        let mut parts = vec![
            self.content["header"]["title"]["content"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        ];
        for e in self.content["elements"].as_array().into_iter().flatten() {
            if let Some(t) = e["text"]["content"].as_str() {
                parts.push(t.to_string());
            }
        }
        parts.join("\n")
    }

    /// `(label, value)` of the card's buttons.
    pub fn buttons(&self) -> Vec<(String, Value)> {
        self.content["elements"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["actions"].as_array())
            .flatten()
            .map(|b| {
                (
                    b["text"]["content"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    b["value"].clone(),
                )
            })
            .collect()
    }
}

#[derive(Default)]
struct Inner {
    calls: Vec<Call>,
    failures: Vec<(String, Failure)>,
    shown: Vec<Shown>,
    next_id: u64,
    /// Message resources (images, files) by (message id, key).
    resources: std::collections::HashMap<(String, String), Vec<u8>>,
    /// Uploaded images and files by their key: (file name, bytes).
    uploads: std::collections::HashMap<String, (String, Vec<u8>)>,
}

/// The running fake (stops when dropped).
pub struct FakeFeishu {
    pub base_url: String,
    inner: Arc<Mutex<Inner>>,
    lc: ws::SharedLc,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for FakeFeishu {
    fn drop(&mut self) {
        self.server.abort();
    }
}

type Shared = Arc<Mutex<Inner>>;

fn reply(status: StatusCode, code: i64, msg: &str, data: Value) -> Response {
    (
        status,
        Json(json!({"code": code, "msg": msg, "data": data})),
    )
        .into_response()
}

fn record(s: &Shared, route: String, body: &Value, status: u16) {
    s.lock()
        .unwrap_or_else(|e| e.into_inner())
        .calls
        .push(Call {
            route,
            body: body.clone(),
            status,
            at: Instant::now(),
        });
}

async fn token(State(s): State<Shared>, Json(body): Json<Value>) -> Response {
    let ok = body["app_id"] == APP_ID && body["app_secret"] == APP_SECRET;
    record(&s, "POST tenant_access_token".into(), &body, 200);
    if !ok {
        return reply(StatusCode::OK, 10014, "app secret invalid", Value::Null);
    }
    Json(json!({"code": 0, "msg": "ok", "tenant_access_token": TENANT_TOKEN, "expire": 7200}))
        .into_response()
}

fn authorized(h: &HeaderMap) -> bool {
    h.get("authorization").and_then(|v| v.to_str().ok()) == Some(&format!("Bearer {TENANT_TOKEN}"))
}

/// A pending failure for a call whose content contains its needle.
fn failure(s: &Shared, content: &str) -> Option<Response> {
    let mut g = s.lock().unwrap_or_else(|e| e.into_inner());
    let i = g
        .failures
        .iter()
        .position(|(n, _)| content.contains(n.as_str()))?;
    let (_, f) = g.failures.remove(i);
    Some(match f {
        Failure::RateLimited { reset_secs } => {
            let mut r = reply(
                StatusCode::TOO_MANY_REQUESTS,
                99991400,
                "request trigger frequency limit",
                Value::Null,
            );
            if let Ok(v) = reset_secs.to_string().parse() {
                r.headers_mut().insert("x-ogw-ratelimit-reset", v);
            }
            r
        }
        Failure::ServerError => reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            1500,
            "internal error",
            Value::Null,
        ),
    })
}

async fn send(
    State(s): State<Shared>,
    Query(q): Query<std::collections::HashMap<String, String>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let route = "POST /open-apis/im/v1/messages".to_string();
    let resp = send_inner(&s, &q, &headers, &body);
    record(&s, route, &body, resp.status().as_u16());
    resp
}

fn send_inner(
    s: &Shared,
    q: &std::collections::HashMap<String, String>,
    headers: &HeaderMap,
    body: &Value,
) -> Response {
    if !authorized(headers) {
        return reply(
            StatusCode::BAD_REQUEST,
            99991663,
            "invalid tenant access token",
            Value::Null,
        );
    }
    if q.get("receive_id_type").map(String::as_str) != Some("chat_id") {
        return reply(
            StatusCode::BAD_REQUEST,
            99992402,
            "receive_id_type missing",
            Value::Null,
        );
    }
    let raw = body["content"].as_str().unwrap_or_default();
    if let Some(r) = failure(s, raw) {
        return r;
    }
    let Ok(content) = serde_json::from_str::<Value>(raw) else {
        return reply(
            StatusCode::BAD_REQUEST,
            230001,
            "content is not JSON",
            Value::Null,
        );
    };
    let mut g = s.lock().unwrap_or_else(|e| e.into_inner());
    let uuid = body["uuid"].as_str().map(str::to_string);
    // Feishu's idempotency: the same uuid returns the message already sent.
    if let Some(u) = &uuid
        && let Some(m) = g.shown.iter().find(|m| m.uuid.as_ref() == Some(u))
    {
        return reply(
            StatusCode::OK,
            0,
            "success",
            json!({"message_id": m.message_id}),
        );
    }
    g.next_id += 1;
    let m = Shown {
        message_id: format!("om_{}", g.next_id),
        chat_id: body["receive_id"].as_str().unwrap_or_default().to_string(),
        msg_type: body["msg_type"].as_str().unwrap_or_default().to_string(),
        content,
        uuid,
        updates: 0,
    };
    g.shown.push(m.clone());
    reply(
        StatusCode::OK,
        0,
        "success",
        json!({"message_id": m.message_id, "chat_id": m.chat_id, "msg_type": m.msg_type}),
    )
}

async fn update(
    State(s): State<Shared>,
    Path(id): Path<String>,
    method: axum::http::Method,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let route = format!("{method} /open-apis/im/v1/messages/{{id}}");
    let resp = if !authorized(&headers) {
        reply(
            StatusCode::BAD_REQUEST,
            99991663,
            "invalid tenant access token",
            Value::Null,
        )
    } else {
        let raw = body["content"].as_str().unwrap_or_default();
        match failure(&s, raw) {
            Some(r) => r,
            None => {
                let mut g = s.lock().unwrap_or_else(|e| e.into_inner());
                match (
                    g.shown.iter_mut().find(|m| m.message_id == id),
                    serde_json::from_str(raw),
                ) {
                    (Some(m), Ok(content)) => {
                        let card = m.msg_type == "interactive";
                        if card != (method == axum::http::Method::PATCH) {
                            reply(
                                StatusCode::BAD_REQUEST,
                                230054,
                                "wrong update method for this message type",
                                Value::Null,
                            )
                        } else {
                            m.content = content;
                            m.updates += 1;
                            reply(StatusCode::OK, 0, "success", json!({}))
                        }
                    }
                    (None, _) => reply(
                        StatusCode::BAD_REQUEST,
                        230011,
                        "message not found",
                        Value::Null,
                    ),
                    (_, Err(_)) => reply(
                        StatusCode::BAD_REQUEST,
                        230001,
                        "content is not JSON",
                        Value::Null,
                    ),
                }
            }
        }
    };
    record(&s, route, &body, resp.status().as_u16());
    resp
}

/// `GET …/messages/{id}/resources/{key}?type=image|file`: the bytes, or Feishu's JSON
/// error for a resource that is not in the message.
async fn resource(
    State(s): State<Shared>,
    Path((id, key)): Path<(String, String)>,
    Query(q): Query<std::collections::HashMap<String, String>>,
) -> Response {
    let kind = q.get("type").map(String::as_str);
    let found = s
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .resources
        .get(&(id.clone(), key.clone()))
        .cloned();
    record(&s, format!("GET resources/{key}"), &Value::Null, 200);
    match (found, kind) {
        (Some(bytes), Some("image" | "file")) => (StatusCode::OK, bytes).into_response(),
        _ => reply(
            StatusCode::NOT_FOUND,
            234003,
            "File not in msg.",
            Value::Null,
        ),
    }
}

/// `POST /open-apis/im/v1/images` (field `image`) or `…/files` (field `file`),
/// multipart: keeps the bytes, answers `image_key` / `file_key`.
async fn upload(
    State(s): State<Shared>,
    headers: HeaderMap,
    uri: axum::http::Uri,
    mut form: axum::extract::Multipart,
) -> Response {
    if !authorized(&headers) {
        return reply(
            StatusCode::BAD_REQUEST,
            99991663,
            "invalid tenant access token",
            Value::Null,
        );
    }
    let image = uri.path().ends_with("/images");
    let field_name = if image { "image" } else { "file" };
    let mut file = None;
    while let Ok(Some(field)) = form.next_field().await {
        let is_file = field.name() == Some(field_name);
        let name = field.file_name().unwrap_or_default().to_owned();
        let Ok(bytes) = field.bytes().await else {
            break;
        };
        if is_file {
            file = Some((name, bytes.to_vec()));
        }
    }
    let Some(file) = file else {
        return reply(StatusCode::BAD_REQUEST, 234001, "no file", Value::Null);
    };
    let mut g = s.lock().unwrap_or_else(|e| e.into_inner());
    g.next_id += 1;
    let key = format!("{}_{}", if image { "img" } else { "file" }, g.next_id);
    g.uploads.insert(key.clone(), file);
    drop(g);
    record(&s, format!("POST {}", uri.path()), &Value::Null, 200);
    let data = if image {
        json!({ "image_key": key })
    } else {
        json!({ "file_key": key })
    };
    reply(StatusCode::OK, 0, "success", data)
}

impl FakeFeishu {
    /// An uploaded image or file by its key: (file name, bytes).
    pub fn uploaded(&self, key: &str) -> Option<(String, Vec<u8>)> {
        self.lock().uploads.get(key).cloned()
    }

    /// Makes a message's resource (image or file) downloadable.
    pub fn add_resource(&self, message_id: &str, key: &str, bytes: &[u8]) {
        self.lock()
            .resources
            .insert((message_id.to_owned(), key.to_owned()), bytes.to_vec());
    }

    pub async fn start() -> FakeFeishu {
        let inner: Shared = Arc::default();
        let lc = ws::SharedLc::default();
        let app = axum::Router::new()
            .route(
                "/open-apis/auth/v3/tenant_access_token/internal",
                post(token),
            )
            .route("/open-apis/im/v1/messages", post(send))
            .route("/open-apis/im/v1/messages/{id}", patch(update).put(update))
            .route(
                "/open-apis/im/v1/messages/{id}/resources/{key}",
                axum::routing::get(resource),
            )
            .route("/open-apis/im/v1/images", post(upload))
            .route("/open-apis/im/v1/files", post(upload))
            .with_state(inner.clone())
            .merge(ws::routes(lc.clone()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("bind: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("addr: {e}"));
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeFeishu {
            base_url: format!("http://{addr}"),
            inner,
            lc,
            server,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `[channels.feishu]` pointing here.
    pub fn config(&self, events: &Events, allowed_users: &[&str], extra: &str) -> String {
        let users: Vec<String> = allowed_users.iter().map(|u| format!("{u:?}")).collect();
        let key = events
            .encrypt_key
            .as_deref()
            .map(|k| format!("encrypt_key = {k:?}\n"))
            .unwrap_or_default();
        format!(
            "[channels]\nprogress_interval_ms = 300\nretry_base_ms = 100\nidle_poll_ms = 200\n\n\
             [channels.feishu]\napp_id = \"{APP_ID}\"\napp_secret = \"{APP_SECRET}\"\n\
             base_url = \"{}\"\nverification_token = {:?}\n{key}allowed_users = [{}]\n{extra}\n",
            self.base_url,
            events.verification_token,
            users.join(", ")
        )
    }

    /// The next calls whose content contains `needle` fail as given.
    pub fn fail(&self, needle: &str, failures: &[Failure]) {
        let mut g = self.lock();
        for f in failures {
            g.failures.push((needle.to_string(), *f));
        }
    }

    pub fn clear_failures(&self) {
        self.lock().failures.clear();
    }

    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// Messages in a chat, in send order, as they look now.
    pub fn shown(&self, chat_id: &str) -> Vec<Shown> {
        self.lock()
            .shown
            .iter()
            .filter(|m| m.chat_id == chat_id)
            .cloned()
            .collect()
    }

    pub async fn wait<T>(&self, what: &str, f: impl Fn(&FakeFeishu) -> Option<T>) -> T {
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

    pub async fn wait_shown(&self, chat_id: &str, needle: &str) -> Shown {
        self.wait(&format!("a message with {needle:?} in {chat_id}"), |f| {
            f.shown(chat_id)
                .into_iter()
                .find(|m| m.text().contains(needle))
        })
        .await
    }

    pub fn count_shown(&self, chat_id: &str, needle: &str) -> usize {
        self.shown(chat_id)
            .iter()
            .filter(|m| m.text().contains(needle))
            .count()
    }
}

#[path = "fake_feishu_events.rs"]
mod events;
pub use events::{Events, Sealed, encrypt, sign};

#[path = "fake_feishu_ws.rs"]
mod ws;
pub use ws::{SERVICE_ID, WsAnswer, WsFrame, WsHeader};
