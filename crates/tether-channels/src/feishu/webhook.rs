//! `POST /hooks/feishu`: the event subscription endpoint. Checks, in order: the signed
//! timestamp's freshness (within 5 minutes of now, from the headers, before the body is
//! read; so a captured request cannot be replayed once its event id has left the dedupe
//! table), decryption and signature (when an encrypt key is configured), the
//! verification token; then
//! answers `url_verification`, deduplicates by `event_id`, and queues messages for the
//! worker (the HTTP answer never waits for agent work). A card button press is answered
//! with a toast once its approval is resolved (bounded well under Feishu's 3 s).
//! Anything forged or tampered → 401 and nothing done. As in Feishu's own SDKs, the URL
//! check (`url_verification`) is decrypted and token-checked but not signature-checked;
//! every event is.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use tether_proto::Decision;
use tokio::sync::mpsc;

use super::crypto;
use crate::config::FeishuConfig;
use crate::constant_time_eq;
use crate::core::SharedCore;
use crate::inbound::{self, InChat, InKind, Inbound, Sender};

/// How long a button press may wait for its approval to resolve before the toast.
const ACTION_WAIT: Duration = Duration::from_millis(2500);
/// How far a signed event's `X-Lark-Request-Timestamp` may be from now (either way):
/// an older capture is refused even after its event id has left the dedupe table.
pub(crate) const MAX_CLOCK_SKEW_SECS: i64 = 5 * 60;
/// Largest callback read: a 150 KB text message (Feishu's limit), escaped, encrypted and
/// base64-encoded, stays below this.
const MAX_EVENT_BYTES: usize = 512 * 1024;

/// The worker task and the webhook route.
pub(crate) struct Started {
    pub tasks: Vec<tokio::task::JoinHandle<()>>,
    pub hook: axum::Router,
}

#[derive(Clone)]
pub(crate) struct HookState {
    core: SharedCore,
    cfg: Arc<FeishuConfig>,
    tx: mpsc::UnboundedSender<Inbound>,
}

