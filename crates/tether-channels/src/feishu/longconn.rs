//! Feishu's long connection: tether opens the event WebSocket Feishu's SDKs open, so no
//! public URL is needed. `POST {base}/callback/ws/endpoint` with the app's id and secret
//! gives the socket's URL (naming the service to ping) and the client settings; over the
//! socket come protobuf frames (see `frame`); each event is answered on the socket with
//! its code (200 handled; 500 could not be recorded, so Feishu delivers it again), a card
//! button's answer carrying the toast. Events go through the same `events::dispatch` as
//! the webhook's, deduplicated by `event_id`, so a message Feishu sends again after a
//! dropped connection is handled once. Pings keep the connection; a connection silent for
//! three ping intervals, closed, or failed is opened again after a random wait up to
//! Feishu's `ReconnectNonce`; failed attempts back off (1 s doubling, capped at Feishu's
//! `ReconnectInterval`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use rand::Rng;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use super::events::{self, Answer, EventsIntake};
use super::frame::{ClientConfig, Frame, METHOD_CONTROL, METHOD_DATA, Reassembly};
use super::wire::{EndpointReply, Envelope, LegacyCard, Settings};
use super::{crypto, webhook};
use crate::config::FeishuConfig;
use crate::json::parse;

const ENDPOINT_PATH: &str = "/callback/ws/endpoint";
const ENDPOINT_TIMEOUT: Duration = Duration::from_secs(15);
/// Feishu's endpoint codes that say "try again later" rather than "these credentials are
/// refused".
const CODE_SYSTEM_BUSY: i64 = 1;
const CODE_INTERNAL_ERROR: i64 = 1_000_040_343;

/// Why a connection could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("endpoint request failed: {0}")]
    Transport(String),
    #[error("endpoint answered code {code}: {msg}")]
    Refused { code: i64, msg: String, busy: bool },
    #[error("endpoint answer is unusable: {0}")]
    BadAnswer(String),
    #[error("WebSocket handshake failed: {0}")]
    Handshake(String),
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// An open connection: the socket, the service id pings name, Feishu's settings.
struct Session {
    socket: Socket,
    service: i32,
    settings: ClientConfig,
}

/// Asks Feishu where to connect (also `tether doctor`'s check of the credentials).
pub async fn endpoint(
    http: &reqwest::Client,
    cfg: &FeishuConfig,
) -> Result<(String, Settings), ConnectError> {
    let url = format!("{}{ENDPOINT_PATH}", cfg.base_url.trim_end_matches('/'));
    let resp = http
        .post(url)
        .header("locale", "zh")
        .timeout(ENDPOINT_TIMEOUT)
        .json(&serde_json::json!({ "AppID": cfg.app_id, "AppSecret": cfg.app_secret }))
        .send()
        .await
        .map_err(|e| ConnectError::Transport(e.to_string()))?;
    let status = resp.status();
    let body: EndpointReply = resp
        .json()
        .await
        .map_err(|e| ConnectError::BadAnswer(format!("HTTP {status}: {e}")))?;
    let code = body.code.unwrap_or(-1);
    if code != 0 {
        return Err(ConnectError::Refused {
            code,
            msg: body.msg.unwrap_or_default(),
            busy: code == CODE_SYSTEM_BUSY || code == CODE_INTERNAL_ERROR,
        });
    }
    let url = body
        .data
        .url
        .filter(|u| u.starts_with("ws://") || u.starts_with("wss://"))
        .ok_or_else(|| ConnectError::BadAnswer("no ws(s):// URL".into()))?;
    Ok((url, body.data.client_config))
}

