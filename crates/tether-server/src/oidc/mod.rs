//! Sign-in on the page with OpenID Connect (issue 28; `[auth.oidc]`). The page's
//! "Sign in with …" goes to `GET /api/v1/auth/oidc/login`, which keeps the sign-in's
//! nonce and PKCE verifier in the store under the hash of its `state` (any node can take
//! the callback), binds the `state` to this browser with a short-lived cookie, and sends
//! the browser to the provider. `GET /api/v1/auth/oidc/callback` takes that `state` once
//! (a replay finds nothing), trades the code for an ID token, verifies it
//! (`provider.rs`), and signs the person in (`tether_runtime::People::sign_in`): a
//! session in the store, its secret in an HttpOnly cookie, its CSRF token in a cookie the
//! page reads. `POST /api/v1/auth/signout` ends the session everywhere. Failures return
//! the browser to the page with `#signin_error=<code>` and go to the audit log.

pub(crate) mod provider;

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tether_proto::{AuditAction, Role};
use tether_runtime::VerifiedUser;

use crate::AppState;
use crate::auth::constant_time_eq;
use crate::auth::cookies::{CSRF_COOKIE, SESSION_COOKIE, cookie, set_cookie};
use crate::error::ApiError;
use provider::{OidcError, Provider};

/// The cookie binding a sign-in's `state` to the browser that started it.
const STATE_COOKIE: &str = "tether_oidc_state";
/// Where that cookie is sent (the callback only).
const STATE_PATH: &str = "/api/v1/auth/oidc";
/// How long a started sign-in may take.
const LOGIN_TTL_MS: i64 = 10 * 60 * 1000;

/// `GET /api/v1/auth/providers`: what the sign-in screen offers.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub(crate) struct Providers {
    /// Tokens are always accepted.
    pub token: bool,
    /// `Some`: "Sign in with" this provider (its issuer).
    pub oidc: Option<String>,
}

#[utoipa::path(
    get,
    path = "/api/v1/auth/providers",
    tag = "people",
    responses((status = 200, description = "How one may sign in", body = Providers)),
)]
pub(crate) async fn providers(State(s): State<AppState>) -> axum::Json<Providers> {
    axum::Json(Providers {
        token: true,
        oidc: s.oidc.as_ref().map(|p| p.config.issuer.clone()),
    })
}

/// Where the provider sends the browser back: the configured URL, else this request's
/// host (checked already by the Host policy).
fn redirect_url(p: &Provider, headers: &HeaderMap) -> String {
    if let Some(url) = &p.config.redirect_url {
        return url.clone();
    }
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1");
    let scheme = if p.config.secure_cookies {
        "https"
    } else {
        "http"
    };
    format!("{scheme}://{host}/api/v1/auth/oidc/callback")
}

/// `status` with `cookies` set, never cached.
fn with_cookies(status: StatusCode, cookies: &[String]) -> Response {
    let mut resp = status.into_response();
    for c in cookies {
        if let Ok(v) = HeaderValue::from_str(c) {
            resp.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

fn see_other(to: &str, cookies: &[String]) -> Response {
    let mut resp = with_cookies(StatusCode::SEE_OTHER, cookies);
    if let Ok(v) = HeaderValue::from_str(to) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    resp
}

fn not_configured() -> ApiError {
    ApiError::new(
        tether_proto::ErrorCode::NotFound,
        "sign-in with OpenID Connect is not configured ([auth.oidc])",
    )
}

#[utoipa::path(
    get,
    path = "/api/v1/auth/oidc/login",
    tag = "people",
    responses(
        (status = 303, description = "To the provider's sign-in"),
        (status = 404, description = "`[auth.oidc]` is not configured", body = tether_proto::ErrorBody),
    ),
)]
pub(crate) async fn login(State(s): State<AppState>, headers: HeaderMap) -> Response {
    let Some(p) = s.oidc.clone() else {
        return not_configured().into_response();
    };
    let redirect = redirect_url(&p, &headers);
    let started = match p.start(&redirect).await {
        Ok(started) => started,
        Err(e) => return failed(&s, &p, e, None).await,
    };
    let kept = s
        .runtime
        .people()
        .keep_sign_in(
            &started.state,
            &started.nonce,
            &started.verifier,
            LOGIN_TTL_MS,
        )
        .await;
    if let Err(e) = kept {
        return ApiError::from(e).into_response();
    }
    let state_cookie = set_cookie(
        STATE_COOKIE,
        &started.state,
        600,
        true,
        p.config.secure_cookies,
        STATE_PATH,
    );
    see_other(&started.url, &[state_cookie])
}

#[derive(Debug, Deserialize)]
pub(crate) struct Callback {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

#[utoipa::path(
    get,
    path = "/api/v1/auth/oidc/callback",
    tag = "people",
    params(
        ("code" = Option<String>, Query, description = "The authorization code"),
        ("state" = Option<String>, Query, description = "The sign-in's state"),
    ),
    responses((status = 303, description = "Signed in: to the page (else to the page \
        with `#signin_error=<code>`)")),
)]
pub(crate) async fn callback(
    State(s): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<Callback>,
) -> Response {
    let Some(p) = s.oidc.clone() else {
        return not_configured().into_response();
    };
    match finish(&s, &p, &headers, &q).await {
        Ok(signed) => {
            let ttl = p.config.session_ttl.as_secs();
            let secure = p.config.secure_cookies;
            see_other(
                "/",
                &[
                    set_cookie(SESSION_COOKIE, &signed.secret, ttl, true, secure, "/"),
                    set_cookie(CSRF_COOKIE, &signed.csrf, ttl, false, secure, "/"),
                    set_cookie(STATE_COOKIE, "", 0, true, secure, STATE_PATH),
                ],
            )
        }
        Err(SignInError::Oidc(e)) => failed(&s, &p, e, None).await,
        Err(SignInError::Refused(email)) => {
            failed(&s, &p, OidcError::Domain(email.clone()), Some(email)).await
        }
        Err(SignInError::Runtime(e)) => ApiError::from(e).into_response(),
    }
}

