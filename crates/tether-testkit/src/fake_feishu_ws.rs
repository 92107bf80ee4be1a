//! The long-connection side of the fake Feishu: `POST /callback/ws/endpoint` (checks the
//! app's id and secret, hands out a socket URL with `device_id` and `service_id`, and the
//! client settings; refusals on demand) and the event WebSocket at `/ws`. Over it the
//! fake pushes events as protobuf frames (whole or in parts, in any order, or raw bytes),
//! answers pings with a pong carrying the settings, and records each answer by message
//! id. Like Feishu, it delivers an event again on the next connection until it is
//! answered with code 200, and can drop the socket (no close frame) or lose an answer.
//! The frame schema is declared here on its own, so tether's is checked against it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine;
use prost::Message as _;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{APP_ID, APP_SECRET};

#[derive(Clone, PartialEq, prost::Message)]
pub struct WsHeader {
    #[prost(string, required, tag = "1")]
    pub key: String,
    #[prost(string, required, tag = "2")]
    pub value: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct WsFrame {
    #[prost(uint64, required, tag = "1")]
    pub seq_id: u64,
    #[prost(uint64, required, tag = "2")]
    pub log_id: u64,
    #[prost(int32, required, tag = "3")]
    pub service: i32,
    #[prost(int32, required, tag = "4")]
    pub method: i32,
    #[prost(message, repeated, tag = "5")]
    pub headers: Vec<WsHeader>,
    #[prost(string, optional, tag = "6")]
    pub payload_encoding: Option<String>,
    #[prost(string, optional, tag = "7")]
    pub payload_type: Option<String>,
    #[prost(bytes = "vec", optional, tag = "8")]
    pub payload: Option<Vec<u8>>,
    #[prost(string, optional, tag = "9")]
    pub log_id_new: Option<String>,
}

impl WsFrame {
    pub fn header(&self, key: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|h| h.key == key)
            .map(|h| h.value.as_str())
    }
}

fn hdr(key: &str, value: &str) -> WsHeader {
    WsHeader {
        key: key.into(),
        value: value.into(),
    }
}

pub const SERVICE_ID: i32 = 3141;
const DEVICE_ID: &str = "fake-device-7";

enum Cmd {
    Send(Vec<u8>),
    Drop,
}

/// An answer tether sent for a pushed message.
#[derive(Debug, Clone, PartialEq)]
pub struct WsAnswer {
    pub code: i64,
    /// The answer body (`data`, base64-decoded JSON), if any.
    pub data: Option<Value>,
    /// `biz_rt` header: tether's handling time in ms.
    pub biz_rt_ms: Option<u64>,
}

#[derive(Default)]
pub(super) struct Lc {
    settings: Value,
    endpoint_failures: Vec<i64>,
    endpoint_calls: u32,
    connections: u32,
    live: Option<mpsc::UnboundedSender<Cmd>>,
    pings: Vec<i32>,
    answers: HashMap<String, Vec<WsAnswer>>,
    /// Frames of messages not yet answered with 200, by message id, in push order.
    unanswered: Vec<(String, Vec<Vec<u8>>)>,
    lose_answers: u32,
    next: u64,
}

pub(super) type SharedLc = Arc<Mutex<Lc>>;

fn lock(s: &SharedLc) -> std::sync::MutexGuard<'_, Lc> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

pub(super) fn routes(lc: SharedLc) -> axum::Router {
    lock(&lc).settings = settings(120, 1, 0);
    axum::Router::new()
        .route("/callback/ws/endpoint", post(endpoint))
        .route("/ws", get(upgrade))
        .with_state(lc)
}

fn settings(ping: u64, reconnect: u64, nonce: u64) -> Value {
    json!({"PingInterval": ping, "ReconnectCount": -1, "ReconnectInterval": reconnect,
           "ReconnectNonce": nonce})
}

async fn endpoint(
    State(s): State<SharedLc>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let mut g = lock(&s);
    g.endpoint_calls += 1;
    if body["AppID"] != APP_ID || body["AppSecret"] != APP_SECRET {
        return Json(json!({"code": 403, "msg": "app secret invalid", "data": {}})).into_response();
    }
    if !g.endpoint_failures.is_empty() {
        let code = g.endpoint_failures.remove(0);
        return Json(json!({"code": code, "msg": "system busy", "data": {}})).into_response();
    }
    let host = headers
        .get("host")
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1");
    Json(json!({"code": 0, "msg": "ok", "data": {
        "URL": format!("ws://{host}/ws?device_id={DEVICE_ID}&service_id={SERVICE_ID}"),
        "ClientConfig": g.settings,
    }}))
    .into_response()
}

