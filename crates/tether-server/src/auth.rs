//! Who is calling (issue 28). A request's bearer token is the bootstrap token
//! (`TETHER_TOKEN` or the data dir's token file, compared in constant time: the install's
//! owner) or a personal token (`tth_…`, found by its hash: its person, with its scopes).
//! The person rides the request as an [`Identity`]; each route's rule ([`rules`]) is
//! checked here for what is not about one conversation, and handlers reach the runtime
//! acting as that person ([`Api`]), which checks the rest where every call passes.
//! Tokens are never logged.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{FromRequestParts, MatchedPath, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, Uri, header};
use axum::middleware::Next;
use axum::response::Response;
use serde::Deserialize;
use tether_core::authz::{self, decide};
use tether_proto::{AuditAction, PersonId};
use tether_runtime::{Identity, Runtime};

use crate::AppState;
use crate::error::ApiError;

pub(crate) mod cookies;
pub(crate) mod guesses;
pub(crate) mod rules;

use guesses::{Counted, Guesses};

#[derive(Clone)]
pub(crate) struct Auth {
    token: Arc<[u8]>,
    owner: Arc<Identity>,
    /// `None` only in this crate's unit tests (the bootstrap token alone).
    runtime: Option<Runtime>,
    guesses: Arc<Guesses>,
}

impl Auth {
    pub fn new(token: String, runtime: Runtime, failures_per_minute: u32) -> Self {
        Auth {
            token: Arc::from(token.into_bytes()),
            owner: Arc::new(runtime.owner_identity()),
            runtime: Some(runtime),
            guesses: Arc::new(Guesses::new(failures_per_minute)),
        }
    }

    /// The bootstrap token alone, standing for an owner named `owner`.
    #[cfg(test)]
    pub fn bootstrap_only(token: String) -> Self {
        Auth {
            token: Arc::from(token.into_bytes()),
            owner: Arc::new(Identity {
                person: PersonId::from("owner"),
                name: "owner".into(),
                role: tether_proto::Role::Owner,
                scopes: tether_proto::TokenScope::ALL.to_vec(),
            }),
            runtime: None,
            guesses: Arc::new(Guesses::new(guesses::MAX_FAILURES)),
        }
    }

    /// The token itself (for routes that check it on their own, like `/mcp`).
    pub fn token(&self) -> String {
        String::from_utf8_lossy(&self.token).into_owned()
    }

    /// Whether `presented` is the bootstrap token. An empty configured token admits
    /// nobody.
    pub(crate) fn admits(&self, presented: &str) -> bool {
        !self.token.is_empty() && constant_time_eq(&self.token, presented.as_bytes())
    }

    /// The install's owner (the bootstrap token's person).
    pub(crate) fn owner(&self) -> Identity {
        self.owner.as_ref().clone()
    }

    /// `person`, reading only (a signed link made for them); `None` when they are
    /// disabled or gone.
    pub(crate) async fn reader(&self, person: &PersonId) -> Result<Option<Identity>, ApiError> {
        match &self.runtime {
            Some(rt) => Ok(rt.people().reader(person).await?),
            None => Ok(None),
        }
    }

    /// Who `presented` (from `peer`) stands for; `None`: nobody (unknown, revoked,
    /// expired, disabled). An address that presented too many refused credentials is
    /// refused first ([`guesses`]); a refusal is counted, and the first of a window and
    /// the one that blocks the address go to the audit log.
    pub(crate) async fn identify(
        &self,
        presented: &str,
        peer: Option<IpAddr>,
    ) -> Result<Option<Identity>, ApiError> {
        let now = std::time::Instant::now();
        self.not_blocked(peer)?;
        if self.admits(presented) {
            return Ok(Some(self.owner()));
        }
        let who = match &self.runtime {
            Some(rt) if presented.starts_with(tether_runtime::TOKEN_PREFIX) => {
                rt.people().identify_token(presented).await?
            }
            _ => None,
        };
        if who.is_none() {
            self.refused(peer, now, "a wrong, revoked or expired token")
                .await;
        }
        Ok(who)
    }

    /// `too_many_attempts` while `peer` waits out its window (see [`guesses`]).
    pub(crate) fn not_blocked(&self, peer: Option<IpAddr>) -> Result<(), ApiError> {
        match self.guesses.blocked(peer, std::time::Instant::now()) {
            Some(left) => Err(ApiError::too_many_attempts(left.as_secs().max(1))),
            None => Ok(()),
        }
    }

    /// Counts a credential refused from `peer` (by [`Auth::identify`], or by a route that
    /// checks its own tokens, like `/mcp`'s session tokens).
    pub(crate) async fn refused(&self, peer: Option<IpAddr>, now: std::time::Instant, what: &str) {
        let detail = match self.guesses.failed(peer, now) {
            Counted::More => return,
            Counted::First => what.to_owned(),
            Counted::Blocked => format!(
                "{} refused tokens or codes within {} s: the address waits",
                self.guesses.max(),
                guesses::WINDOW.as_secs()
            ),
        };
        if let Some(rt) = &self.runtime {
            let from = peer.map_or_else(|| "an unknown address".to_owned(), |a| a.to_string());
            rt.people()
                .record(
                    None,
                    "unknown",
                    AuditAction::SignInFailed,
                    Some(&from),
                    Some(detail),
                )
                .await;
        }
    }
}

