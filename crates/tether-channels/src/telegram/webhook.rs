//! `POST /hooks/telegram`: the webhook mode's route. The secret token is checked before
//! the body is read; an update that fits the Bot API types is handed to the intake,
//! which records it before Telegram is answered.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::Value;

use super::api::Update;
use super::updates::{Incoming, UpdatesIntake};

#[derive(Clone)]
pub(crate) struct HookState {
    intake: UpdatesIntake,
    secret: Arc<[u8]>,
}

/// Largest update the webhook reads: a message of 4096 characters with its entities and
/// a reply it quotes stays far below this.
const MAX_UPDATE_BYTES: usize = 256 * 1024;

/// `POST /hooks/telegram`: a wrong or missing secret token → 401 and nothing done (the
/// body is not even read); a body over 256 KiB → 413; a body that is not JSON → 400; an
/// update that does not fit the types is logged and acknowledged (200), or Telegram
/// would redeliver it ahead of every later one; one that cannot be recorded → 500
/// (Telegram retries it).
#[utoipa::path(
    post,
    path = "/hooks/telegram",
    tag = "webhooks",
    description = "Telegram Bot API webhook (webhook mode only): an `Update` as Telegram \
                   sends it. Checked against the `X-Telegram-Bot-Api-Secret-Token` header \
                   before the body is read.",
    params(("X-Telegram-Bot-Api-Secret-Token" = String, Header, description = "The configured webhook secret")),
    request_body(content = serde_json::Value, content_type = "application/json", description = "A Telegram Update"),
    responses(
        (status = 200, description = "Accepted (or a duplicate, ignored)"),
        (status = 400, description = "Not JSON"),
        (status = 401, description = "Missing or wrong secret token"),
        (status = 413, description = "Larger than 256 KiB"),
        (status = 500, description = "Could not be recorded; Telegram retries"),
    )
)]
pub(crate) async fn hook(
    State(s): State<HookState>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> StatusCode {
    let presented = headers
        .get("x-telegram-bot-api-secret-token")
        .map(|v| v.as_bytes())
        .unwrap_or_default();
    if s.secret.is_empty() || !crate::signed::constant_time_eq(&s.secret, presented) {
        crate::body::warn_refused("telegram", "a wrong secret token");
        return StatusCode::UNAUTHORIZED;
    }
    let body = match crate::body::read_body(&headers, body, MAX_UPDATE_BYTES).await {
        Ok(b) => b,
        Err(status) => return status,
    };
    let Ok(raw) = serde_json::from_slice::<Value>(&body) else {
        return StatusCode::BAD_REQUEST;
    };
    let update = match serde_json::from_value::<Update>(raw.clone()) {
        Ok(u) => u,
        Err(e) => {
            tracing::warn!(
                channel = "telegram",
                update = raw["update_id"].as_i64(),
                "webhook update skipped, it does not fit the Bot API types: {e}"
            );
            return StatusCode::OK;
        }
    };
    let incoming = Incoming {
        update,
        raw: raw.to_string(),
    };
    match s.intake.accept(incoming).await {
        Ok(_) => StatusCode::OK,
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The webhook route, handing updates to `intake`; `secret` is the configured token.
pub(crate) fn routes(intake: UpdatesIntake, secret: String) -> axum::Router {
    let state = HookState {
        intake,
        secret: Arc::from(secret.into_bytes()),
    };
    axum::Router::new()
        .route("/hooks/telegram", post(hook))
        .with_state(state)
}
