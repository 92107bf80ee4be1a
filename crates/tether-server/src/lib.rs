//! tether-server: the HTTP API of tether (axum): JSON endpoints under `/api/v1`, the
//! per-conversation SSE event stream, bearer-token auth and the OpenAPI document
//! (`/api/openapi.json`, the source of truth for the contract), and the web chat page
//! (`/`, static files embedded in the binary).
//!
//! It only translates HTTP to calls on [`tether_runtime::Runtime`]: no domain logic, no
//! storage and no agent processes here. Every error leaves as a JSON
//! [`tether_proto::ErrorBody`] with the status of its [`tether_proto::ErrorCode`].

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod auth;
mod error;
mod extract;
mod handlers;
mod host;
mod links;
mod list_sse;
mod oidc;
mod openapi;
mod serve;
mod sse;
mod validate;
mod web;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use tether_runtime::Runtime;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::RequestBodyTimeoutLayer;
use tower_http::trace::TraceLayer;

/// The access rule of a route (method, template): what the route × role test checks.
pub use auth::rules::action as route_action;
pub use error::ApiError;
pub use host::HostPolicy;
pub use openapi::ApiDoc;
pub use serve::serve;

/// Who may call the API.
#[derive(Clone)]
pub struct AuthConfig {
    /// The bearer token every protected request must carry.
    pub token: String,
    /// `[auth.oidc]`: sign-in on the page with OpenID Connect.
    pub oidc: Option<OidcConfig>,
}

/// `[auth.oidc]` (issue 28): the provider, the client, who may be added and with which
/// role, and the session's cookies.
#[derive(Clone)]
pub struct OidcConfig {
    /// Without the trailing slash; discovery is `<issuer>/.well-known/openid-configuration`.
    pub issuer: String,
    pub client_id: String,
    pub client_secret: Option<String>,
    /// Where the provider returns (default: `http(s)://<Host>/api/v1/auth/oidc/callback`).
    pub redirect_url: Option<String>,
    /// Email domains a person may be added from at first sign-in (empty: any the
    /// provider vouches for); a person an admin added by email always may sign in.
    pub allowed_domains: Vec<String>,
    /// The ID token claim whose values map to roles (`roles`).
    pub role_claim: Option<String>,
    pub roles: std::collections::BTreeMap<String, tether_proto::Role>,
    pub default_role: tether_proto::Role,
    pub session_ttl: std::time::Duration,
    /// Cookies marked `Secure` (served over TLS).
    pub secure_cookies: bool,
}

impl std::fmt::Debug for OidcConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcConfig")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("redirect_url", &self.redirect_url)
            .field("allowed_domains", &self.allowed_domains)
            .field("role_claim", &self.role_claim)
            .field("roles", &self.roles)
            .field("default_role", &self.default_role)
            .field("session_ttl", &self.session_ttl)
            .field("secure_cookies", &self.secure_cookies)
            .finish()
    }
}

impl std::fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthConfig")
            .field("token", &"<redacted>")
            .finish()
    }
}

/// The daemon's per-run id, reported by the health route. Add it to the router as an
/// `axum::Extension` layer.
#[derive(Debug, Clone)]
pub struct InstanceId(pub String);

/// Request limits.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest accepted request body in bytes (default 1 MiB).
    pub body_limit: usize,
    /// Largest attachment upload body in bytes (default 51 MiB: the default per-message
    /// attachment limit plus room for the multipart framing).
    pub upload_limit: usize,
    /// How long a client may take to send a request's headers, and how long an idle
    /// keep-alive connection stays open (default 10 s).
    pub header_read_timeout: Duration,
    /// How long a request body may pause between two chunks before the request fails
    /// and the connection is closed (default 15 s). Only request bodies: responses (SSE
    /// streams, MCP waits) are never cut.
    pub body_read_timeout: Duration,
    /// The whole of a request to an unauthenticated route that must read its body before
    /// it can check its caller (the webhooks), body included (default 30 s): a body
    /// dripped a byte at a time is cut then (issue 24 S2).
    pub unauthenticated_deadline: Duration,
    /// How long one write to a client may make no progress before its connection is
    /// closed (default 30 s): a client that never reads its response (or its event
    /// stream) does not keep the connection.
    pub write_timeout: Duration,
    /// Most connections open at once (default 1024, and never more than the process's
    /// file limit allows); more are closed as they are accepted.
    pub max_connections: usize,
    /// Of those, the last ones are kept for authenticated clients (default 64): past
    /// `max_connections - reserved_connections`, unauthenticated routes answer 503.
    pub reserved_connections: usize,
    /// The whole of an attachment upload, body included (default 300 s): a slow upload
    /// is cut then (408).
    pub upload_deadline: Duration,
    /// Uploads read at once (default 4; each is held in memory up to `upload_limit`):
    /// more answer 503 `server_busy`.
    pub max_uploads: usize,
    /// Refused tokens an address may present per minute before it is refused everything
    /// for the rest of the minute (default 20; 0: no limit). See `auth/guesses.rs`.
    pub token_failures_per_minute: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            body_limit: 1024 * 1024,
            upload_limit: 51 * 1024 * 1024,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(15),
            unauthenticated_deadline: Duration::from_secs(30),
            write_timeout: Duration::from_secs(30),
            max_connections: 1024,
            reserved_connections: 64,
            upload_deadline: Duration::from_secs(300),
            max_uploads: 4,
            token_failures_per_minute: guesses_default(),
        }
    }
}

