//! The fake Discord's rate limits and request bodies: every reply carries bucket
//! headers; a call to an exhausted bucket, or during a global limit, is answered 429 and
//! counted as a violation; 429s on demand. Multipart sends are read for their
//! `payload_json` and file.

use std::time::{Duration, Instant};

use axum::Json;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::fake_discord::{Inner, SentFile, Shared, lock};

/// How long a bucket stays exhausted when the fake is not told otherwise.
const SEND_BUCKET_RESET: f64 = 0.05;

/// The rate-limit checks and headers around one call to `bucket`.
pub(crate) fn limited(
    s: &Shared,
    route: &str,
    bucket: &str,
    f: impl FnOnce(&mut Inner) -> Response,
) -> Response {
    let now = Instant::now();
    let mut g = lock(s);
    if let Some(i) = g
        .failures
        .iter()
        .position(|(n, _)| route.contains(n.as_str()))
    {
        let (_, rl) = g.failures.remove(i);
        let until = now + Duration::from_secs_f64(rl.retry_after);
        if rl.global {
            g.global_until = Some(until);
        } else {
            g.exhausted.insert(bucket.to_string(), until);
        }
        return too_many(rl.retry_after, rl.global, bucket);
    }
    let global = g.global_until.filter(|t| *t > now);
    let bucket_wait = g.exhausted.get(bucket).copied().filter(|t| *t > now);
    if let Some(t) = global.or(bucket_wait) {
        g.violations.push(route.to_string());
        return too_many((t - now).as_secs_f64(), global.is_some(), bucket);
    }
    let mut resp = f(&mut g);
    let (remaining, reset) = match g.exhaust_next.remove(bucket) {
        Some(reset) if resp.status().is_success() => {
            g.exhausted
                .insert(bucket.to_string(), now + Duration::from_secs_f64(reset));
            (0, reset)
        }
        Some(reset) => {
            g.exhaust_next.insert(bucket.to_string(), reset);
            (5, SEND_BUCKET_RESET)
        }
        None => (5, SEND_BUCKET_RESET),
    };
    let h = resp.headers_mut();
    for (k, v) in [
        ("x-ratelimit-bucket", bucket.to_string()),
        ("x-ratelimit-remaining", remaining.to_string()),
        ("x-ratelimit-reset-after", format!("{reset:.3}")),
    ] {
        if let Ok(v) = v.parse() {
            h.insert(k, v);
        }
    }
    resp
}

fn too_many(retry_after: f64, global: bool, bucket: &str) -> Response {
    let mut r = (
        StatusCode::TOO_MANY_REQUESTS,
        Json(json!({"message": "You are being rate limited.", "retry_after": retry_after, "global": global})),
    )
        .into_response();
    let h = r.headers_mut();
    for (k, v) in [
        ("retry-after", format!("{}", retry_after.ceil() as u64)),
        ("x-ratelimit-bucket", bucket.to_string()),
        (
            "x-ratelimit-scope",
            if global { "global" } else { "user" }.to_string(),
        ),
    ] {
        if let Ok(v) = v.parse() {
            h.insert(k, v);
        }
    }
    if global && let Ok(v) = "true".parse() {
        h.insert("x-ratelimit-global", v);
    }
    r
}

/// The JSON of a send: the body, or a multipart body's `payload_json` and its file
/// (`files[0]`: name and bytes).
pub(crate) fn payload(headers: &HeaderMap, body: &Bytes) -> Option<(Value, Option<SentFile>)> {
    let ct = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let Some(boundary) = ct.split("boundary=").nth(1) else {
        return serde_json::from_slice(body).ok().map(|v| (v, None));
    };
    let delimiter = format!("--{}", boundary.trim_matches('"'));
    let mut json = None;
    let mut file = None;
    for part in split_bytes(body, delimiter.as_bytes()) {
        let Some(head_end) = find(part, b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&part[..head_end]);
        let mut data = &part[head_end + 4..];
        if data.ends_with(b"\r\n") {
            data = &data[..data.len() - 2];
        }
        if head.contains("name=\"payload_json\"") {
            json = serde_json::from_slice::<Value>(data).ok();
        } else if let Some(name) = head
            .split("filename=\"")
            .nth(1)
            .and_then(|t| t.split('"').next())
        {
            file = Some((name.to_string(), data.to_vec()));
        }
    }
    json.map(|j| (j, file))
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn split_bytes<'a>(hay: &'a [u8], delimiter: &[u8]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut rest = hay;
    while let Some(i) = find(rest, delimiter) {
        out.push(&rest[..i]);
        rest = &rest[i + delimiter.len()..];
    }
    out.push(rest);
    out
}
