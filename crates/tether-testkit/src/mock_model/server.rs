//! The axum routes of the mock model and the one request flow they share: record, pick a
//! reply (error mode, auxiliary answer, script, default), render it in the API's format.

use std::time::Instant;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{OriginalUri, State as AxState};
use axum::http::{HeaderMap, Method};
use axum::response::Response;
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::script::{Reply, Transcript, default_reply};
use super::sse::{json_response, tokens_of};
use super::{Api, RecordedRequest, Shared, anthropic, gemini, lock, openai, transcript};

pub(crate) fn router(state: Shared) -> Router {
    Router::new()
        .route("/v1/responses", post(responses))
        .route("/responses", post(responses))
        .route("/v1/models", get(models))
        .route("/models", get(models))
        .route("/v1/messages", post(messages))
        .route("/v1/messages/count_tokens", post(count_tokens))
        .route("/v1beta/models", get(models))
        .route("/v1beta/models/{*rest}", post(gemini_call))
        .fallback(unknown)
        .with_state(state)
}

fn parse(body: &Bytes) -> Value {
    serde_json::from_slice(body).unwrap_or(Value::Null)
}

fn path_of(uri: &OriginalUri) -> String {
    uri.0
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| uri.0.path().to_string())
}

fn record(state: &Shared, api: Api, path: String, body: Value, auxiliary: bool) -> u64 {
    let mut s = lock(state);
    s.counter += 1;
    if s.verbose {
        let t = transcript(api, &body);
        eprintln!(
            "mock-model: {api:?} {path} aux={auxiliary} users={:?} last={:?}",
            t.user_texts, t.last
        );
    }
    s.requests.push(RecordedRequest {
        api,
        path,
        body,
        at: Instant::now(),
        auxiliary,
    });
    s.counter
}

fn error_body(api: Api, status: u16) -> Value {
    match api {
        Api::OpenAiResponses => openai::error_body(status),
        Api::AnthropicMessages => anthropic::error_body(status),
        Api::Gemini => gemini::error_body(status),
    }
}

