//! Error mapping, auth, body limits and JSON rejections on a small router that uses the
//! same extractors, middleware and layers as the real one.

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::Value;
use tether_proto::{ApprovalStatus, SendMessage};
use tower::ServiceExt;
use utoipa::OpenApi;

use crate::auth::{Auth, require_header, require_header_or_query};
use crate::extract::{ApiJson, ApiQuery};
use crate::{ApiDoc, HostPolicy, Limits, harden, limit_bodies};

const TOKEN: &str = "s3cret";

#[derive(Deserialize)]
struct StatusQuery {
    status: Option<ApprovalStatus>,
}

async fn boom() -> &'static str {
    panic!("boom")
}

fn app() -> Router {
    let auth = Auth::bootstrap_only(TOKEN.into());
    let protected = Router::new()
        .route(
            "/echo",
            post(|ApiJson(m): ApiJson<SendMessage>| async move { Json(m.text) }),
        )
        .route(
            "/query",
            get(|ApiQuery(q): ApiQuery<StatusQuery>| async move {
                Json(q.status.map(|s| s.as_str().to_owned()))
            }),
        )
        .route("/panic", get(boom))
        .route_layer(axum::middleware::from_fn_with_state(
            auth.clone(),
            require_header,
        ));
    let stream = Router::new()
        .route("/stream", get(|| async { "stream" }))
        .route_layer(axum::middleware::from_fn_with_state(
            auth,
            require_header_or_query,
        ));
    let limits = Limits {
        body_limit: 64,
        ..Limits::default()
    };
    harden(
        limit_bodies(protected.merge(stream), limits.body_limit),
        limits,
        HostPolicy::default(),
    )
}

fn req(method: &str, uri: &str) -> axum::http::request::Builder {
    Request::builder()
        .method(method)
        .uri(uri)
        .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
}

fn json_req(uri: &str, body: impl Into<Body>) -> Request<Body> {
    req("POST", uri)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body.into())
        .unwrap()
}

async fn send(r: Request<Body>) -> (StatusCode, axum::http::HeaderMap, Value) {
    let resp = app().oneshot(r).await.unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, headers, value)
}

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("<none>")
}

