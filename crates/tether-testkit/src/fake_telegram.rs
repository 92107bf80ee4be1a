//! A fake Telegram Bot API on loopback: `getUpdates` long polling over a queue of
//! updates the test pushes, `sendMessage` / `editMessageText` / `answerCallbackQuery` /
//! `setMyCommands` / `getMe`, every call recorded with its reply status, and failures
//! (429 with `retry_after`, 500) injected on demand. Point `[channels.telegram]
//! base_url` at [`FakeTelegram::base_url`].

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use serde_json::{Value, json};

use crate::within;

/// The bot token the fake accepts.
pub const BOT_TOKEN: &str = "123456:fake-token";
/// The bot's username (`getMe`).
pub const BOT_USERNAME: &str = "tether_test_bot";

/// One recorded API call.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: String,
    pub body: Value,
    /// The HTTP status the fake answered with.
    pub status: u16,
    /// When the answer went out.
    pub at: Instant,
    /// When the call came in (a long poll waits in between).
    pub started: Instant,
    /// Who called, when it came through a base URL of [`FakeTelegram::base_url_via`]
    /// (API methods other than `getUpdates` and file uploads).
    pub caller: Option<String>,
    /// The caller's end of the connection (calls through such a base URL): a process
    /// that dies takes its connections with it, so two calls on one address came from
    /// one process.
    pub peer: Option<std::net::SocketAddr>,
}

/// An injected failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// 429 with `parameters.retry_after` seconds.
    TooManyRequests { retry_after: u64 },
    /// 500.
    ServerError,
}

/// A message as the chat shows it now (after edits).
#[derive(Debug, Clone, PartialEq)]
pub struct Shown {
    pub chat_id: i64,
    pub message_id: i64,
    pub thread_id: Option<i64>,
    /// The text as sent (HTML parse mode).
    pub html: String,
    /// `(label, callback_data)` of the inline keyboard.
    pub buttons: Vec<(String, String)>,
    pub edits: u32,
}

impl Shown {
    /// The text a person sees (tags removed, entities decoded).
    pub fn text(&self) -> String {
        plain(&self.html)
    }
}

/// HTML parse-mode text → what Telegram shows.
pub fn plain(html: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&amp;", "&")
}

#[derive(Default)]
struct Inner {
    updates: VecDeque<Value>,
    next_update_id: i64,
    next_message_id: i64,
    calls: Vec<Call>,
    /// Failures for the next matching calls: (method, text needle, failure).
    failures: Vec<(String, String, Failure)>,
    shown: Vec<Shown>,
    /// Files people "sent", by `file_id` (served by `getFile` and the file path).
    files: std::collections::HashMap<String, Vec<u8>>,
    /// Files whose download (not `getFile`) fails with 404.
    broken_downloads: Vec<String>,
    /// Files the bot sent (`sendDocument`, `sendPhoto`).
    sent_files: Vec<SentFile>,
    /// (caller, text needle): the caller's next `sendMessage` with the needle in its text
    /// waits, unanswered, until its [`Hold`] is released.
    holds: Vec<(String, String, Hold)>,
}

/// A caller's next `sendMessage`, held unanswered ([`FakeTelegram::hold_next_send`]).
#[derive(Clone)]
pub struct Hold {
    gate: Arc<tokio::sync::Semaphore>,
    arrived: Arc<std::sync::atomic::AtomicBool>,
}

