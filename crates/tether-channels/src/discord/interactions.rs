//! `POST /hooks/discord`: the HTTP interactions endpoint (HTTP mode; the app's
//! "Interactions Endpoint URL"). Checks, in order: the `X-Signature-Timestamp` lies within
//! 5 minutes of now (from the headers, before the body is read), the Ed25519 signature
//! `X-Signature-Ed25519` over timestamp + body with the app's public key, then the JSON.
//! PING → PONG; a button press is answered in the response itself (an ephemeral
//! message), once its approval is resolved (bounded well under Discord's 3 s). Forged,
//! stale or replayed (an interaction id seen before) → 401 and nothing done; a signed
//! body that is not an interaction → 400. Never a 5xx for anything a sender controls.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use ed25519_dalek::{Signature, Verifier, VerifyingKey};
use serde_json::json;

use super::Discord;
use super::events::{ephemeral, interaction_answer};
use super::wire::Interaction;
use crate::config::DiscordConfig;
use crate::core::SharedCore;
use crate::hex;
use crate::signed::{fresh, header};

/// Largest interaction read (a component press is a few KiB).
const MAX_BODY_BYTES: usize = 64 * 1024;

#[derive(Clone)]
pub(crate) struct HookState {
    core: SharedCore,
    key: Option<VerifyingKey>,
}

/// The public key from its hex form.
pub fn parse_public_key(key: &str) -> Result<VerifyingKey, String> {
    let bytes = hex::decode(key.trim()).ok_or("the public key is not hex")?;
    let arr: [u8; 32] = bytes
        .try_into()
        .map_err(|_| "the public key is not 32 bytes".to_string())?;
    VerifyingKey::from_bytes(&arr).map_err(|e| format!("not an Ed25519 public key: {e}"))
}

fn unauthorized(why: &str) -> Response {
    crate::body::warn_refused("discord", why);
    StatusCode::UNAUTHORIZED.into_response()
}

#[utoipa::path(
    post,
    path = "/hooks/discord",
    tag = "webhooks",
    description = "Discord HTTP interactions endpoint (mode = \"http\"): PING and button \
                   presses (message components). Signed with Ed25519 \
                   (`X-Signature-Ed25519` over `X-Signature-Timestamp` + body, the app's \
                   public key); a timestamp more than 5 minutes from now is refused before \
                   the body is read, and an interaction id seen before is refused.",
    request_body(content = serde_json::Value, content_type = "application/json", description = "A Discord interaction"),
    responses(
        (status = 200, description = "PONG, or the interaction response (an ephemeral message)"),
        (status = 400, description = "Signed, but not an interaction"),
        (status = 401, description = "Forged, stale, replayed or unsigned: nothing done"),
        (status = 413, description = "Larger than 64 KiB"),
    )
)]
pub(crate) async fn hook(
    State(s): State<HookState>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    let Some(key) = s.key else {
        return unauthorized("no public key is configured");
    };
    let (Some(sig), Some(ts)) = (
        header(&headers, "x-signature-ed25519"),
        header(&headers, "x-signature-timestamp"),
    ) else {
        return unauthorized("unsigned");
    };
    if let Err(why) = fresh(ts) {
        return unauthorized(&why);
    }
    let Some(sig) = hex::decode(sig.trim())
        .and_then(|b| <[u8; 64]>::try_from(b).ok())
        .map(|b| Signature::from_bytes(&b))
    else {
        return unauthorized("the signature is not 64 hex bytes");
    };
    let body = match crate::body::read_body(&headers, body, MAX_BODY_BYTES).await {
        Ok(b) => b,
        Err(status) => return status.into_response(),
    };
    let mut signed = ts.as_bytes().to_vec();
    signed.extend_from_slice(&body);
    if key.verify(&signed, &sig).is_err() {
        return unauthorized("wrong signature");
    }
    let Ok(ix) = serde_json::from_slice::<Interaction>(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    match ix.kind {
        Some(1) => Json(json!({"type": 1})).into_response(),
        Some(3) => {
            if ix.id.is_none() {
                return StatusCode::BAD_REQUEST.into_response();
            }
            match interaction_answer(&s.core, &ix).await {
                Some(text) => Json(ephemeral(&text)).into_response(),
                None => unauthorized("replayed: this interaction was handled already"),
            }
        }
        Some(_) => Json(ephemeral("tether only answers its buttons here.")).into_response(),
        None => StatusCode::BAD_REQUEST.into_response(),
    }
}

pub(crate) fn routes(core: SharedCore, _dc: Arc<Discord>, cfg: Arc<DiscordConfig>) -> axum::Router {
    let key = match cfg.public_key.as_deref().map(parse_public_key) {
        Some(Ok(k)) => Some(k),
        Some(Err(e)) => {
            tracing::error!(channel = "discord", "public_key: {e}");
            None
        }
        None => None,
    };
    axum::Router::new()
        .route("/hooks/discord", post(hook))
        .with_state(HookState { core, key })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_keys_are_hex_ed25519() {
        assert!(parse_public_key("zz").is_err());
        assert!(parse_public_key(&"00".repeat(31)).is_err());
    }
}
