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

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

use super::crypto;
use super::events::{self, Answer, EventsIntake};
use super::wire::Envelope;
use crate::config::FeishuConfig;
use crate::signed::{constant_time_eq, fresh, header};

/// Largest callback read: a 150 KB text message (Feishu's limit), escaped, encrypted and
/// base64-encoded, stays below this.
const MAX_EVENT_BYTES: usize = 512 * 1024;

#[derive(Clone)]
pub(crate) struct HookState {
    intake: EventsIntake,
    cfg: Arc<FeishuConfig>,
    token: String,
}

fn unauthorized(why: &str) -> Response {
    crate::body::warn_refused("feishu", why);
    StatusCode::UNAUTHORIZED.into_response()
}

/// The plaintext event: decrypted and signature-checked when an encrypt key is set.
/// `Err` carries the reason to reject.
fn open(cfg: &FeishuConfig, headers: &HeaderMap, body: &[u8]) -> Result<(Value, bool), String> {
    let outer: Value = serde_json::from_slice(body).map_err(|_| "body is not JSON".to_string())?;
    let Some(key) = cfg.encrypt_key.as_deref() else {
        return Ok((outer, false));
    };
    let encrypted = crate::json::parse::<Envelope>(&outer)
        .and_then(|e| e.encrypt)
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
    let plain = crypto::decrypt(key, &encrypted).map_err(|e| format!("cannot decrypt: {e}"))?;
    let inner = serde_json::from_str(&plain).map_err(|_| "decrypted body is not JSON")?;
    Ok((inner, signed))
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
    let body = match crate::body::read_body(&headers, body, MAX_EVENT_BYTES).await {
        Ok(b) => b,
        Err(status) => return status.into_response(),
    };
    let (event, signed) = match open(&s.cfg, &headers, &body) {
        Ok(v) => v,
        Err(why) => return unauthorized(&why),
    };
    let envelope = crate::json::parse::<Envelope>(&event).unwrap_or_default();
    if !token_matches(&envelope, &s.token) {
        return unauthorized("wrong verification token");
    }
    if envelope.kind.as_deref() == Some("url_verification") {
        return Json(json!({ "challenge": envelope.challenge })).into_response();
    }
    // With an encrypt key, every event (not the URL check) must be signed.
    if s.cfg.encrypt_key.is_some() && !signed {
        return unauthorized("event without a signature");
    }
    let answer = events::dispatch(&s.intake, &event, None).await;
    match answer {
        Answer::Retry => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        Answer::Ack | Answer::Toast { .. } => Json(answer.body()).into_response(),
    }
}

/// The event's verification token (schema 2.0 in the header, 1.0 and the URL check at
/// the top) is `expected`, compared in constant time.
pub(crate) fn token_matches(event: &Envelope, expected: &str) -> bool {
    let token = event
        .header
        .token
        .as_deref()
        .or(event.token.as_deref())
        .unwrap_or_default();
    constant_time_eq(token.as_bytes(), expected.as_bytes())
}

/// The webhook route, handing events to `intake`. `token` is the configured
/// verification token (the webhook mode requires one).
pub(crate) fn hook_routes(
    intake: EventsIntake,
    cfg: Arc<FeishuConfig>,
    token: String,
) -> axum::Router {
    axum::Router::new()
        .route("/hooks/feishu", post(hook))
        .with_state(HookState { intake, cfg, token })
}
