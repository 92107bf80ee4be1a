//! Extractors whose rejections are our JSON errors: a bad body is `invalid_json` (or
//! `payload_too_large`; a field over its length limit is `bad_request`; in the bodies
//! that are also tool arguments, a missing, mistyped or unknown field is
//! `invalid_params`), a bad query string or path is `bad_request`.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use serde::de::DeserializeOwned;
use tether_proto::ErrorCode;

use crate::error::ApiError;
use crate::validate::Checked;

/// A JSON request body: a JSON object (never an array or a scalar) whose fields are
/// all known to `T` (request types refuse unknown fields, so a misspelt `agnet` is an
/// error and not a silently different conversation) and within their length limits.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned + Checked,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = object_body(req, state).await?;
        let axum::Json(value) = axum::Json::<T>::from_bytes(&bytes).map_err(json_rejection)?;
        value.check()?;
        Ok(ApiJson(value))
    }
}

/// A JSON request body read like [`ApiJson`], except that a field that is missing, of
/// the wrong type or unknown is `invalid_params` naming it: the bodies that are also a
/// delegation tool's arguments (continue, close), so both surfaces answer alike
/// (`tether_proto::parse_params`).
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiParams<T>(pub T);

impl<S, T> FromRequest<S> for ApiParams<T>
where
    T: DeserializeOwned + Checked,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = object_body(req, state).await?;
        let axum::Json(value) =
            axum::Json::<serde_json::Value>::from_bytes(&bytes).map_err(json_rejection)?;
        let value: T = tether_proto::parse_params(&value)
            .map_err(|e| ApiError::new(ErrorCode::InvalidParams, e.message))?;
        value.check()?;
        Ok(ApiParams(value))
    }
}

/// The body of a JSON request whose body is a JSON object (checked by its first byte;
/// serde would take `[]` for a struct).
/// The body of a route that takes none (`new-session`, `detach`, `stop`): empty or `{}`;
/// anything else is `bad_request` rather than silently ignored (issue 24, first use 9).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoBody;

impl<S: Send + Sync> FromRequest<S> for NoBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(bytes_rejection)?;
        let empty = bytes.iter().all(u8::is_ascii_whitespace)
            || serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(&bytes)
                .is_ok_and(|m| m.is_empty());
        if empty {
            Ok(NoBody)
        } else {
            Err(ApiError::bad_request(
                "this route takes no body (send nothing or `{}`); to start a new session \
                 with a task, send `/new <task>` as a message",
            ))
        }
    }
}

async fn object_body<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, ApiError> {
    if !is_json_content_type(req.headers()) {
        return Err(ApiError::new(
            ErrorCode::InvalidJson,
            "expected a JSON body with `Content-Type: application/json`",
        ));
    }
    let bytes = Bytes::from_request(req, state)
        .await
        .map_err(bytes_rejection)?;
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(ApiError::new(
            ErrorCode::InvalidJson,
            "the request body must be a JSON object",
        ));
    }
    Ok(bytes)
}

/// `application/json` or `application/<something>+json`, parameters ignored.
fn is_json_content_type(headers: &HeaderMap) -> bool {
    let Some(value) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = value
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

fn bytes_rejection(rejection: BytesRejection) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return ApiError::new(ErrorCode::PayloadTooLarge, "the request body is too large");
    }
    // Also a body that stopped arriving (the body read time-out).
    ApiError::bad_request(format!(
        "could not read the request body: {}",
        rejection.body_text()
    ))
}

pub(crate) fn json_rejection(rejection: JsonRejection) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return ApiError::new(ErrorCode::PayloadTooLarge, "the request body is too large");
    }
    let message = match &rejection {
        JsonRejection::JsonDataError(e) => {
            format!(
                "the JSON body does not match the expected shape: {}",
                e.body_text()
            )
        }
        JsonRejection::JsonSyntaxError(e) => {
            format!("the request body is not valid JSON: {}", e.body_text())
        }
        JsonRejection::MissingJsonContentType(_) => {
            "expected a JSON body with `Content-Type: application/json`".to_owned()
        }
        other => format!("could not read the request body: {}", other.body_text()),
    };
    ApiError::new(ErrorCode::InvalidJson, message)
}

/// Where an HTTP request came from, as the history names it after the person: `web` for
/// the page (it sends `X-Tether-Client: web`), `api` for anything else (issue 28: "by
/// <name> on <channel>").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Via(pub &'static str);

/// The header the page sends with its calls.
pub const CLIENT_HEADER: &str = "x-tether-client";

impl<S: Send + Sync> FromRequestParts<S> for Via {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let web = parts
            .headers
            .get(CLIENT_HEADER)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"web"));
        Ok(Via(if web { "web" } else { "api" }))
    }
}

/// The address a request came from (`serve` puts it on every request; none in tests
/// that call the router directly).
pub struct Peer(pub Option<std::net::IpAddr>);

impl<S: Send + Sync> FromRequestParts<S> for Peer {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Peer(crate::auth::peer(&parts.extensions)))
    }
}

/// Query-string parameters.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(v)) => Ok(ApiQuery(v)),
            Err(rejection) => Err(query_rejection(rejection)),
        }
    }
}

fn query_rejection(rejection: QueryRejection) -> ApiError {
    ApiError::bad_request(format!(
        "invalid query parameters: {}",
        rejection.body_text()
    ))
}

/// A path parameter.
#[derive(Debug, Clone)]
pub struct ApiPath<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiPath<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(v)) => Ok(ApiPath(v)),
            Err(rejection) => Err(path_rejection(rejection)),
        }
    }
}

fn path_rejection(rejection: PathRejection) -> ApiError {
    ApiError::bad_request(format!("invalid path: {}", rejection.body_text()))
}
