//! Sign-in sessions of the page (issue 28): the `tether_session` cookie (HttpOnly,
//! SameSite=Lax, Secure when configured) holds a session's secret, looked up in the store
//! on every request so every node accepts it and signing out ends it everywhere. A
//! request that changes something with only that cookie must carry the session's CSRF
//! token in `X-Tether-CSRF` (the page reads it from the `tether_csrf` cookie, which only
//! pages of this origin can read): a cross-site form or fetch riding the cookie cannot.

use axum::http::{HeaderMap, Method, header};

use super::{Auth, constant_time_eq};
use crate::error::ApiError;
use tether_runtime::Identity;

/// The session cookie (its secret, `tts_…`).
pub(crate) const SESSION_COOKIE: &str = "tether_session";
/// The CSRF token, readable by the page's script.
pub(crate) const CSRF_COOKIE: &str = "tether_csrf";
/// The header the page sends the CSRF token in.
pub(crate) const CSRF_HEADER: &str = "x-tether-csrf";

/// The value of cookie `name` in the request's `Cookie` headers.
pub(crate) fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim_matches('"'))
}

/// A `Set-Cookie` value: `value` for `max_age_secs` (0 deletes it).
pub(crate) fn set_cookie(
    name: &str,
    value: &str,
    max_age_secs: u64,
    http_only: bool,
    secure: bool,
    path: &str,
) -> String {
    let mut c = format!("{name}={value}; Path={path}; Max-Age={max_age_secs}; SameSite=Lax");
    if http_only {
        c.push_str("; HttpOnly");
    }
    if secure {
        c.push_str("; Secure");
    }
    c
}

/// Whether a request with `method` only reads.
fn safe(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

impl Auth {
    /// The person of the request's session cookie; `None` without one (or with one that
    /// is unknown, signed out, expired, or a disabled person's). A change without the
    /// session's CSRF token is `forbidden`.
    pub(crate) async fn cookie_identity(
        &self,
        headers: &HeaderMap,
        method: &Method,
    ) -> Result<Option<Identity>, ApiError> {
        let (Some(secret), Some(rt)) = (cookie(headers, SESSION_COOKIE), &self.runtime) else {
            return Ok(None);
        };
        let Some((who, csrf)) = rt.people().session_identity(secret).await? else {
            return Ok(None);
        };
        if !safe(method) {
            let sent = headers
                .get(CSRF_HEADER)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            if !constant_time_eq(sent.as_bytes(), csrf.as_bytes()) {
                return Err(ApiError::csrf());
            }
        }
        Ok(Some(who))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_found_by_name_among_many() {
        let mut h = HeaderMap::new();
        h.append(header::COOKIE, "a=1; tether_session=tts_x".parse().unwrap());
        h.append(header::COOKIE, "tether_csrf=\"c\"".parse().unwrap());
        assert_eq!(cookie(&h, SESSION_COOKIE), Some("tts_x"));
        assert_eq!(cookie(&h, CSRF_COOKIE), Some("c"));
        assert_eq!(cookie(&h, "tether"), None);
    }

    #[test]
    fn set_cookie_says_everything_a_browser_needs() {
        assert_eq!(
            set_cookie("n", "v", 60, true, true, "/"),
            "n=v; Path=/; Max-Age=60; SameSite=Lax; HttpOnly; Secure"
        );
        assert_eq!(
            set_cookie("n", "", 0, false, false, "/x"),
            "n=; Path=/x; Max-Age=0; SameSite=Lax"
        );
    }
}