/// The address a request came from (`serve` puts it on every request).
pub(crate) fn peer(extensions: &axum::http::Extensions) -> Option<IpAddr> {
    extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip())
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

/// How often an open stream checks that its personal token still works.
const RECHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// The revocable credential a request presented: a personal token (header, else
/// `?token=`), else a sign-in session's cookie; `None` for the bootstrap token or none.
pub(crate) fn personal_token(headers: &HeaderMap, uri: &Uri) -> Option<String> {
    let presented = bearer(headers)
        .map(str::to_owned)
        .or_else(|| query_token(uri));
    match presented {
        Some(p) => p.starts_with(tether_runtime::TOKEN_PREFIX).then_some(p),
        None => cookies::cookie(headers, cookies::SESSION_COOKIE).map(str::to_owned),
    }
}

/// Ends when `secret` stops working (revoked, signed out, expired, its person disabled), checked
/// every [`RECHECK`]: an open event stream closes then. Never ends without a personal
/// token; a store that cannot answer keeps the stream (the next check decides).
pub(crate) async fn until_revoked(runtime: Runtime, secret: Option<String>) {
    let Some(secret) = secret else {
        return std::future::pending().await;
    };
    let session = secret.starts_with(tether_runtime::SESSION_PREFIX);
    loop {
        tokio::time::sleep(RECHECK).await;
        let people = runtime.people();
        let gone = if session {
            matches!(people.session_identity(&secret).await, Ok(None))
        } else {
            matches!(people.identify_token(&secret).await, Ok(None))
        };
        if gone {
            return;
        }
    }
}

/// The route template of a conversation's own routes (its id is the third segment).
const OF_CONVERSATION: &str = "/api/v1/conversations/{id}";

/// Checks the route's rule for `who` and lets the request on, carrying them. On a
/// conversation's own routes the person's right to it is checked here too, before the
/// body is read (a viewer's upload is refused unread; the command is checked again
/// where it runs).
pub(crate) async fn admit(
    auth: &Auth,
    who: Identity,
    mut req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let path = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    check_route(&who, req.method(), &path)?;
    let action = rules::action(req.method(), &path);
    if let (Some(action), Some(rt)) = (action, &auth.runtime)
        && action.on_conversation()
        && (path == OF_CONVERSATION || path.starts_with(&format!("{OF_CONVERSATION}/")))
        && let Some(id) = req.uri().path().split('/').nth(4)
    {
        let id = tether_proto::ConversationId::from(id);
        rt.acting_as(who.clone())
            .people()
            .may_on(&id, action)
            .await?;
    }
    req.extensions_mut().insert(who);
    Ok(next.run(req).await)
}

/// The route's rule: an action on one conversation needs its scope here and is decided
/// by the runtime (it knows whose the conversation is); any other is decided here.
pub(crate) fn check_route(who: &Identity, method: &Method, path: &str) -> Result<(), ApiError> {
    let Some(action) = rules::action(method, path) else {
        // A route without a rule is nobody's (the route × role test keeps this empty).
        tracing::error!(%method, path, "route without an access rule");
        return Err(ApiError::from(tether_runtime::RuntimeError::Denied(
            authz::Denied::Forbidden,
        )));
    };
    let actor = who.actor();
    let verdict = if action.on_conversation() {
        let scope = authz::rule(action).scope;
        if actor.scopes.contains(scope) {
            Ok(())
        } else {
            Err(authz::Denied::Scope(scope))
        }
    } else {
        decide(&actor, action, None)
    };
    verdict.map_err(|d| ApiError::from(tether_runtime::RuntimeError::Denied(d)))
}

/// Requires the bearer header.
pub(crate) async fn require_header(
    State(auth): State<Auth>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let who = match bearer(req.headers()) {
        Some(token) => auth.identify(token, peer(req.extensions())).await?,
        None => auth.cookie_identity(req.headers(), req.method()).await?,
    };
    match who {
        Some(who) => admit(&auth, who, req, next).await,
        None => Err(ApiError::unauthorized()),
    }
}

/// Requires the bearer header or a `?token=` query parameter (for `EventSource`).
pub(crate) async fn require_header_or_query(
    State(auth): State<Auth>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let presented = match bearer(req.headers()) {
        Some(token) => Some(token.to_owned()),
        None => query_token(req.uri()),
    };
    let who = match presented {
        Some(token) => auth.identify(&token, peer(req.extensions())).await?,
        None => auth.cookie_identity(req.headers(), req.method()).await?,
    };
    match who {
        Some(who) => admit(&auth, who, req, next).await,
        None => Err(ApiError::unauthorized()),
    }
}

/// The handlers' state with the runtime acting as the request's person (tether's own
/// where no person was admitted: the public routes).
pub(crate) struct Api(pub AppState);

impl FromRequestParts<AppState> for Api {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Api, Infallible> {
        let mut s = state.clone();
        if let Some(who) = parts.extensions.get::<Identity>() {
            s.runtime = s.runtime.acting_as(who.clone());
        }
        Ok(Api(s))
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