fn guesses_default() -> u32 {
    auth::guesses::MAX_FAILURES
}

/// Shared by every handler.
#[derive(Clone)]
pub(crate) struct AppState {
    pub runtime: Runtime,
    /// The OpenAPI document served at `/api/openapi.json` (ours plus the extra routes').
    pub openapi: Arc<utoipa::openapi::OpenApi>,
    /// Signs the page's download links (`POST /api/v1/links`).
    pub links: links::Signer,
    /// The guessing limit, for routes that check codes of their own (link codes).
    pub guard: auth::Auth,
    /// `[auth.oidc]`'s provider.
    pub oidc: Option<Arc<oidc::provider::Provider>>,
}

/// The whole HTTP API: `/api/v1/*`, `/api/openapi.json`, the web page at `/`, JSON 404
/// for anything else.
pub fn router(runtime: Runtime, auth: AuthConfig, limits: Limits, hosts: HostPolicy) -> Router {
    router_with(runtime, auth, limits, hosts, ExtraRoutes::default())
}

/// Routes from outside this crate (the channels): `protected` ones behind the bearer
/// token, `public` ones without it (they verify their callers themselves: webhooks), and
/// their part of the OpenAPI document.
#[derive(Default)]
pub struct ExtraRoutes {
    pub protected: Option<Router>,
    pub public: Option<Router>,
    pub openapi: Option<utoipa::openapi::OpenApi>,
}

/// [`router`] plus extra routes.
pub fn router_with(
    runtime: Runtime,
    auth: AuthConfig,
    limits: Limits,
    hosts: HostPolicy,
    extra: ExtraRoutes,
) -> Router {
    use utoipa::OpenApi as _;
    let auth_config = auth;
    let auth = auth::Auth::new(
        auth_config.token.clone(),
        runtime.clone(),
        limits.token_failures_per_minute,
    );
    let mut doc = ApiDoc::openapi();
    if let Some(more) = extra.openapi {
        doc.merge(more);
    }
    let state = AppState {
        runtime,
        openapi: Arc::new(doc),
        links: links::Signer::new(&auth.token()),
        guard: auth.clone(),
        oidc: oidc::provider(auth_config.oidc),
    };
    let uploads = limit_bodies(
        upload_routes(auth.clone(), limits).with_state(state.clone()),
        limits.upload_limit,
    );
    let mut routes = api_routes(auth.clone()).with_state(state);
    if let Some(protected) = extra.protected {
        routes = routes.merge(protected.route_layer(axum::middleware::from_fn_with_state(
            auth,
            auth::require_header,
        )));
    }
    if let Some(public) = extra.public {
        // Webhooks read their body before they can check their caller: an overall
        // deadline, and no room taken from authenticated clients (issue 24 S2).
        let public = public
            .layer(tower_http::timeout::TimeoutLayer::with_status_code(
                axum::http::StatusCode::REQUEST_TIMEOUT,
                limits.unauthenticated_deadline,
            ))
            .layer(axum::middleware::from_fn(serve::refuse_when_busy));
        routes = routes.merge(public);
    }
    harden(
        limit_bodies(routes, limits.body_limit).merge(uploads),
        limits,
        hosts,
    )
}

/// The request body limit of these routes (a longer body is `payload_too_large`).
fn limit_bodies(routes: Router, limit: usize) -> Router {
    routes
        .layer(DefaultBodyLimit::max(limit))
        .layer(RequestBodyLimitLayer::new(limit))
}

