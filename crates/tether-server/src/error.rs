//! API errors: every failure leaves as `{"error": {"code", "message"}}` with the HTTP
//! status of its code, including the ones produced outside our handlers (unknown routes,
//! body limit, panics).

use std::any::Any;

use axum::Json;
use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tether_proto::{ErrorBody, ErrorCode};
use tether_runtime::RuntimeError;

/// An error answer of the API.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    /// Overrides the code's status (only for HTTP-level errors such as 405).
    status: Option<StatusCode>,
    /// A `Retry-After` header, in seconds (a client that must wait).
    retry_after_secs: Option<u64>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
            status: None,
            retry_after_secs: None,
        }
    }

    /// `too_many_attempts`, to try again after `secs`.
    pub fn too_many_attempts(secs: u64) -> Self {
        let mut e = Self::new(
            ErrorCode::TooManyAttempts,
            format!("too many failed attempts from this address; try again in {secs} s"),
        );
        e.retry_after_secs = Some(secs);
        e
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::BadRequest, message)
    }

    /// A change signed in by cookie without the session's `X-Tether-CSRF` token.
    pub fn csrf() -> Self {
        Self::new(
            ErrorCode::Forbidden,
            "a change made with the sign-in cookie needs the X-Tether-CSRF header",
        )
    }

    pub fn unauthorized() -> Self {
        Self::new(ErrorCode::Unauthorized, "missing or wrong bearer token")
    }

    fn with_status(mut self, status: StatusCode) -> Self {
        self.status = Some(status);
        self
    }

    pub fn status(&self) -> StatusCode {
        self.status.unwrap_or_else(|| {
            StatusCode::from_u16(self.code.http_status())
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
        })
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl From<RuntimeError> for ApiError {
    fn from(err: RuntimeError) -> Self {
        let code = err.code();
        if code == ErrorCode::Internal {
            tracing::error!(error = %err, "request failed");
        }
        ApiError::new(code, err.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let unauthorized = self.code == ErrorCode::Unauthorized;
        let retry_after = self.retry_after_secs;
        let mut resp = (status, Json(ErrorBody::new(self.code, self.message))).into_response();
        if let Some(secs) = retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if unauthorized {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp
    }
}

/// Unknown route.
pub(crate) async fn fallback(uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        format!("no such route: {}", uri.path()),
    )
}

/// Known route, wrong method (axum adds the `Allow` header listing the route's methods).
pub(crate) async fn method_not_allowed(method: axum::http::Method) -> ApiError {
    ApiError::new(
        ErrorCode::MethodNotAllowed,
        format!("method {method} is not allowed on this route"),
    )
}

/// A handler panicked.
pub(crate) fn panic_response(err: Box<dyn Any + Send + 'static>) -> Response {
    let detail = err
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| err.downcast_ref::<&str>().copied())
        .unwrap_or("unknown panic");
    tracing::error!(panic = detail, "handler panicked");
    ApiError::new(ErrorCode::Internal, "internal error").into_response()
}

/// Largest error body from a lower layer that is copied into our message.
const MAX_COPIED_MESSAGE: usize = 512;

/// Rewrites error responses that are not JSON (axum's own rejections, the body limit
/// layer) into our [`ErrorBody`], keeping the status.
pub(crate) async fn normalize_error_response(resp: Response) -> Response {
    let status = resp.status();
    if !(status.is_client_error() || status.is_server_error()) || is_json(&resp) {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let text = match axum::body::to_bytes(body, MAX_COPIED_MESSAGE).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).trim().to_owned(),
        Err(_) => String::new(),
    };
    let code = code_for_status(status);
    let message = if code == ErrorCode::PayloadTooLarge {
        "the request body is too large".to_owned()
    } else if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_lowercase()
    } else {
        text
    };
    let mut out = ApiError::new(code, message)
        .with_status(status)
        .into_response();
    for name in [header::ALLOW, header::WWW_AUTHENTICATE] {
        if let Some(v) = parts.headers.get(&name) {
            out.headers_mut().insert(name, v.clone());
        }
    }
    out
}

fn is_json(resp: &Response<Body>) -> bool {
    resp.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"))
}

fn code_for_status(status: StatusCode) -> ErrorCode {
    match status {
        StatusCode::UNAUTHORIZED => ErrorCode::Unauthorized,
        StatusCode::NOT_FOUND => ErrorCode::NotFound,
        StatusCode::METHOD_NOT_ALLOWED => ErrorCode::MethodNotAllowed,
        StatusCode::PAYLOAD_TOO_LARGE => ErrorCode::PayloadTooLarge,
        StatusCode::NOT_ACCEPTABLE => ErrorCode::NotAcceptable,
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ErrorCode::UnsupportedMediaType,
        s if s.is_client_error() => ErrorCode::BadRequest,
        _ => ErrorCode::Internal,
    }
}