/// The shared flow of a generation request.
fn generate(state: &Shared, api: Api, path: String, body: Value, stream: bool) -> Response {
    let t = transcript(api, &body);
    let aux_text = match api {
        Api::OpenAiResponses => None,
        Api::AnthropicMessages => anthropic::auxiliary_text(&body, &t),
        Api::Gemini => gemini::auxiliary_text(&path, &body),
    };
    let n = record(state, api, path, body.clone(), aux_text.is_some());
    let (error_mode, scripted) = {
        let mut s = lock(state);
        let scripted = if aux_text.is_none() {
            s.script.pop_front()
        } else {
            None
        };
        (s.error_mode, scripted)
    };
    if let Some(status) = error_mode {
        return json_response(status, error_body(api, status));
    }
    let reply = match aux_text {
        Some(text) => Reply::Text(text),
        None => scripted.unwrap_or_else(|| default_reply(&t)),
    };
    if let Reply::Error(status) = reply {
        return json_response(status, error_body(api, status));
    }
    if let Reply::Limit { secs } = reply {
        return limit_response(api, secs);
    }
    let billing = super::sse::Billing {
        state: state.clone(),
        n,
    };
    if let Reply::Window { percent } = reply {
        let text = Reply::Text(format!("window at {percent}%"));
        let mut resp =
            super::sse::BILLING.sync_scope(billing, || render(api, &text, &t, &body, n, stream));
        add_headers(&mut resp, window_headers(api, percent));
        return resp;
    }
    super::sse::BILLING.sync_scope(billing, || render(api, &reply, &t, &body, n, stream))
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn add_headers(resp: &mut Response, headers: Vec<(&'static str, String)>) {
    use axum::http::HeaderValue;
    for (k, v) in headers {
        if let Ok(v) = HeaderValue::from_str(&v) {
            resp.headers_mut().insert(k, v);
        }
    }
}

/// The headers a subscription's response carries about its usage window (five hours,
/// resetting in an hour), `percent` of it used: Codex's `x-codex-primary-*`, Anthropic's
/// unified rate-limit headers (utilisation as a fraction). Gemini sends none.
fn window_headers(api: Api, percent: u8) -> Vec<(&'static str, String)> {
    let reset = (unix_now() + 3600).to_string();
    match api {
        Api::OpenAiResponses => vec![
            ("x-codex-primary-used-percent", percent.to_string()),
            ("x-codex-primary-window-minutes", "300".to_owned()),
            ("x-codex-primary-reset-after-seconds", "3600".to_owned()),
            ("x-codex-primary-reset-at", reset),
        ],
        Api::AnthropicMessages => vec![
            (
                "anthropic-ratelimit-unified-status",
                if percent >= 80 {
                    "allowed_warning"
                } else {
                    "allowed"
                }
                .to_owned(),
            ),
            ("anthropic-ratelimit-unified-reset", reset.clone()),
            (
                "anthropic-ratelimit-unified-representative-claim",
                "five_hour".to_owned(),
            ),
            (
                "anthropic-ratelimit-unified-5h-status",
                "allowed".to_owned(),
            ),
            (
                "anthropic-ratelimit-unified-5h-utilization",
                format!("{}", f64::from(percent) / 100.0),
            ),
            ("anthropic-ratelimit-unified-5h-reset", reset),
        ],
        Api::Gemini => Vec::new(),
    }
}

/// The vendor's own answer at a usage limit resetting in `secs`: OpenAI's
/// `usage_limit_reached` (with Codex's rate-limit headers), Anthropic's
/// `rate_limit_error` with the unified rate-limit headers Claude Code reads, Gemini's
/// `RESOURCE_EXHAUSTED` with a `RetryInfo`.
fn limit_response(api: Api, secs: u64) -> Response {
    use axum::http::{HeaderValue, StatusCode};
    use axum::response::IntoResponse;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let reset = now + secs;
    let (body, headers): (Value, Vec<(&str, String)>) = match api {
        Api::OpenAiResponses => (
            json!({"error": {"type": "usage_limit_reached",
                             "message": "You've hit your usage limit.",
                             "plan_type": "plus", "resets_in_seconds": secs, "resets_at": reset}}),
            vec![
                ("x-codex-primary-used-percent", "100".to_owned()),
                ("x-codex-primary-window-minutes", "300".to_owned()),
                ("x-codex-primary-reset-after-seconds", secs.to_string()),
                ("x-codex-primary-reset-at", reset.to_string()),
            ],
        ),
        Api::AnthropicMessages => (
            json!({"type": "error", "error": {"type": "rate_limit_error",
                   "message": "This request would exceed your account's rate limit."}}),
            vec![
                ("retry-after", secs.to_string()),
                ("anthropic-ratelimit-unified-status", "rejected".to_owned()),
                ("anthropic-ratelimit-unified-reset", reset.to_string()),
                (
                    "anthropic-ratelimit-unified-representative-claim",
                    "five_hour".to_owned(),
                ),
            ],
        ),
        Api::Gemini => (
            json!({"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).",
                   "status": "RESOURCE_EXHAUSTED",
                   "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                                "retryDelay": format!("{secs}s")}]}}),
            vec![],
        ),
    };
    let mut resp = (StatusCode::TOO_MANY_REQUESTS, axum::Json(body)).into_response();
    for (k, v) in headers {
        if let Ok(v) = HeaderValue::from_str(&v) {
            resp.headers_mut().insert(k, v);
        }
    }
    resp
}

fn render(api: Api, reply: &Reply, t: &Transcript, body: &Value, n: u64, stream: bool) -> Response {
    match api {
        Api::OpenAiResponses => openai::render(reply, t, body, n),
        Api::AnthropicMessages => anthropic::render(reply, t, body, n),
        Api::Gemini => gemini::render(reply, t, body, n, stream),
    }
}

async fn responses(AxState(state): AxState<Shared>, uri: OriginalUri, body: Bytes) -> Response {
    generate(
        &state,
        Api::OpenAiResponses,
        path_of(&uri),
        parse(&body),
        true,
    )
}

async fn messages(AxState(state): AxState<Shared>, uri: OriginalUri, body: Bytes) -> Response {
    generate(
        &state,
        Api::AnthropicMessages,
        path_of(&uri),
        parse(&body),
        true,
    )
}

async fn count_tokens(AxState(state): AxState<Shared>, uri: OriginalUri, body: Bytes) -> Response {
    let body = parse(&body);
    let tokens = tokens_of(&body);
    record(&state, Api::AnthropicMessages, path_of(&uri), body, true);
    json_response(200, json!({ "input_tokens": tokens }))
}

/// `POST /v1beta/models/{model}:{method}`: `streamGenerateContent`, `generateContent`,
/// `countTokens`.
async fn gemini_call(AxState(state): AxState<Shared>, uri: OriginalUri, body: Bytes) -> Response {
    let path = path_of(&uri);
    let body = parse(&body);
    let method = uri.0.path().rsplit_once(':').map(|(_, m)| m).unwrap_or("");
    match method {
        "streamGenerateContent" => generate(&state, Api::Gemini, path, body, true),
        "generateContent" => generate(&state, Api::Gemini, path, body, false),
        "countTokens" => {
            let tokens = tokens_of(&body);
            record(&state, Api::Gemini, path, body, true);
            json_response(200, json!({ "totalTokens": tokens }))
        }
        _ => {
            record(&state, Api::Gemini, path, body, true);
            json_response(404, gemini::error_body(404))
        }
    }
}

/// Model lists: an empty list in the shapes of all three APIs.
async fn models(AxState(state): AxState<Shared>, uri: OriginalUri, headers: HeaderMap) -> Response {
    let api = if headers.contains_key("anthropic-version") {
        Api::AnthropicMessages
    } else if uri.0.path().starts_with("/v1beta") {
        Api::Gemini
    } else {
        Api::OpenAiResponses
    };
    record(&state, api, path_of(&uri), Value::Null, true);
    json_response(
        200,
        json!({"object": "list", "data": [], "models": [], "has_more": false,
               "first_id": null, "last_id": null}),
    )
}

async fn unknown(
    AxState(state): AxState<Shared>,
    method: Method,
    uri: OriginalUri,
    body: Bytes,
) -> Response {
    if lock(&state).verbose {
        eprintln!("mock-model: unknown route {method} {}", path_of(&uri));
    }
    let api = if uri.0.path().starts_with("/v1beta") {
        Api::Gemini
    } else {
        Api::OpenAiResponses
    };
    record(&state, api, path_of(&uri), parse(&body), true);
    json_response(
        404,
        json!({"error": {"message": format!("mock model: no route {method} {}", uri.0.path()),
                         "type": "not_found", "code": 404}}),
    )
}