enum SignInError {
    Oidc(OidcError),
    /// The person is disabled, or may not be added.
    Refused(String),
    Runtime(tether_runtime::RuntimeError),
}

impl From<OidcError> for SignInError {
    fn from(e: OidcError) -> Self {
        SignInError::Oidc(e)
    }
}

async fn finish(
    s: &AppState,
    p: &Provider,
    headers: &HeaderMap,
    q: &Callback,
) -> Result<tether_runtime::SignedIn, SignInError> {
    if let Some(error) = &q.error {
        let detail = q.error_description.as_deref().unwrap_or_default();
        return Err(OidcError::Provider(format!("{error} {detail}")).into());
    }
    let (Some(code), Some(state)) = (&q.code, &q.state) else {
        return Err(OidcError::State.into());
    };
    // The state must be the one this browser started with (no sign-in forced on
    // someone from another site), and is taken once (no replay).
    let mine = cookie(headers, STATE_COOKIE)
        .is_some_and(|c| constant_time_eq(c.as_bytes(), state.as_bytes()));
    let people = s.runtime.people();
    let taken = people
        .take_sign_in(state)
        .await
        .map_err(SignInError::Runtime)?;
    let (Some(login), true) = (taken, mine) else {
        return Err(OidcError::State.into());
    };
    let redirect = redirect_url(p, headers);
    let claims = p
        .finish(&redirect, code, &login.nonce, &login.verifier)
        .await?;
    let domain = claims.email.rsplit('@').next().unwrap_or_default();
    let may_add =
        p.config.allowed_domains.is_empty() || p.config.allowed_domains.iter().any(|d| d == domain);
    let user = VerifiedUser {
        email: claims.email.clone(),
        name: claims.name,
        role: role_of(&p.config, &claims.role_values),
        default_role: p.config.default_role,
        may_add,
        via: "web".to_owned(),
    };
    match people.sign_in(&user, ttl_ms(p)).await {
        Ok(signed) => Ok(signed),
        Err(e) if e.code() == tether_proto::ErrorCode::Forbidden => {
            Err(SignInError::Refused(claims.email))
        }
        Err(e) => Err(SignInError::Runtime(e)),
    }
}

fn ttl_ms(p: &Provider) -> i64 {
    i64::try_from(p.config.session_ttl.as_millis()).unwrap_or(i64::MAX)
}

/// The highest role the claim's values map to.
fn role_of(config: &crate::OidcConfig, values: &[String]) -> Option<Role> {
    values
        .iter()
        .filter_map(|v| config.roles.get(v).copied())
        .max_by_key(|r| match r {
            Role::Viewer => 0,
            Role::Member => 1,
            Role::Admin => 2,
            Role::Owner => 3,
        })
}

/// A failed sign-in: logged, audited, and the browser back on the page with the code.
async fn failed(s: &AppState, p: &Provider, e: OidcError, email: Option<String>) -> Response {
    tracing::warn!(code = e.code(), "a sign-in failed: {e}");
    let target = email.unwrap_or_else(|| "unknown".to_owned());
    s.runtime
        .people()
        .record(
            None,
            "web",
            AuditAction::SignInFailed,
            Some(&target),
            Some(format!("{}: {e}", e.code())),
        )
        .await;
    let clear = set_cookie(
        STATE_COOKIE,
        "",
        0,
        true,
        p.config.secure_cookies,
        STATE_PATH,
    );
    see_other(&format!("/#signin_error={}", e.code()), &[clear])
}

#[utoipa::path(
    post,
    path = "/api/v1/auth/signout",
    tag = "people",
    responses(
        (status = 204, description = "Signed out: the session ends on every node"),
        (status = 401, description = "Not signed in", body = tether_proto::ErrorBody),
        (status = 403, description = "`forbidden`: no `X-Tether-CSRF` header", body = tether_proto::ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn signout(State(s): State<AppState>, headers: HeaderMap) -> Response {
    let secure = s.oidc.as_ref().is_some_and(|p| p.config.secure_cookies);
    if let Some(secret) = cookie(&headers, SESSION_COOKIE)
        && let Err(e) = s.runtime.people().sign_out(secret).await
        && e.code() != tether_proto::ErrorCode::NotFound
    {
        return ApiError::from(e).into_response();
    }
    with_cookies(
        StatusCode::NO_CONTENT,
        &[
            set_cookie(SESSION_COOKIE, "", 0, true, secure, "/"),
            set_cookie(CSRF_COOKIE, "", 0, false, secure, "/"),
        ],
    )
}

/// The provider, when `[auth.oidc]` is configured (`None` when it is not, or is
/// misconfigured: logged, and token sign-in goes on).
pub(crate) fn provider(config: Option<crate::OidcConfig>) -> Option<Arc<Provider>> {
    let config = config?;
    match Provider::new(config) {
        Ok(p) => Some(Arc::new(p)),
        Err(e) => {
            tracing::error!("[auth.oidc] is not usable: {e}");
            None
        }
    }
}