fn unauthorized(why: &str) -> Response {
    tracing::warn!(channel = "feishu", "event rejected: {why}");
    StatusCode::UNAUTHORIZED.into_response()
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// The plaintext event: decrypted and signature-checked when an encrypt key is set.
/// `Err` carries the reason to reject.
fn open(cfg: &FeishuConfig, headers: &HeaderMap, body: &[u8]) -> Result<(Value, bool), String> {
    let outer: Value = serde_json::from_slice(body).map_err(|_| "body is not JSON".to_string())?;
    let Some(key) = cfg.encrypt_key.as_deref() else {
        return Ok((outer, false));
    };
    let encrypted = outer["encrypt"]
        .as_str()
        .ok_or("not encrypted although an encrypt key is configured")?;
    let signed = match (
        header(headers, "x-lark-request-timestamp"),
        header(headers, "x-lark-request-nonce"),
        header(headers, "x-lark-signature"),
    ) {
        (Some(ts), Some(nonce), Some(sig)) => {
            fresh(ts)?;
            let expected = crypto::signature(ts, nonce, key, body);
            if !constant_time_eq(expected.as_bytes(), sig.trim().as_bytes()) {
                return Err("wrong signature".to_string());
            }
            true
        }
        _ => false,
    };
    let plain = crypto::decrypt(key, encrypted).map_err(|e| format!("cannot decrypt: {e}"))?;
    let inner = serde_json::from_str(&plain).map_err(|_| "decrypted body is not JSON")?;
    Ok((inner, signed))
}

/// A signed request's timestamp (Unix seconds) lies within [`MAX_CLOCK_SKEW_SECS`] of
/// now.
fn fresh(ts: &str) -> Result<(), String> {
    let ts: i64 = ts
        .trim()
        .parse()
        .map_err(|_| "the request timestamp is not a number".to_string())?;
    let now = tether_store::now_ms() / 1000;
    if (now - ts).abs() > MAX_CLOCK_SKEW_SECS {
        return Err(format!(
            "the request timestamp is {}s away from now (at most {MAX_CLOCK_SKEW_SECS}s)",
            now - ts
        ));
    }
    Ok(())
}

#[utoipa::path(
    post,
    path = "/hooks/feishu",
    tag = "webhooks",
    description = "Feishu / Lark event subscription callback: the URL check \
                   (`url_verification`), `im.message.receive_v1` and `card.action.trigger`. \
                   With an encrypt key, events are AES-encrypted and signed \
                   (`X-Lark-Signature` over timestamp, nonce, key and body); a timestamp more \
                   than 5 minutes from now is refused before the body is read. The \
                   verification token inside the event is always checked.",
    request_body(content = serde_json::Value, content_type = "application/json", description = "A Feishu event callback (plain or `{\"encrypt\": ...}`)"),
    responses(
        (status = 200, description = "Handled, a duplicate ignored, the URL check's challenge, or a card toast"),
        (status = 401, description = "Forged, tampered, stale or with a wrong token: nothing done"),
        (status = 413, description = "Larger than 512 KiB"),
        (status = 500, description = "Could not be recorded; Feishu retries"),
    )
)]
pub(crate) async fn hook(
    State(s): State<HookState>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    // What the headers alone can tell, before reading the body: a stale signed request.
    if s.cfg.encrypt_key.is_some()
        && let Some(ts) = header(&headers, "x-lark-request-timestamp")
        && let Err(why) = fresh(ts)
    {
        return unauthorized(&why);
    }
    let body = match crate::api::read_body(&headers, body, MAX_EVENT_BYTES).await {
        Ok(b) => b,
        Err(status) => return status.into_response(),
    };
    let (event, signed) = match open(&s.cfg, &headers, &body) {
        Ok(v) => v,
        Err(why) => return unauthorized(&why),
    };
    let token = event["header"]["token"]
        .as_str()
        .or_else(|| event["token"].as_str())
        .unwrap_or_default();
    if !constant_time_eq(token.as_bytes(), s.cfg.verification_token.as_bytes()) {
        return unauthorized("wrong verification token");
    }
    if event["type"] == "url_verification" {
        return Json(json!({ "challenge": event["challenge"] })).into_response();
    }
    // With an encrypt key, every event (not the URL check) must be signed.
    if s.cfg.encrypt_key.is_some() && !signed {
        return unauthorized("event without a signature");
    }
    let Some(event_id) = event["header"]["event_id"].as_str() else {
        // Schema 1.0 events are not used by tether: acknowledge and ignore.
        return Json(json!({})).into_response();
    };
    match s.core.store.remember_inbound("feishu", event_id).await {
        Ok(true) => {}
        Ok(false) => {
            tracing::info!(channel = "feishu", event_id, "duplicate event ignored");
            return Json(json!({})).into_response();
        }
        Err(e) => {
            tracing::warn!(channel = "feishu", "cannot record event: {e}");
            return StatusCode::INTERNAL_SERVER_ERROR.into_response();
        }
    }
    match event["header"]["event_type"].as_str().unwrap_or_default() {
        "im.message.receive_v1" => {
            if let Some(msg) = message(event_id, &event["event"]) {
                let _ = s.tx.send(msg);
            }
            Json(json!({})).into_response()
        }
        "card.action.trigger" => {
            let Some(msg) = action(event_id, &event["event"]) else {
                return toast("warning", "This button is not known.");
            };
            let core = s.core.clone();
            let job = tokio::spawn(async move { inbound::handle(&core, msg).await });
            match tokio::time::timeout(ACTION_WAIT, job).await {
                Ok(Ok(Ok(Some(text)))) => toast("info", &text),
                Ok(Ok(Err(e))) => toast("error", &e.to_string()),
                _ => toast("info", "Received."),
            }
        }
        _ => Json(json!({})).into_response(),
    }
}

fn toast(kind: &str, text: &str) -> Response {
    Json(json!({ "toast": { "type": kind, "content": text } })).into_response()
}

/// `im.message.receive_v1` → a text message (mentions removed), or files (image, file,
/// a post with images; see `media`). Other kinds and messages from bots are ignored.
fn message(event_id: &str, ev: &Value) -> Option<Inbound> {
    if ev["sender"]["sender_type"].as_str().unwrap_or("user") != "user" {
        return None;
    }
    let open_id = ev["sender"]["sender_id"]["open_id"].as_str()?;
    let m = &ev["message"];
    let content: Value = serde_json::from_str(m["content"].as_str()?).ok()?;
    let kind = match m["message_type"].as_str()? {
        "text" => {
            let mut text = content["text"].as_str()?.to_string();
            for mention in m["mentions"].as_array().into_iter().flatten() {
                if let Some(key) = mention["key"].as_str().filter(|k| !k.is_empty()) {
                    text = text.replace(key, "");
                }
            }
            // Only the mentions go: the rest keeps its lines and spacing (code, lists).
            InKind::Text(text.trim().to_string())
        }
        other => super::media::kind(other, m["message_id"].as_str()?, &content)?,
    };
    let chat_id = m["chat_id"].as_str()?;
    let is_group = m["chat_type"] != "p2p";
    Some(Inbound {
        key: event_id.to_string(),
        chat: InChat {
            chat_id: chat_id.to_string(),
            thread_id: None,
            is_group,
            title: if is_group {
                format!("group {chat_id}")
            } else {
                format!("chat with {open_id}")
            },
        },
        sender: Sender {
            id: open_id.to_string(),
            name: open_id.to_string(),
        },
        kind,
    })
}