#[tokio::test]
async fn authorized_request_passes() {
    let (status, _, body) = send(json_req("/echo", r#"{"text":"hi"}"#)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, Value::from("hi"));
}

#[tokio::test]
async fn missing_or_wrong_token_is_401_json() {
    let r = Request::post("/echo").body(Body::from("{}")).unwrap();
    let (status, headers, body) = send(r).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(code(&body), "unauthorized");
    assert_eq!(headers[header::WWW_AUTHENTICATE], "Bearer");

    let r = Request::post("/echo")
        .header(header::AUTHORIZATION, "Bearer nope")
        .body(Body::empty());
    let (status, _, body) = send(r.unwrap()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(code(&body), "unauthorized");
    assert!(!body.to_string().contains(TOKEN));
}

#[tokio::test]
async fn query_token_only_on_the_stream_route() {
    let r = Request::get(format!("/stream?token={TOKEN}"))
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(r).await.0, StatusCode::OK);
    let r = Request::get("/stream?token=wrong")
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(r).await.0, StatusCode::UNAUTHORIZED);
    let r = Request::get(format!("/query?token={TOKEN}"))
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(r).await.0, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn malformed_json_is_invalid_json() {
    for body in ["{", "not json", r#"{"text": 5}"#, r#"{"other": "x"}"#, ""] {
        let (status, _, v) = send(json_req("/echo", body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(code(&v), "invalid_json", "{body}");
        assert!(!v["error"]["message"].as_str().unwrap().is_empty());
    }
}

#[tokio::test]
async fn missing_content_type_is_invalid_json() {
    let r = req("POST", "/echo")
        .body(Body::from(r#"{"text":"hi"}"#))
        .unwrap();
    let (status, _, v) = send(r).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(code(&v), "invalid_json");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Content-Type")
    );
}

#[tokio::test]
async fn oversized_body_is_413_json() {
    let big = format!(r#"{{"text":"{}"}}"#, "x".repeat(200));
    // With Content-Length (rejected by the limit layer before the handler).
    let (status, _, v) = send(json_req("/echo", big.clone())).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(code(&v), "payload_too_large");
    // Streamed without Content-Length (rejected while the extractor reads it).
    let chunks = vec![Ok::<_, std::io::Error>(big.into_bytes())];
    let body = Body::from_stream(futures::stream::iter(chunks));
    let (status, _, v) = send(json_req("/echo", body)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(code(&v), "payload_too_large");
}

#[tokio::test]
async fn bad_query_is_bad_request() {
    let r = req("GET", "/query?status=bogus")
        .body(Body::empty())
        .unwrap();
    let (status, _, v) = send(r).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(code(&v), "bad_request");
    let r = req("GET", "/query?status=pending")
        .body(Body::empty())
        .unwrap();
    let (status, _, v) = send(r).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v, Value::from("pending"));
}

#[tokio::test]
async fn unknown_route_is_404_json() {
    let r = Request::get("/nope").body(Body::empty()).unwrap();
    let (status, _, v) = send(r).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(code(&v), "not_found");
}

#[tokio::test]
async fn wrong_method_is_405_json() {
    let r = req("DELETE", "/echo").body(Body::empty()).unwrap();
    let (status, headers, v) = send(r).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(code(&v), "method_not_allowed");
    assert_eq!(headers[header::ALLOW], "POST");
}

#[tokio::test]
async fn unknown_fields_and_non_objects_are_refused_naming_the_field() {
    let (status, _, v) = send(json_req("/echo", r#"{"text":"hi","agnet":"x"}"#)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(code(&v), "invalid_json");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("agnet"),
        "{v}"
    );
    for body in ["[]", "[\"hi\"]", "\"hi\"", "5", "null"] {
        let (status, _, v) = send(json_req("/echo", body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(code(&v), "invalid_json", "{body}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains("object"),
            "{v}"
        );
    }
}

#[tokio::test]
async fn foreign_hosts_are_refused() {
    let r = req("POST", "/echo")
        .header(header::HOST, "evil.example")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(r#"{"text":"hi"}"#))
        .unwrap();
    let (status, _, v) = send(r).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(code(&v), "host_not_allowed");
    let r = req("POST", "/echo")
        .header(header::HOST, "localhost:7878")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(r#"{"text":"hi"}"#))
        .unwrap();
    assert_eq!(send(r).await.0, StatusCode::OK);
}

#[tokio::test]
async fn panic_is_500_json() {
    let r = req("GET", "/panic").body(Body::empty()).unwrap();
    let (status, _, v) = send(r).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(code(&v), "internal");
}

#[test]
fn openapi_lists_every_route_and_schema() {
    let doc = serde_json::to_value(ApiDoc::openapi()).unwrap();
    let paths = doc["paths"].as_object().unwrap();
    let expected = [
        ("/api/v1/health", "get"),
        ("/api/v1/conversations", "post"),
        ("/api/v1/conversations", "get"),
        ("/api/v1/conversations/{id}", "get"),
        ("/api/v1/conversations/{id}", "patch"),
        ("/api/v1/conversations/{id}/messages", "post"),
        ("/api/v1/conversations/{id}/messages", "get"),
        ("/api/v1/conversations/{id}/new-session", "post"),
        ("/api/v1/conversations/{id}/detach", "post"),
        ("/api/v1/conversations/{id}/stop", "post"),
        ("/api/v1/conversations/{id}/events", "get"),
        ("/api/v1/sessions/{id}", "get"),
        ("/api/v1/sessions/{id}/turns", "get"),
        ("/api/v1/sessions/{id}/events", "get"),
        ("/api/v1/approvals", "get"),
        ("/api/v1/approvals/{id}", "post"),
        ("/api/v1/questions", "get"),
        ("/api/v1/questions/{id}", "post"),
    ];
    for (path, method) in expected {
        assert!(
            paths.get(path).and_then(|p| p.get(method)).is_some(),
            "{method} {path}"
        );
    }
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    for name in [
        "Conversation",
        "EventEnvelope",
        "EventPayload",
        "ErrorBody",
        "ErrorCode",
    ] {
        assert!(schemas.contains_key(name), "{name}");
    }
    assert!(doc["components"]["securitySchemes"]["bearer"].is_object());
    assert!(paths["/api/v1/health"]["get"].get("security").is_none());
}

#[tokio::test]
async fn serve_stops_on_shutdown() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(crate::serve(
        listener,
        app(),
        Limits::default(),
        async move {
            let _ = rx.await;
        },
    ));
    tx.send(()).unwrap();
    let res = tokio::time::timeout(std::time::Duration::from_secs(10), task)
        .await
        .unwrap();
    res.unwrap().unwrap();
}