/// Attachment uploads: the one route whose body may be larger than `body_limit` (it
/// has `upload_limit`; the runtime's per-file and per-message limits apply inside).
/// An upload has an overall deadline and at most `max_uploads` run at once (issue 24 S8).
fn upload_routes(auth: auth::Auth, limits: Limits) -> Router<AppState> {
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_uploads.max(1)));
    Router::new()
        .route(
            "/api/v1/conversations/{id}/attachments",
            post(handlers::attachments::upload),
        )
        .route_layer(tower_http::timeout::TimeoutLayer::with_status_code(
            axum::http::StatusCode::REQUEST_TIMEOUT,
            limits.upload_deadline,
        ))
        .route_layer(axum::middleware::from_fn_with_state(
            slots,
            handlers::attachments::one_of_few,
        ))
        .route_layer(axum::middleware::from_fn_with_state(
            auth,
            auth::require_header,
        ))
}

fn api_routes(auth: auth::Auth) -> Router<AppState> {
    let mcp_slot = handlers::delegation::McpSlot::new(auth.clone());
    use handlers::{agents, approvals, conversations, delegation, sessions};

    let protected = Router::new()
        .route("/api/v1/agents", get(agents::list))
        .route("/api/v1/workspace", get(agents::workspace))
        .route(
            "/api/v1/conversations",
            post(conversations::create).get(conversations::list),
        )
        .route(
            "/api/v1/conversations/{id}",
            get(conversations::get).patch(conversations::update),
        )
        .route(
            "/api/v1/conversations/{id}/messages",
            post(conversations::send_message).get(conversations::history),
        )
        .route(
            "/api/v1/conversations/{id}/new-session",
            post(conversations::new_session),
        )
        .route(
            "/api/v1/conversations/{id}/detach",
            post(conversations::detach),
        )
        .route("/api/v1/conversations/{id}/stop", post(conversations::stop))
        .route(
            "/api/v1/conversations/{id}/events/page",
            get(handlers::event_page::events_page),
        )
        .route(
            "/api/v1/conversations/{id}/continuation",
            get(delegation::continuation),
        )
        .route(
            "/api/v1/conversations/{id}/continue",
            post(delegation::continue_task),
        )
        .route(
            "/api/v1/conversations/{id}/close",
            post(delegation::close_task),
        )
        .route(
            "/api/v1/conversations/{id}/delegations",
            get(delegation::children),
        )
        .route("/api/v1/sessions/{id}", get(sessions::get))
        .route("/api/v1/sessions/{id}/turns", get(sessions::turns))
        .route("/api/v1/sessions/{id}/events", get(sessions::events))
        .route("/api/v1/approvals", get(approvals::list_approvals))
        .route("/api/v1/approvals/{id}", post(approvals::answer_approval))
        .route("/api/v1/questions", get(approvals::list_questions))
        .route("/api/v1/questions/{id}", post(approvals::answer_question))
        .route("/api/v1/pool", get(handlers::pool))
        .route(
            "/api/v1/turns/{id}/files",
            get(handlers::attachments::turn_files),
        )
        .route("/api/v1/runtime", get(handlers::runtime))
        .route("/api/v1/cluster", get(handlers::cluster))
        .route("/api/v1/drain", post(handlers::drain))
        .route(
            "/api/v1/conversations/{id}/worktree",
            get(handlers::worktrees::get).post(handlers::worktrees::act),
        )
        .route(
            "/api/v1/conversations/{id}/worktree/diff",
            get(handlers::worktrees::diff),
        )
        .route("/api/v1/links", post(links::make_links))
        .route("/api/v1/me", get(handlers::people::me))
        .route(
            "/api/v1/tokens",
            get(handlers::people::list_tokens).post(handlers::people::create_token),
        )
        .route(
            "/api/v1/tokens/{id}",
            axum::routing::delete(handlers::people::revoke_token),
        )
        .route(
            "/api/v1/people",
            get(handlers::people::list_people).post(handlers::people::add_person),
        )
        .route(
            "/api/v1/people/{id}",
            axum::routing::patch(handlers::people::update_person),
        )
        .route("/api/v1/audit", get(handlers::audit::audit))
        .route("/api/v1/usage", get(handlers::usage::usage))
        .route(
            "/api/v1/budgets",
            get(handlers::usage::budgets).post(handlers::usage::create_budget),
        )
        .route(
            "/api/v1/budgets/{id}",
            axum::routing::delete(handlers::usage::delete_budget),
        )
        .route(
            "/api/v1/schedules",
            get(handlers::schedules::list).post(handlers::schedules::create),
        )
        .route(
            "/api/v1/schedules/{id}",
            get(handlers::schedules::get)
                .patch(handlers::schedules::update)
                .delete(handlers::schedules::delete),
        )
        .route("/api/v1/auth/signout", post(oidc::signout))
        .route(
            "/api/v1/me/accounts",
            get(handlers::accounts::my_accounts).post(handlers::accounts::redeem),
        )
        .route(
            "/api/v1/me/accounts/{channel}/{user_id}",
            axum::routing::delete(handlers::accounts::unlink_mine),
        )
        .route("/api/v1/me/link-codes", post(handlers::accounts::make_code))
        .route(
            "/api/v1/people/{id}/accounts",
            get(handlers::accounts::accounts_of).post(handlers::accounts::link),
        )
        .route(
            "/api/v1/people/{id}/accounts/{channel}/{user_id}",
            axum::routing::delete(handlers::accounts::unlink),
        )
        .route_layer(axum::middleware::from_fn_with_state(
            auth.clone(),
            auth::require_header,
        ));

    // EventSource cannot set headers: these routes also take `?token=`.
    let events = Router::new()
        .route("/api/v1/conversations/events", get(list_sse::list_events))
        .route(
            "/api/v1/conversations/{id}/events",
            get(sse::conversation_events),
        )
        .route_layer(axum::middleware::from_fn_with_state(
            auth.clone(),
            auth::require_header_or_query,
        ));

    // `<img src>` and download links cannot set headers either: these take a signed
    // link instead (never the token in the address: it would stay in the history).
    let signer = links::Signer::new(&auth.token());
    let downloads = Router::new()
        .route(
            "/api/v1/attachments/{id}",
            get(handlers::attachments::download),
        )
        .route(
            "/api/v1/turns/{id}/files/content",
            get(handlers::attachments::turn_file),
        )
        .route_layer(axum::middleware::from_fn_with_state(
            (auth, signer),
            links::require_header_or_link,
        ));

    // MCP over streamable HTTP checks its own tokens (API token or a session's).
    let mcp = Router::new()
        .route("/mcp", axum::routing::any(delegation::mcp))
        .layer(axum::Extension(mcp_slot));

    let public = Router::new()
        .route("/api/v1/health", get(handlers::health))
        .route("/api/v1/auth/providers", get(oidc::providers))
        .route("/api/v1/auth/oidc/login", get(oidc::login))
        .route("/api/v1/auth/oidc/callback", get(oidc::callback))
        .route("/api/v1/ready", get(handlers::ready))
        .route("/api/openapi.json", get(openapi::serve_openapi))
        .merge(web::routes());

    protected
        .merge(events)
        .merge(downloads)
        .merge(mcp)
        .merge(public)
}

