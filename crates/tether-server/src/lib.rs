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
mod openapi;
mod sse;
mod web;

use std::future::Future;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use tether_runtime::Runtime;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::trace::TraceLayer;

pub use error::ApiError;
pub use openapi::ApiDoc;

/// Who may call the API.
#[derive(Clone)]
pub struct AuthConfig {
    /// The bearer token every protected request must carry.
    pub token: String,
}

impl std::fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthConfig")
            .field("token", &"<redacted>")
            .finish()
    }
}

/// Request limits.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest accepted request body in bytes (default 1 MiB).
    pub body_limit: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            body_limit: 1024 * 1024,
        }
    }
}

/// Shared by every handler.
#[derive(Clone)]
pub(crate) struct AppState {
    pub runtime: Runtime,
}

/// The whole HTTP API: `/api/v1/*`, `/api/openapi.json`, the web page at `/`, JSON 404
/// for anything else.
pub fn router(runtime: Runtime, auth: AuthConfig, limits: Limits) -> Router {
    router_with(runtime, auth, limits, ExtraRoutes::default())
}

/// Routes from outside this crate (the channels): `protected` ones behind the bearer
/// token, `public` ones without it (they verify their callers themselves: webhooks).
#[derive(Default)]
pub struct ExtraRoutes {
    pub protected: Option<Router>,
    pub public: Option<Router>,
}

/// [`router`] plus extra routes.
pub fn router_with(
    runtime: Runtime,
    auth: AuthConfig,
    limits: Limits,
    extra: ExtraRoutes,
) -> Router {
    let auth = auth::Auth::new(auth.token);
    let mut routes = api_routes(auth.clone()).with_state(AppState { runtime });
    if let Some(protected) = extra.protected {
        routes = routes.merge(protected.route_layer(axum::middleware::from_fn_with_state(
            auth,
            auth::require_header,
        )));
    }
    if let Some(public) = extra.public {
        routes = routes.merge(public);
    }
    harden(routes, limits)
}

fn api_routes(auth: auth::Auth) -> Router<AppState> {
    let mcp_slot = handlers::delegation::McpSlot::new(&auth.token());
    use handlers::{agents, approvals, conversations, delegation, sessions};

    let protected = Router::new()
        .route("/api/v1/agents", get(agents::list))
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
        .route("/api/v1/runtime", get(handlers::runtime))
        .route_layer(axum::middleware::from_fn_with_state(
            auth.clone(),
            auth::require_header,
        ));

    // EventSource cannot set headers: this route also takes `?token=`.
    let events = Router::new()
        .route(
            "/api/v1/conversations/{id}/events",
            get(sse::conversation_events),
        )
        .route_layer(axum::middleware::from_fn_with_state(
            auth,
            auth::require_header_or_query,
        ));

    // MCP over streamable HTTP checks its own tokens (API token or a session's).
    let mcp = Router::new()
        .route("/mcp", axum::routing::any(delegation::mcp))
        .layer(axum::Extension(mcp_slot));

    let public = Router::new()
        .route("/api/v1/health", get(handlers::health))
        .route("/api/openapi.json", get(openapi::serve_openapi))
        .merge(web::routes());

    protected.merge(events).merge(mcp).merge(public)
}

/// JSON errors for unknown routes and methods, body limits, panics, request tracing.
fn harden(routes: Router, limits: Limits) -> Router {
    routes
        .fallback(error::fallback)
        .method_not_allowed_fallback(error::method_not_allowed)
        .layer(DefaultBodyLimit::max(limits.body_limit))
        .layer(RequestBodyLimitLayer::new(limits.body_limit))
        .layer(axum::middleware::map_response(
            error::normalize_error_response,
        ))
        .layer(CatchPanicLayer::custom(error::panic_response))
        .layer(TraceLayer::new_for_http().make_span_with(trace_span))
}

/// Request span without the query string (it may carry `?token=`).
fn trace_span<B>(req: &axum::http::Request<B>) -> tracing::Span {
    tracing::info_span!("http", method = %req.method(), path = %req.uri().path())
}

/// How long open connections (SSE streams, slow requests) may take to finish after the
/// shutdown signal before `serve` returns anyway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Serves `router` on `listener` until `shutdown` resolves; then stops accepting, ends
/// the SSE streams and waits (bounded) for in-flight requests.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (closing_tx, closing_rx) = tokio::sync::watch::channel(false);
    let router = router.layer(axum::Extension(sse::Closing(closing_rx)));
    let (signalled_tx, signalled_rx) = tokio::sync::oneshot::channel::<()>();
    let server = axum::serve(listener, router).with_graceful_shutdown(async move {
        shutdown.await;
        tracing::info!("shutting down the HTTP server");
        let _ = closing_tx.send(true);
        let _ = signalled_tx.send(());
    });
    let deadline = async move {
        if signalled_rx.await.is_ok() {
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        res = server => res,
        () = deadline => {
            tracing::warn!("connections still open after {SHUTDOWN_GRACE:?}; closing anyway");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests;