/// The `service_id` query parameter of the socket URL (pings carry it).
fn service_id(url: &str) -> i32 {
    url.split_once('?')
        .map(|(_, q)| q)
        .unwrap_or_default()
        .split('&')
        .find_map(|kv| kv.strip_prefix("service_id="))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

async fn connect(
    http: &reqwest::Client,
    cfg: &FeishuConfig,
    settings: &mut ClientConfig,
) -> Result<Session, ConnectError> {
    let (url, client_config) = endpoint(http, cfg).await?;
    settings.update(&client_config);
    let (socket, _) = tokio_tungstenite::connect_async(url.as_str())
        .await
        .map_err(|e| ConnectError::Handshake(handshake_reason(&e)))?;
    Ok(Session {
        socket,
        service: service_id(&url),
        settings: *settings,
    })
}

/// Feishu explains a refused handshake in `Handshake-*` headers.
fn handshake_reason(e: &tokio_tungstenite::tungstenite::Error) -> String {
    if let tokio_tungstenite::tungstenite::Error::Http(resp) = e {
        let h = |k: &str| {
            resp.headers()
                .get(k)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string()
        };
        return format!(
            "HTTP {} (status {}, auth code {}: {})",
            resp.status(),
            h("handshake-status"),
            h("handshake-autherrcode"),
            h("handshake-msg")
        );
    }
    e.to_string()
}

/// Runs the long connection for good: connect, serve, connect again.
pub(crate) fn start(intake: EventsIntake, cfg: Arc<FeishuConfig>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let http = reqwest::Client::new();
        let mut settings = ClientConfig::default();
        let mut failures: u32 = 0;
        loop {
            match connect(&http, &cfg, &mut settings).await {
                Ok(session) => {
                    failures = 0;
                    tracing::info!(channel = "feishu", "long connection open");
                    let why = serve(&intake, &cfg, session, &mut settings).await;
                    tracing::warn!(channel = "feishu", "long connection ended: {why}");
                    // Spread the reconnects of many clients over Feishu's nonce.
                    let nonce = settings.reconnect_nonce.as_millis() as u64;
                    if nonce > 0 {
                        let jitter = rand::thread_rng().gen_range(0..nonce);
                        tokio::time::sleep(Duration::from_millis(jitter)).await;
                    }
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    tracing::warn!(
                        channel = "feishu",
                        attempt = failures,
                        "cannot connect: {e}"
                    );
                    let backoff = Duration::from_secs(1 << failures.min(10).saturating_sub(1));
                    tokio::time::sleep(backoff.min(settings.reconnect_interval.max(ONE_SEC))).await;
                }
            }
        }
    })
}

const ONE_SEC: Duration = Duration::from_secs(1);

/// Serves one connection until it ends; returns why.
async fn serve(
    intake: &EventsIntake,
    cfg: &Arc<FeishuConfig>,
    session: Session,
    settings: &mut ClientConfig,
) -> String {
    let Session {
        socket,
        service,
        settings: mut now,
    } = session;
    let (mut sink, mut stream) = socket.split();
    // Answers are written by this loop; handlers (a card press waits for its approval)
    // run in their own tasks and hand their frame back here.
    let (answers_tx, mut answers) = mpsc::channel::<Frame>(64);
    let mut parts = Reassembly::default();
    let mut ping = tokio::time::interval(now.ping_interval);
    let mut heard = Instant::now();
    loop {
        tokio::select! {
            _ = ping.tick() => {
                if heard.elapsed() > now.ping_interval * 3 {
                    return "nothing heard for three ping intervals".into();
                }
                let frame = Frame::ping(service).to_bytes();
                if let Err(e) = sink.send(Message::Binary(frame.into())).await {
                    return format!("cannot ping: {e}");
                }
            }
            Some(answer) = answers.recv() => {
                if let Err(e) = sink.send(Message::Binary(answer.to_bytes().into())).await {
                    return format!("cannot answer: {e}");
                }
            }
            msg = stream.next() => {
                let bytes = match msg {
                    None => return "closed by Feishu".into(),
                    Some(Err(e)) => return format!("read failed: {e}"),
                    Some(Ok(Message::Close(c))) => return format!("closed by Feishu: {c:?}"),
                    Some(Ok(Message::Binary(b))) => b,
                    Some(Ok(_)) => {
                        heard = Instant::now();
                        continue;
                    }
                };
                heard = Instant::now();
                let frame = match Frame::parse(&bytes) {
                    Ok(f) => f,
                    Err(e) => {
                        tracing::warn!(channel = "feishu", "undecodable frame ignored: {e}");
                        continue;
                    }
                };
                match frame.method {
                    METHOD_CONTROL => {
                        if frame.header("type") == Some("pong")
                            && let Some(p) = frame.payload.as_deref()
                            && let Ok(v) = serde_json::from_slice::<Settings>(p)
                        {
                            let before = now.ping_interval;
                            now.update(&v);
                            *settings = now;
                            if now.ping_interval != before {
                                ping = tokio::time::interval_at(
                                    tokio::time::Instant::now() + now.ping_interval,
                                    now.ping_interval,
                                );
                            }
                        }
                    }
                    METHOD_DATA => match parts.add(&frame) {
                        Ok(Some(payload)) => {
                            let (intake, cfg, out) =
                                (intake.clone(), cfg.clone(), answers_tx.clone());
                            tokio::spawn(async move {
                                let started = Instant::now();
                                let (code, data) = handle(&intake, &cfg, &frame, &payload).await;
                                let _ = out.send(frame.answer(code, data.as_ref(), started.elapsed())).await;
                            });
                        }
                        Ok(None) => {}
                        Err(why) => tracing::warn!(channel = "feishu", "part ignored: {why}"),
                    },
                    other => tracing::warn!(channel = "feishu", method = other, "frame of unknown kind ignored"),
                }
            }
        }
    }
}