/// JSON errors for unknown routes and methods, the Host check, body time-outs (the
/// body limits are the routes' own: see `router_with`), panics, request tracing.
fn harden(routes: Router, limits: Limits, hosts: HostPolicy) -> Router {
    routes
        .fallback(error::fallback)
        .method_not_allowed_fallback(error::method_not_allowed)
        .layer(RequestBodyTimeoutLayer::new(limits.body_read_timeout))
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(hosts),
            host::check,
        ))
        .layer(axum::middleware::map_response(
            error::normalize_error_response,
        ))
        .layer(axum::middleware::from_fn(no_store))
        .layer(CatchPanicLayer::custom(error::panic_response))
        .layer(TraceLayer::new_for_http().make_span_with(trace_span))
}

/// `Cache-Control: no-store, private` on every API answer that does not set its own:
/// conversations, attachments and files must not stay in a browser's or a proxy's cache.
async fn no_store(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let api = req.uri().path().starts_with("/api/");
    let mut resp = next.run(req).await;
    if api
        && !resp
            .headers()
            .contains_key(axum::http::header::CACHE_CONTROL)
    {
        resp.headers_mut().insert(
            axum::http::header::CACHE_CONTROL,
            axum::http::HeaderValue::from_static("no-store, private"),
        );
    }
    resp
}

/// Request span without the query string (it may carry `?token=`).
/// A request's span; a client's W3C `traceparent` header makes it a child of the
/// client's trace (issue 31).
fn trace_span<B>(req: &axum::http::Request<B>) -> tracing::Span {
    use opentelemetry::propagation::TextMapPropagator as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    let span = tracing::info_span!(
        "http",
        otel.name = %format!(
            "{} {}",
            req.method(),
            req.extensions()
                .get::<axum::extract::MatchedPath>()
                .map_or("(unmatched)", |m| m.as_str())
        ),
        method = %req.method(),
        path = %req.uri().path()
    );
    if let Some(tp) = req
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
    {
        let carrier = std::collections::HashMap::from([("traceparent".to_owned(), tp.to_owned())]);
        let cx = opentelemetry_sdk::propagation::TraceContextPropagator::new().extract(&carrier);
        let _ = span.set_parent(cx);
    }
    span
}

#[cfg(test)]
mod tests;
