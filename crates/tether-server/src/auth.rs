//! Bearer-token auth. The token is compared in constant time and never logged.

use std::sync::Arc;

use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, Uri, header};
use axum::middleware::Next;
use axum::response::Response;
use serde::Deserialize;

use crate::error::ApiError;

#[derive(Clone)]
pub(crate) struct Auth {
    token: Arc<[u8]>,
}

impl Auth {
    pub fn new(token: String) -> Self {
        Auth {
            token: Arc::from(token.into_bytes()),
        }
    }

    /// The token itself (for routes that check it on their own, like `/mcp`).
    pub fn token(&self) -> String {
        String::from_utf8_lossy(&self.token).into_owned()
    }

    /// Whether `presented` is the token. An empty configured token admits nobody.
    pub(crate) fn admits(&self, presented: &str) -> bool {
        !self.token.is_empty() && constant_time_eq(&self.token, presented.as_bytes())
    }
}

/// Equal contents, in time independent of where they differ (the length is not secret).
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// The token of an `Authorization: Bearer <token>` header.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

#[derive(Deserialize)]
struct TokenQuery {
    token: Option<String>,
}

fn query_token(uri: &Uri) -> Option<String> {
    Query::<TokenQuery>::try_from_uri(uri).ok()?.0.token
}

/// Requires the bearer header.
pub(crate) async fn require_header(
    State(auth): State<Auth>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    match bearer(req.headers()) {
        Some(token) if auth.admits(token) => Ok(next.run(req).await),
        _ => Err(ApiError::unauthorized()),
    }
}

/// Requires the bearer header or a `?token=` query parameter (for `EventSource`).
pub(crate) async fn require_header_or_query(
    State(auth): State<Auth>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let ok = match bearer(req.headers()) {
        Some(token) => auth.admits(token),
        None => query_token(req.uri()).is_some_and(|t| auth.admits(&t)),
    };
    if ok {
        Ok(next.run(req).await)
    } else {
        Err(ApiError::unauthorized())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_compares_contents() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn empty_token_admits_nobody() {
        assert!(!Auth::new(String::new()).admits(""));
        assert!(Auth::new("t".into()).admits("t"));
    }

    #[test]
    fn bearer_parsing() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer(&h), None);
        h.insert(header::AUTHORIZATION, "Bearer abc".parse().unwrap());
        assert_eq!(bearer(&h), Some("abc"));
        h.insert(header::AUTHORIZATION, "bearer  abc ".parse().unwrap());
        assert_eq!(bearer(&h), Some("abc"));
        h.insert(header::AUTHORIZATION, "Basic abc".parse().unwrap());
        assert_eq!(bearer(&h), None);
    }

    #[test]
    fn query_token_parsing() {
        let uri: Uri = "/x?after_id=3&token=a%2Bb".parse().unwrap();
        assert_eq!(query_token(&uri).as_deref(), Some("a+b"));
        let uri: Uri = "/x?after_id=3".parse().unwrap();
        assert_eq!(query_token(&uri), None);
    }
}
