//! Webhook bodies, read with a limit of their own before anything else is done with them
//! (each channel's webhook route uses this; kept apart from `api`, which lists those routes
//! in the OpenAPI document, so the two do not import each other).

use axum::http::StatusCode;

/// Reads a webhook body of at most `limit` bytes (the webhooks have a small limit of
/// their own): 413 when `Content-Length` says it is larger (nothing is read) or the body
/// grows past it, 400 when it cannot be read (the client stopped sending: the server's
/// body time-out).
pub(crate) async fn read_body(
    headers: &axum::http::HeaderMap,
    body: axum::body::Body,
    limit: usize,
) -> Result<axum::body::Bytes, StatusCode> {
    let declared = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(StatusCode::PAYLOAD_TOO_LARGE);
    }
    let stream = http_body_util::Limited::new(body, limit);
    match http_body_util::BodyExt::collect(stream).await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(StatusCode::PAYLOAD_TOO_LARGE),
        Err(e) => {
            tracing::info!("webhook body could not be read: {e}");
            Err(StatusCode::BAD_REQUEST)
        }
    }
}

/// Logs a refused webhook request of `channel` (a WARN), at most once a minute per
/// channel; the next line says how many were held back (issue 24 S10: anyone can send
/// refused requests, so they must not flood the log).
pub(crate) fn warn_refused(channel: &'static str, why: &str) {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static THROTTLES: Mutex<Option<HashMap<&'static str, tether_core::Throttle>>> =
        Mutex::new(None);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let admitted = {
        let mut map = THROTTLES.lock().unwrap_or_else(|e| e.into_inner());
        map.get_or_insert_with(HashMap::new)
            .entry(channel)
            .or_insert(tether_core::Throttle::new(60_000))
            .admit(now)
    };
    if let Some(held_back) = admitted {
        tracing::warn!(channel, held_back, "webhook request refused: {why}");
    }
}