/// `card.action.trigger` → a decision on the approval the button names.
fn action(event_id: &str, ev: &Value) -> Option<Inbound> {
    let open_id = ev["operator"]["open_id"].as_str()?;
    let value = &ev["action"]["value"];
    // Some clients deliver the value as a JSON string.
    let value = match value.as_str() {
        Some(s) => serde_json::from_str(s).ok()?,
        None => value.clone(),
    };
    let approval_id = tether_proto::ApprovalId::from(value["approval_id"].as_str()?);
    let decision = match value["decision"].as_str()? {
        "allow" => Decision::Allow,
        "allow_always" => Decision::AllowAlways,
        "deny" => Decision::Deny,
        _ => return None,
    };
    let chat_id = ev["context"]["open_chat_id"].as_str()?;
    Some(Inbound {
        key: event_id.to_string(),
        chat: InChat {
            chat_id: chat_id.to_string(),
            thread_id: None,
            // The chat key of a per-user group conversation needs to know it is a group;
            // card events do not say, so groups are recognised by the mapping lookup.
            is_group: false,
            title: String::new(),
        },
        sender: Sender {
            id: open_id.to_string(),
            name: open_id.to_string(),
        },
        kind: InKind::Decide {
            approval_id,
            decision,
        },
    })
}

async fn worker(core: SharedCore, mut rx: mpsc::UnboundedReceiver<Inbound>) {
    let (lanes_tx, lanes_rx) = mpsc::unbounded_channel();
    let handler = {
        let core = core.clone();
        move |msg: Inbound| {
            let core = core.clone();
            async move {
                let key = msg.key.clone();
                if let Err(e) = inbound::handle(&core, msg).await {
                    tracing::warn!(channel = "feishu", event = key, "event failed: {e}");
                }
            }
        }
    };
    tokio::spawn(crate::lanes::run_lanes(lanes_rx, handler));
    while let Some(msg) = rx.recv().await {
        let lane = msg.chat_key(core.group_mode);
        let _ = lanes_tx.send((lane, msg));
    }
}

pub(crate) fn start(core: SharedCore, cfg: Arc<FeishuConfig>) -> Started {
    let (tx, rx) = mpsc::unbounded_channel();
    let tasks = vec![tokio::spawn(worker(core.clone(), rx))];
    let hook = axum::Router::new()
        .route("/hooks/feishu", post(hook))
        .with_state(HookState { core, cfg, tx });
    Started { tasks, hook }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_lose_their_mentions() {
        let ev = json!({
            "sender": {"sender_id": {"open_id": "ou_1"}, "sender_type": "user"},
            "message": {"chat_id": "oc_9", "chat_type": "group", "message_type": "text",
                        "content": "{\"text\":\"@_user_1  /status  \"}",
                        "mentions": [{"key": "@_user_1", "name": "tether"}]}
        });
        let m = message("e1", &ev).unwrap_or_else(|| panic!("a message"));
        assert_eq!(m.kind, InKind::Text("/status".into()));
        assert!(m.chat.is_group);
        assert_eq!(m.sender.id, "ou_1");
        let bot = json!({"sender": {"sender_type": "app"}, "message": {}});
        assert!(message("e2", &bot).is_none());
    }

    #[test]
    fn card_actions_name_their_approval() {
        let ev = json!({
            "operator": {"open_id": "ou_1"},
            "action": {"value": {"approval_id": "a1", "decision": "allow_always"}, "tag": "button"},
            "context": {"open_message_id": "om_1", "open_chat_id": "oc_9"}
        });
        let m = action("e1", &ev).unwrap_or_else(|| panic!("an action"));
        assert_eq!(
            m.kind,
            InKind::Decide {
                approval_id: "a1".into(),
                decision: Decision::AllowAlways
            }
        );
        let bad = json!({"operator": {"open_id": "ou_1"}, "action": {"value": {"approval_id": "a1", "decision": "maybe"}}, "context": {"open_chat_id": "oc"}});
        assert!(action("e2", &bad).is_none());
    }
}