async fn upgrade(
    State(s): State<SharedLc>,
    Query(q): Query<HashMap<String, String>>,
    ws: WebSocketUpgrade,
) -> Response {
    if q.get("device_id").map(String::as_str) != Some(DEVICE_ID) {
        return (
            axum::http::StatusCode::FORBIDDEN,
            [("handshake-status", "403")],
        )
            .into_response();
    }
    ws.on_upgrade(move |socket| serve(s, socket))
}

async fn serve(s: SharedLc, mut socket: WebSocket) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let resend: Vec<Vec<u8>> = {
        let mut g = lock(&s);
        g.connections += 1;
        g.live = Some(tx);
        g.unanswered.iter().flat_map(|(_, f)| f.clone()).collect()
    };
    for f in resend {
        if socket.send(Message::Binary(f.into())).await.is_err() {
            return;
        }
    }
    loop {
        tokio::select! {
            cmd = rx.recv() => match cmd {
                Some(Cmd::Send(bytes)) => {
                    if socket.send(Message::Binary(bytes.into())).await.is_err() {
                        return;
                    }
                }
                // Dropped without a close frame, as a lost connection is.
                Some(Cmd::Drop) | None => return,
            },
            msg = socket.recv() => {
                let Some(Ok(msg)) = msg else { return };
                let Message::Binary(bytes) = msg else { continue };
                let Ok(frame) = WsFrame::decode(bytes.as_ref()) else { continue };
                if frame.method == 0 {
                    if frame.header("type") == Some("ping") {
                        let payload = {
                            let mut g = lock(&s);
                            g.pings.push(frame.service);
                            g.settings.to_string()
                        };
                        let pong = WsFrame {
                            service: SERVICE_ID,
                            method: 0,
                            headers: vec![hdr("type", "pong")],
                            payload: Some(payload.into_bytes()),
                            ..Default::default()
                        };
                        if socket.send(Message::Binary(pong.encode_to_vec().into())).await.is_err() {
                            return;
                        }
                    }
                    continue;
                }
                record_answer(&s, &frame);
            }
        }
    }
}

fn record_answer(s: &SharedLc, frame: &WsFrame) {
    let Some(id) = frame.header("message_id").map(str::to_string) else {
        return;
    };
    let body: Value = frame
        .payload
        .as_deref()
        .and_then(|p| serde_json::from_slice(p).ok())
        .unwrap_or(Value::Null);
    let data = body["data"].as_str().and_then(|d| {
        let bytes = base64::engine::general_purpose::STANDARD.decode(d).ok()?;
        serde_json::from_slice(&bytes).ok()
    });
    let answer = WsAnswer {
        code: body["code"].as_i64().unwrap_or(-1),
        data,
        biz_rt_ms: frame.header("biz_rt").and_then(|v| v.parse().ok()),
    };
    let mut g = lock(s);
    if g.lose_answers > 0 {
        g.lose_answers -= 1;
        return;
    }
    if answer.code == 200 {
        g.unanswered.retain(|(m, _)| *m != id);
    }
    g.answers.entry(id).or_default().push(answer);
}

/// The data frames of one message: its payload cut into `parts` pieces.
fn frames_of(id: &str, kind: &str, payload: &[u8], parts: usize) -> Vec<Vec<u8>> {
    let parts = parts.max(1);
    let size = payload.len().div_ceil(parts).max(1);
    let chunks: Vec<&[u8]> = payload.chunks(size).collect();
    let sum = chunks.len();
    chunks
        .iter()
        .enumerate()
        .map(|(seq, c)| {
            WsFrame {
                seq_id: seq as u64,
                log_id: 9,
                service: SERVICE_ID,
                method: 1,
                headers: vec![
                    hdr("type", kind),
                    hdr("message_id", id),
                    hdr("sum", &sum.to_string()),
                    hdr("seq", &seq.to_string()),
                    hdr("trace_id", "trace-1"),
                ],
                payload: Some(c.to_vec()),
                ..Default::default()
            }
            .encode_to_vec()
        })
        .collect()
}