impl Hold {
    /// Whether the held call has come in.
    pub fn arrived(&self) -> bool {
        self.arrived.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Answers the held call (as it would have been answered).
    pub fn release(&self) {
        self.gate.add_permits(1);
    }
}

/// A file the bot sent.
#[derive(Debug, Clone)]
pub struct SentFile {
    pub chat_id: i64,
    /// `sendDocument` or `sendPhoto`.
    pub method: String,
    pub name: String,
    pub caption: String,
    pub bytes: Vec<u8>,
}

/// The running fake (stops when dropped).
pub struct FakeTelegram {
    pub base_url: String,
    inner: Arc<Mutex<Inner>>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for FakeTelegram {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn ok(result: Value) -> (StatusCode, Json<Value>) {
    (StatusCode::OK, Json(json!({"ok": true, "result": result})))
}

fn err(status: StatusCode, description: &str, extra: Value) -> (StatusCode, Json<Value>) {
    let mut body = json!({"ok": false, "error_code": status.as_u16(), "description": description});
    if !extra.is_null() {
        body["parameters"] = extra;
    }
    (status, Json(body))
}

fn buttons(body: &Value) -> Vec<(String, String)> {
    body["reply_markup"]["inline_keyboard"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_array)
        .flatten()
        .map(|b| {
            (
                b["text"].as_str().unwrap_or_default().to_string(),
                b["callback_data"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

async fn api(
    State(inner): State<Arc<Mutex<Inner>>>,
    Path((bot, method)): Path<(String, String)>,
    req: axum::extract::Request,
) -> (StatusCode, Json<Value>) {
    api_as(inner, None, bot, method, req).await
}

/// [`api`] through `/via/<caller>/…`: the call is recorded with its caller.
async fn api_via(
    State(inner): State<Arc<Mutex<Inner>>>,
    Path((caller, bot, method)): Path<(String, String, String)>,
    axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<std::net::SocketAddr>,
    req: axum::extract::Request,
) -> (StatusCode, Json<Value>) {
    api_as(inner, Some((caller, peer)), bot, method, req).await
}

async fn api_as(
    inner: Arc<Mutex<Inner>>,
    caller: Option<(String, std::net::SocketAddr)>,
    bot: String,
    method: String,
    req: axum::extract::Request,
) -> (StatusCode, Json<Value>) {
    use axum::extract::FromRequest;
    let started = Instant::now();
    let (caller, peer) = caller.unzip();
    if bot != format!("bot{BOT_TOKEN}") {
        return err(StatusCode::UNAUTHORIZED, "Unauthorized", Value::Null);
    }
    if method == "sendDocument" || method == "sendPhoto" {
        let Ok(form) = axum::extract::Multipart::from_request(req, &()).await else {
            return err(
                StatusCode::BAD_REQUEST,
                "Bad Request: not multipart",
                Value::Null,
            );
        };
        return send_file(inner, &method, form).await;
    }
    let Ok(Json(body)) = Json::<Value>::from_request(req, &()).await else {
        return err(
            StatusCode::BAD_REQUEST,
            "Bad Request: not JSON",
            Value::Null,
        );
    };
    if method == "getUpdates" {
        return get_updates(inner, body).await;
    }
    let held = {
        let mut s = inner.lock().unwrap_or_else(|e| e.into_inner());
        let text = plain(body["text"].as_str().unwrap_or_default());
        let at = s.holds.iter().position(|(c, needle, _)| {
            method == "sendMessage" && Some(c) == caller.as_ref() && text.contains(needle.as_str())
        });
        at.map(|i| s.holds.remove(i).2)
    };
    if let Some(hold) = held {
        hold.arrived
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = hold.gate.acquire().await;
    }
    let mut s = inner.lock().unwrap_or_else(|e| e.into_inner());
    let (status, reply) = answer(&mut s, &method, &body);
    s.calls.push(Call {
        method,
        body,
        status: status.as_u16(),
        at: Instant::now(),
        started,
        caller,
        peer,
    });
    (status, reply)
}

fn answer(s: &mut Inner, method: &str, body: &Value) -> (StatusCode, Json<Value>) {
    let text = body["text"].as_str().unwrap_or_default();
    let failure = s
        .failures
        .iter()
        .position(|(m, needle, _)| m == method && plain(text).contains(needle.as_str()));
    if let Some(i) = failure {
        let (_, _, f) = s.failures.remove(i);
        return match f {
            Failure::TooManyRequests { retry_after } => err(
                StatusCode::TOO_MANY_REQUESTS,
                &format!("Too Many Requests: retry after {retry_after}"),
                json!({"retry_after": retry_after}),
            ),
            Failure::ServerError => err(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Internal Server Error",
                Value::Null,
            ),
        };
    }
    let chat_id = body["chat_id"].as_i64().unwrap_or_default();
    match method {
        "getMe" => ok(json!({"id": 42, "is_bot": true, "first_name": "Tether",
                             "username": BOT_USERNAME})),
        "setMyCommands" | "answerCallbackQuery" | "deleteWebhook" | "setWebhook" => ok(json!(true)),
        "getFile" => {
            let id = body["file_id"].as_str().unwrap_or_default();
            match s.files.get(id) {
                Some(bytes) => ok(json!({"file_id": id, "file_unique_id": id,
                    "file_size": bytes.len(), "file_path": format!("documents/{id}")})),
                None => err(
                    StatusCode::BAD_REQUEST,
                    "Bad Request: invalid file_id",
                    Value::Null,
                ),
            }
        }
        "sendMessage" => {
            if text.is_empty() {
                return err(
                    StatusCode::BAD_REQUEST,
                    "Bad Request: message text is empty",
                    Value::Null,
                );
            }
            s.next_message_id += 1;
            let shown = Shown {
                chat_id,
                message_id: s.next_message_id,
                thread_id: body["message_thread_id"].as_i64(),
                html: text.to_string(),
                buttons: buttons(body),
                edits: 0,
            };
            s.shown.push(shown.clone());
            ok(json!({"message_id": shown.message_id, "date": 0,
                      "chat": {"id": chat_id, "type": "private"}, "text": text}))
        }
        "editMessageText" => {
            let id = body["message_id"].as_i64().unwrap_or_default();
            let Some(m) = s
                .shown
                .iter_mut()
                .find(|m| m.chat_id == chat_id && m.message_id == id)
            else {
                return err(
                    StatusCode::BAD_REQUEST,
                    "Bad Request: message to edit not found",
                    Value::Null,
                );
            };
            let new_buttons = buttons(body);
            if m.html == text && m.buttons == new_buttons {
                return err(
                    StatusCode::BAD_REQUEST,
                    "Bad Request: message is not modified: specified new message content and reply markup are exactly the same",
                    Value::Null,
                );
            }
            m.html = text.to_string();
            m.buttons = new_buttons;
            m.edits += 1;
            ok(
                json!({"message_id": id, "date": 0, "chat": {"id": chat_id, "type": "private"},
                      "text": text}),
            )
        }
        other => err(
            StatusCode::NOT_FOUND,
            &format!("Not Found: method {other}"),
            Value::Null,
        ),
    }
}

/// `sendDocument` / `sendPhoto` (multipart): records the file, answers a message.
async fn send_file(
    inner: Arc<Mutex<Inner>>,
    method: &str,
    mut form: axum::extract::Multipart,
) -> (StatusCode, Json<Value>) {
    let field_name = if method == "sendPhoto" {
        "photo"
    } else {
        "document"
    };
    let (mut chat_id, mut caption, mut file) = (0, String::new(), None);
    while let Ok(Some(field)) = form.next_field().await {
        let name = field.name().unwrap_or_default().to_owned();
        let file_name = field.file_name().map(str::to_owned);
        let Ok(bytes) = field.bytes().await else {
            break;
        };
        match name.as_str() {
            "chat_id" => chat_id = String::from_utf8_lossy(&bytes).parse().unwrap_or_default(),
            "caption" => caption = String::from_utf8_lossy(&bytes).into_owned(),
            n if n == field_name => file = Some((file_name.unwrap_or_default(), bytes.to_vec())),
            _ => {}
        }
    }
    let Some((name, bytes)) = file else {
        return err(
            StatusCode::BAD_REQUEST,
            "Bad Request: there is no file in the request",
            Value::Null,
        );
    };
    let mut s = inner.lock().unwrap_or_else(|e| e.into_inner());
    s.next_message_id += 1;
    let id = s.next_message_id;
    s.sent_files.push(SentFile {
        chat_id,
        method: method.to_owned(),
        name,
        caption,
        bytes,
    });
    s.calls.push(Call {
        method: method.to_owned(),
        body: json!({"chat_id": chat_id}),
        status: 200,
        at: Instant::now(),
        started: Instant::now(),
        caller: None,
        peer: None,
    });
    ok(json!({"message_id": id, "date": 0, "chat": {"id": chat_id, "type": "private"}}))
}

/// [`download`] through `/via/<caller>/…`.
async fn download_via(
    State(inner): State<Arc<Mutex<Inner>>>,
    Path((_caller, bot, id)): Path<(String, String, String)>,
) -> (StatusCode, Vec<u8>) {
    download(State(inner), Path((bot, id))).await
}

/// `GET /file/bot<token>/<file_path>`: the bytes of a file `getFile` named.
async fn download(
    State(inner): State<Arc<Mutex<Inner>>>,
    Path((bot, id)): Path<(String, String)>,
) -> (StatusCode, Vec<u8>) {
    let s = inner.lock().unwrap_or_else(|e| e.into_inner());
    if bot != format!("bot{BOT_TOKEN}") || s.broken_downloads.contains(&id) {
        return (StatusCode::NOT_FOUND, Vec::new());
    }
    match s.files.get(&id) {
        Some(bytes) => (StatusCode::OK, bytes.clone()),
        None => (StatusCode::NOT_FOUND, Vec::new()),
    }
}

async fn get_updates(inner: Arc<Mutex<Inner>>, body: Value) -> (StatusCode, Json<Value>) {
    let offset = body["offset"].as_i64().unwrap_or(0);
    let timeout = Duration::from_secs(body["timeout"].as_u64().unwrap_or(0).min(30));
    let started = Instant::now();
    let deadline = started + timeout;
    loop {
        {
            let mut s = inner.lock().unwrap_or_else(|e| e.into_inner());
            // Updates below the offset are confirmed: gone for good.
            s.updates
                .retain(|u| u["update_id"].as_i64().unwrap_or_default() >= offset);
            if !s.updates.is_empty() || Instant::now() >= deadline {
                let result: Vec<Value> = s.updates.iter().cloned().collect();
                s.calls.push(Call {
                    method: "getUpdates".into(),
                    body: body.clone(),
                    status: 200,
                    at: Instant::now(),
                    started,
                    caller: None,
                    peer: None,
                });
                return ok(Value::Array(result));
            }
        }
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
}

impl FakeTelegram {
    pub async fn start() -> FakeTelegram {
        let inner = Arc::new(Mutex::new(Inner {
            next_update_id: 1000,
            ..Default::default()
        }));
        let app = axum::Router::new()
            .route("/{bot}/{method}", post(api))
            .route("/file/{bot}/documents/{id}", axum::routing::get(download))
            .route("/via/{caller}/{bot}/{method}", post(api_via))
            .route(
                "/via/{caller}/file/{bot}/documents/{id}",
                axum::routing::get(download_via),
            )
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("bind: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("addr: {e}"));
        let server = tokio::spawn(async move {
            let app = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
            let _ = axum::serve(listener, app).await;
        });
        FakeTelegram {
            base_url: format!("http://{addr}"),
            inner,
            server,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes a file downloadable by `file_id` (what a person's photo or document is).
    pub fn add_file(&self, file_id: &str, bytes: &[u8]) {
        self.lock().files.insert(file_id.to_owned(), bytes.to_vec());
    }

    /// The files the bot sent to a chat.
    pub fn sent_files(&self, chat_id: i64) -> Vec<SentFile> {
        self.lock()
            .sent_files
            .iter()
            .filter(|f| f.chat_id == chat_id)
            .cloned()
            .collect()
    }

    /// `getFile` answers for this file, but its download fails (404).
    pub fn break_download(&self, file_id: &str) {
        self.lock().broken_downloads.push(file_id.to_owned());
    }

    /// Config for `[channels.telegram]` pointing here (polling unless `extra` says else).
    pub fn config(&self, allowed_users: &[i64], extra: &str) -> String {
        self.config_at(&self.base_url, allowed_users, extra)
    }

    /// A base URL whose calls are recorded with `caller` ([`Call::caller`]): which of
    /// several daemons made a call.
    pub fn base_url_via(&self, caller: &str) -> String {
        format!("{}/via/{caller}", self.base_url)
    }

    /// [`FakeTelegram::config`] with the base URL of [`FakeTelegram::base_url_via`].
    pub fn config_via(&self, caller: &str, allowed_users: &[i64], extra: &str) -> String {
        self.config_at(&self.base_url_via(caller), allowed_users, extra)
    }

    fn config_at(&self, base_url: &str, allowed_users: &[i64], extra: &str) -> String {
        let users: Vec<String> = allowed_users.iter().map(i64::to_string).collect();
        format!(
            "[channels]\nprogress_interval_ms = 300\nretry_base_ms = 100\nidle_poll_ms = 200\n\n\
             [channels.telegram]\nbot_token = \"{BOT_TOKEN}\"\nbase_url = \"{}\"\n\
             allowed_users = [{}]\npoll_timeout_secs = 1\n{extra}\n",
            base_url,
            users.join(", ")
        )
    }

    /// Builds an update without queueing it (for webhook tests). `update_id` is fresh.
    pub fn make_update(&self, kind: &str, payload: Value) -> Value {
        let mut s = self.lock();
        s.next_update_id += 1;
        json!({ "update_id": s.next_update_id, kind: payload })
    }

    /// Queues an update for `getUpdates`.
    pub fn push(&self, update: Value) -> i64 {
        let id = update["update_id"].as_i64().unwrap_or_default();
        self.lock().updates.push_back(update);
        id
    }

    /// A text message update from `user` (id, first name) in a chat.
    pub fn text_update(&self, chat: &Value, user: (i64, &str), text: &str) -> Value {
        let mut msg = json!({
            "message_id": 1,
            "date": 0,
            "chat": chat,
            "from": {"id": user.0, "is_bot": false, "first_name": user.1},
            "text": text,
        });
        if let Some(thread) = chat.get("__thread").and_then(Value::as_i64) {
            msg["message_thread_id"] = json!(thread);
            msg["is_topic_message"] = json!(true);
            msg["chat"] = json!({"id": chat["id"], "type": "supergroup", "title": chat["title"],
                                 "is_forum": true});
        }
        self.make_update("message", msg)
    }

    /// Queues a text message; returns its update id.
    pub fn say(&self, chat: &Value, user: (i64, &str), text: &str) -> i64 {
        let u = self.text_update(chat, user, text);
        self.push(u)
    }

    /// A button press on a shown message; returns the update id.
    pub fn press(&self, user: (i64, &str), message: &Shown, callback_data: &str) -> i64 {
        let mut chat = json!({"id": message.chat_id, "type": "private"});
        if message.chat_id < 0 {
            chat = json!({"id": message.chat_id, "type": "supergroup", "is_forum": true});
        }
        let mut msg = json!({"message_id": message.message_id, "date": 0, "chat": chat,
                             "text": message.text()});
        if let Some(t) = message.thread_id {
            msg["message_thread_id"] = json!(t);
            msg["is_topic_message"] = json!(true);
        }
        let s = self.make_update(
            "callback_query",
            json!({"id": format!("cb{}", message.message_id), "chat_instance": "x",
                   "from": {"id": user.0, "is_bot": false, "first_name": user.1},
                   "message": msg, "data": callback_data}),
        );
        self.push(s)
    }

    /// The next `count` calls of `method` whose text contains `needle` fail as given.
    pub fn fail(&self, method: &str, needle: &str, failures: &[Failure]) {
        let mut s = self.lock();
        for f in failures {
            s.failures
                .push((method.to_string(), needle.to_string(), *f));
        }
    }

    /// Holds the next `sendMessage` that `caller` makes ([`FakeTelegram::config_via`])
    /// with `needle` in its text unanswered until the returned [`Hold`] is released; it
    /// is recorded then.
    pub fn hold_next_send(&self, caller: &str, needle: &str) -> Hold {
        let hold = Hold {
            gate: Arc::new(tokio::sync::Semaphore::new(0)),
            arrived: Arc::default(),
        };
        self.lock()
            .holds
            .push((caller.to_string(), needle.to_string(), hold.clone()));
        hold
    }

    /// Drops every injected failure not yet used.
    pub fn clear_failures(&self) {
        self.lock().failures.clear();
    }

    pub fn calls(&self, method: &str) -> Vec<Call> {
        self.lock()
            .calls
            .iter()
            .filter(|c| c.method == method)
            .cloned()
            .collect()
    }

    /// Messages in a chat (all topics), in send order, as they look now.
    /// How many answered `getUpdates` calls that came in after `since` overlapped an
    /// earlier one (two pollers at once; Telegram itself refuses the second with 409).
    pub fn overlapping_polls(&self, since: Instant) -> usize {
        let mut polls: Vec<(Instant, Instant)> = self
            .calls("getUpdates")
            .iter()
            .filter(|c| c.started >= since)
            .map(|c| (c.started, c.at))
            .collect();
        polls.sort();
        let mut busy_until: Option<Instant> = None;
        let mut overlaps = 0;
        for (start, end) in polls {
            if busy_until.is_some_and(|b| start < b) {
                overlaps += 1;
            }
            busy_until = Some(busy_until.map_or(end, |b| b.max(end)));
        }
        overlaps
    }

    pub fn shown(&self, chat_id: i64) -> Vec<Shown> {
        self.lock()
            .shown
            .iter()
            .filter(|m| m.chat_id == chat_id)
            .cloned()
            .collect()
    }

    /// Polls until `f` returns `Some`.
    pub async fn wait<T>(&self, what: &str, f: impl Fn(&FakeTelegram) -> Option<T>) -> T {
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

    /// Waits for a message in the chat whose text contains `needle`.
    pub async fn wait_shown(&self, chat_id: i64, needle: &str) -> Shown {
        self.wait(
            &format!("a message with {needle:?} in chat {chat_id}"),
            |t| {
                t.shown(chat_id)
                    .into_iter()
                    .find(|m| m.text().contains(needle))
            },
        )
        .await
    }

    /// How many messages in the chat contain `needle`.
    pub fn count_shown(&self, chat_id: i64, needle: &str) -> usize {
        self.shown(chat_id)
            .iter()
            .filter(|m| m.text().contains(needle))
            .count()
    }
}

/// A private chat with a user.
pub fn private_chat(user_id: i64) -> Value {
    json!({"id": user_id, "type": "private", "first_name": "User"})
}

/// A forum topic in a supergroup (its own conversation).
pub fn forum_topic(chat_id: i64, title: &str, thread_id: i64) -> Value {
    json!({"id": chat_id, "type": "supergroup", "title": title, "__thread": thread_id})
}

/// A plain group.
pub fn group_chat(chat_id: i64, title: &str) -> Value {
    json!({"id": chat_id, "type": "group", "title": title})
}
