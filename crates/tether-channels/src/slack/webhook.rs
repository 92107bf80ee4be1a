//! `POST /hooks/slack`: the Events API mode, one URL for events (JSON), interactivity
//! (`payload=` form field) and the `/tether` slash command (form fields). Checks, in
//! order: `X-Slack-Request-Timestamp` within 5 minutes of now (from the headers, before
//! the body is read), the body size, the `v0` signature (HMAC-SHA256 of
//! `v0:{timestamp}:{body}` with the signing secret, compared in constant time), and that
//! this exact signed request was not seen before (a replay inside the window). Then
//! `url_verification` is answered, and anything else is recorded and acknowledged at
//! once; the work happens after. Forged, stale, replayed → 401; unreadable → 400;
//! never a 5xx unless the store cannot record (then Slack retries).

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use super::intake::{Delivery, Incoming, SlackIntake};
use super::wire::EventBody;
use crate::signed::{constant_time_eq, fresh, header};

/// Largest request read (Slack's events are far smaller).
const MAX_BODY_BYTES: usize = 1024 * 1024;

#[derive(Clone)]
pub(crate) struct HookState {
    intake: SlackIntake,
    secret: String,
}

fn refuse(status: StatusCode, why: &str) -> Response {
    crate::body::warn_refused("slack", why);
    status.into_response()
}

/// The `v0=…` signature Slack puts in `X-Slack-Signature`.
pub fn signature(secret: &str, timestamp: &str, body: &[u8]) -> String {
    // HMAC takes a key of any length.
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret.as_bytes()) {
        Ok(m) => m,
        Err(_) => return String::new(),
    };
    mac.update(b"v0:");
    mac.update(timestamp.as_bytes());
    mac.update(b":");
    mac.update(body);
    format!("v0={}", crate::hex::encode(&mac.finalize().into_bytes()))
}

#[utoipa::path(
    post,
    path = "/hooks/slack",
    tag = "webhooks",
    description = "Slack Events API mode: events (`url_verification`, `event_callback` with \
                   `message` / `app_mention`), interactivity (`block_actions` of approval \
                   buttons, form field `payload`) and the `/tether` slash command, all signed \
                   (`X-Slack-Signature`: `v0=` HMAC-SHA256 of `v0:{timestamp}:{body}` with the \
                   signing secret). A timestamp more than 5 minutes from now is refused before \
                   the body is read; a request seen before is refused as a replay.",
    request_body(content = serde_json::Value, content_type = "application/json", description = "A Slack event, or form fields (`payload`, or a slash command)"),
    responses(
        (status = 200, description = "Recorded (work follows), a duplicate ignored, or the URL check's challenge"),
        (status = 400, description = "Signed, but not a body tether can read"),
        (status = 401, description = "Forged, unsigned, stale or replayed: nothing done"),
        (status = 413, description = "Larger than 1 MiB"),
        (status = 500, description = "Could not be recorded; Slack retries"),
    )
)]
pub(crate) async fn hook(
    State(s): State<HookState>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    let Some(ts) = header(&headers, "x-slack-request-timestamp") else {
        return refuse(StatusCode::UNAUTHORIZED, "no timestamp");
    };
    if let Err(why) = fresh(ts) {
        return refuse(StatusCode::UNAUTHORIZED, &why);
    }
    let Some(sig) = header(&headers, "x-slack-signature").map(str::trim) else {
        return refuse(StatusCode::UNAUTHORIZED, "no signature");
    };
    let body = match crate::body::read_body(&headers, body, MAX_BODY_BYTES).await {
        Ok(b) => b,
        Err(status) => return status.into_response(),
    };
    let expected = signature(&s.secret, ts.trim(), &body);
    if expected.is_empty() || !constant_time_eq(expected.as_bytes(), sig.as_bytes()) {
        return refuse(StatusCode::UNAUTHORIZED, "wrong signature");
    }
    match s.intake.remember(&format!("signature:{sig}")).await {
        Ok(true) => {}
        Ok(false) => return refuse(StatusCode::UNAUTHORIZED, "a replayed request"),
        Err(e) => {
            tracing::warn!(channel = "slack", "cannot record a request: {e}");
            return StatusCode::INTERNAL_SERVER_ERROR.into_response();
        }
    }
    let form = header(&headers, "content-type")
        .is_some_and(|c| c.starts_with("application/x-www-form-urlencoded"));
    let (kind, payload) = if form {
        let Ok(fields) =
            serde_urlencoded::from_bytes::<std::collections::HashMap<String, String>>(&body)
        else {
            return refuse(StatusCode::BAD_REQUEST, "unreadable form");
        };
        if let Some(p) = fields.get("payload") {
            match serde_json::from_str::<Value>(p) {
                Ok(v) => (Delivery::Interactive, v),
                Err(_) => return refuse(StatusCode::BAD_REQUEST, "payload is not JSON"),
            }
        } else if fields.contains_key("command") {
            let obj: serde_json::Map<String, Value> = fields
                .into_iter()
                .map(|(k, v)| (k, Value::String(v)))
                .collect();
            (Delivery::Command, Value::Object(obj))
        } else {
            return refuse(StatusCode::BAD_REQUEST, "neither a payload nor a command");
        }
    } else {
        let Ok(v) = serde_json::from_slice::<Value>(&body) else {
            return refuse(StatusCode::BAD_REQUEST, "body is not JSON");
        };
        if let Some(check) = crate::json::parse::<EventBody>(&v)
            && check.kind.as_deref() == Some("url_verification")
        {
            return Json(json!({ "challenge": check.challenge })).into_response();
        }
        (Delivery::Event, v)
    };
    match s.intake.accept(Incoming { kind, payload }).await {
        Ok(_) => StatusCode::OK.into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

/// `POST /hooks/slack`.
pub(crate) fn routes(intake: SlackIntake, secret: String) -> axum::Router {
    axum::Router::new()
        .route("/hooks/slack", post(hook))
        .with_state(HookState { intake, secret })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_follow_slacks_v0_scheme() {
        // Slack's documented example (api.slack.com/authentication/verifying-requests-from-slack).
        let body = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        assert_eq!(
            signature("8f742231b10e8888abcd99yyyzzz85a5", "1531420618", body),
            "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
        );
    }
}