impl super::FakeFeishu {
    fn lc(&self) -> std::sync::MutexGuard<'_, Lc> {
        lock(&self.lc)
    }

    /// `[channels.feishu]` pointing here with no webhook: the long connection.
    pub fn long_connection_config(&self, allowed_users: &[&str], extra: &str) -> String {
        let users: Vec<String> = allowed_users.iter().map(|u| format!("{u:?}")).collect();
        format!(
            "[channels]\nprogress_interval_ms = 300\nretry_base_ms = 100\nidle_poll_ms = 200\n\n\
             [channels.feishu]\napp_id = \"{APP_ID}\"\napp_secret = \"{APP_SECRET}\"\n\
             base_url = \"{}\"\nallowed_users = [{}]\n{extra}\n",
            self.base_url,
            users.join(", ")
        )
    }

    /// The client settings handed out (seconds).
    pub fn set_ws_settings(&self, ping: u64, reconnect: u64, nonce: u64) {
        self.lc().settings = settings(ping, reconnect, nonce);
    }

    /// The next endpoint requests answer these codes (1: system busy).
    pub fn fail_ws_endpoint(&self, codes: &[i64]) {
        self.lc().endpoint_failures.extend_from_slice(codes);
    }

    pub fn ws_endpoint_calls(&self) -> u32 {
        self.lc().endpoint_calls
    }

    /// Sockets opened so far.
    pub fn ws_connections(&self) -> u32 {
        self.lc().connections
    }

    /// The service ids of the pings received.
    pub fn ws_pings(&self) -> Vec<i32> {
        self.lc().pings.clone()
    }

    pub async fn wait_ws_connections(&self, n: u32) {
        self.wait(&format!("{n} long connection(s)"), |f| {
            (f.ws_connections() >= n && f.lc().live.is_some()).then_some(())
        })
        .await;
    }

    /// Pushes an event (`kind` "event" or "card") in `parts` frames sent in `order` (by
    /// part index; all parts in order when empty); returns its message id.
    pub fn push_ws_parts(
        &self,
        kind: &str,
        payload: &Value,
        parts: usize,
        order: &[usize],
    ) -> String {
        let mut g = self.lc();
        g.next += 1;
        let id = format!("ws_msg_{}", g.next);
        let frames = frames_of(&id, kind, payload.to_string().as_bytes(), parts);
        let sent: Vec<Vec<u8>> = if order.is_empty() {
            frames.clone()
        } else {
            order
                .iter()
                .filter_map(|i| frames.get(*i).cloned())
                .collect()
        };
        g.unanswered.push((id.clone(), frames));
        if let Some(live) = &g.live {
            for f in sent {
                let _ = live.send(Cmd::Send(f));
            }
        }
        id
    }

    /// Pushes an event in one frame; returns its message id.
    pub fn push_ws(&self, payload: &Value) -> String {
        self.push_ws_parts("event", payload, 1, &[])
    }

    /// Feishu's retry: every message not answered with 200 yet is sent again on the live
    /// connection (Feishu delivers an event again when its answer was not a success).
    pub fn redeliver_ws(&self) {
        let g = self.lc();
        if let Some(live) = &g.live {
            for (_, frames) in &g.unanswered {
                for f in frames {
                    let _ = live.send(Cmd::Send(f.clone()));
                }
            }
        }
    }

    /// Sends bytes as they are (not remembered for delivery again).
    pub fn push_ws_raw(&self, bytes: Vec<u8>) {
        if let Some(live) = &self.lc().live {
            let _ = live.send(Cmd::Send(bytes));
        }
    }

    /// A data frame with this payload and headers, encoded (for hostile variations).
    pub fn ws_frame(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
        WsFrame {
            service: SERVICE_ID,
            method: 1,
            headers: headers.iter().map(|(k, v)| hdr(k, v)).collect(),
            payload: Some(payload.to_vec()),
            ..Default::default()
        }
        .encode_to_vec()
    }

    /// Drops the socket without a close frame.
    pub fn drop_ws(&self) {
        if let Some(live) = self.lc().live.take() {
            let _ = live.send(Cmd::Drop);
        }
    }

    /// The next `n` answers are lost on the way (the event stays unanswered).
    pub fn lose_ws_answers(&self, n: u32) {
        self.lc().lose_answers += n;
    }

    /// Every answer recorded for a message.
    pub fn ws_answers(&self, message_id: &str) -> Vec<WsAnswer> {
        self.lc()
            .answers
            .get(message_id)
            .cloned()
            .unwrap_or_default()
    }

    pub async fn wait_ws_answer(&self, message_id: &str) -> WsAnswer {
        self.wait(&format!("an answer to {message_id}"), |f| {
            f.ws_answers(message_id).into_iter().next()
        })
        .await
    }

    /// Messages pushed but not answered with 200.
    pub fn ws_unanswered(&self) -> usize {
        self.lc().unanswered.len()
    }
}