/// Handles one whole data message; returns the code and the answer body.
async fn handle(
    intake: &EventsIntake,
    cfg: &FeishuConfig,
    frame: &Frame,
    payload: &[u8],
) -> (u16, Option<Value>) {
    let kind = frame.header("type").unwrap_or_default();
    if kind != "event" && kind != "card" {
        return (200, None);
    }
    let event = match open(cfg, payload) {
        Ok(v) => v,
        Err(why) => {
            tracing::warn!(channel = "feishu", "event refused: {why}");
            return (400, None);
        }
    };
    if let Some(token) = cfg.verification_token.as_deref()
        && !webhook::token_matches(&parse(&event).unwrap_or_default(), token)
    {
        tracing::warn!(
            channel = "feishu",
            "event refused: wrong verification token"
        );
        return (401, None);
    }
    // A legacy card callback has no event id: the frame's message id names it.
    let (event, key) = if kind == "card" {
        (legacy_card(&event), frame.header("message_id"))
    } else {
        (event, None)
    };
    match events::dispatch(intake, &event, key).await {
        Answer::Retry => (500, None),
        Answer::Ack => (200, None),
        a @ Answer::Toast { .. } => (200, Some(a.body())),
    }
}

/// The event JSON, decrypted when it came encrypted (an encrypt key must be set then).
fn open(cfg: &FeishuConfig, payload: &[u8]) -> Result<Value, String> {
    let outer: Value = serde_json::from_slice(payload).map_err(|_| "not JSON".to_string())?;
    let Some(encrypted) = parse::<Envelope>(&outer).and_then(|e| e.encrypt) else {
        return Ok(outer);
    };
    let key = cfg
        .encrypt_key
        .as_deref()
        .ok_or("encrypted, but no encrypt key is configured")?;
    let plain = crypto::decrypt(key, &encrypted).map_err(|e| format!("cannot decrypt: {e}"))?;
    serde_json::from_str(&plain).map_err(|_| "decrypted payload is not JSON".to_string())
}

/// A legacy card callback (`open_id`, `open_chat_id`, `action` at the top) in the shape
/// of a `card.action.trigger` event.
fn legacy_card(v: &Value) -> Value {
    let v: LegacyCard = parse(v).unwrap_or_default();
    serde_json::json!({
        "header": {"event_type": "card.action.trigger", "token": v.token},
        "event": {
            "operator": {"open_id": v.open_id},
            "action": v.action,
            "context": {"open_chat_id": v.open_chat_id, "open_message_id": v.open_message_id},
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_service_id_comes_from_the_url() {
        assert_eq!(service_id("wss://x/ws?device_id=d1&service_id=42"), 42);
        assert_eq!(service_id("wss://x/ws?service_id=7"), 7);
        assert_eq!(service_id("wss://x/ws"), 0);
    }

    #[test]
    fn legacy_card_callbacks_become_card_events() {
        let v = serde_json::json!({"open_id": "ou_1", "open_chat_id": "oc_1",
            "action": {"value": {"approval_id": "a", "decision": "deny"}}});
        let e = legacy_card(&v);
        assert_eq!(e["header"]["event_type"], "card.action.trigger");
        assert_eq!(e["event"]["operator"]["open_id"], "ou_1");
        assert_eq!(e["event"]["context"]["open_chat_id"], "oc_1");
    }
}
