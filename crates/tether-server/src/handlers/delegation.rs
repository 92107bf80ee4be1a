//! Delegated conversations for people: availability, continue and close (sharing the
//! parent agents' idempotency ledger), the children of a conversation, and the
//! streamable HTTP MCP endpoint `/mcp` (API token or a session's MCP token).

use crate::auth::Api;
use std::sync::{Arc, OnceLock};

use axum::Json;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use tether_proto::{
    CloseRequest, Continuation, ContinueRequest, ConversationId, ErrorBody, TaskClosed, TaskId,
    TaskStarted,
};
use tether_runtime::Caller;
use tower::ServiceExt;

use crate::error::ApiError;
use crate::extract::{ApiParams, ApiPath};

#[utoipa::path(
    get,
    path = "/api/v1/conversations/{id}/continuation",
    tag = "delegation",
    params(("id" = String, Path, description = "Delegated conversation (task) id")),
    responses(
        (status = 200, description = "Whether and how the delegated session can continue", body = Continuation),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 404, description = "Not a delegated conversation", body = ErrorBody),
        (status = 503, description = "rebuilding: recovering after a restart", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn continuation(
    Api(s): Api,
    ApiPath(id): ApiPath<TaskId>,
) -> Result<Json<Continuation>, ApiError> {
    Ok(Json(s.runtime.continuation(&id).await?))
}

#[utoipa::path(
    post,
    path = "/api/v1/conversations/{id}/continue",
    tag = "delegation",
    params(("id" = String, Path, description = "Delegated conversation (task) id")),
    request_body = ContinueRequest,
    responses(
        (status = 200, description = "A new turn started in the same session (or the first result for a repeated continuation_id)", body = TaskStarted),
        (status = 400, description = "invalid_params (a field missing, mistyped or unknown), invalid_task, bad continuation_id", body = ErrorBody),
        (status = 404, description = "Not a delegated conversation", body = ErrorBody),
        (status = 409, description = "session_still_running, session_released, not_continuable, continuation_conflict", body = ErrorBody),
        (status = 502, description = "resume_unavailable: nothing was sent", body = ErrorBody),
        (status = 503, description = "rebuilding", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn continue_task(
    Api(s): Api,
    ApiPath(id): ApiPath<TaskId>,
    ApiParams(req): ApiParams<ContinueRequest>,
) -> Result<Json<TaskStarted>, ApiError> {
    Ok(Json(
        s.runtime
            .continue_task(&Caller::Person, &id, &req.message, &req.continuation_id)
            .await?,
    ))
}

#[utoipa::path(
    post,
    path = "/api/v1/conversations/{id}/close",
    tag = "delegation",
    params(("id" = String, Path, description = "Delegated conversation (task) id")),
    request_body = CloseRequest,
    responses(
        (status = 200, description = "Released (or the first result for a repeated continuation_id)", body = TaskClosed),
        (status = 400, description = "invalid_params (a field missing, mistyped or unknown), bad continuation_id", body = ErrorBody),
        (status = 404, description = "Not a delegated conversation", body = ErrorBody),
        (status = 409, description = "session_released, continuation_conflict", body = ErrorBody),
        (status = 503, description = "rebuilding", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn close_task(
    Api(s): Api,
    ApiPath(id): ApiPath<TaskId>,
    ApiParams(req): ApiParams<CloseRequest>,
) -> Result<Json<TaskClosed>, ApiError> {
    Ok(Json(
        s.runtime
            .close_task(&Caller::Person, &id, &req.continuation_id)
            .await?,
    ))
}

#[utoipa::path(
    get,
    path = "/api/v1/conversations/{id}/delegations",
    tag = "delegation",
    params(("id" = String, Path, description = "Parent conversation id")),
    responses(
        (status = 200, description = "The conversation's delegated tasks, oldest first", body = [Continuation]),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 404, description = "No such conversation", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn children(
    Api(s): Api,
    ApiPath(id): ApiPath<ConversationId>,
) -> Result<Json<Vec<Continuation>>, ApiError> {
    Ok(Json(s.runtime.delegations_of(&id).await?))
}

/// The `/mcp` endpoint's service, built on first use.
#[derive(Clone)]
pub(crate) struct McpSlot {
    token: Arc<str>,
    auth: crate::auth::Auth,
    service: Arc<OnceLock<tether_mcp::HttpService>>,
}

impl McpSlot {
    pub fn new(auth: crate::auth::Auth) -> Self {
        McpSlot {
            token: Arc::from(auth.token()),
            auth,
            service: Arc::new(OnceLock::new()),
        }
    }
}

/// `/mcp`: MCP over streamable HTTP. Admits the API token (an external client acting as
/// the install's owner: its tasks have no parent), a personal token (an external client
/// acting as its person, found again on every request, so a revoked token stops at once)
/// or a launched session's MCP token (that session, with its conversation owner's rights).
#[utoipa::path(
    method(post, get, delete),
    path = "/mcp",
    tag = "delegation",
    description = "The delegation MCP server over streamable HTTP (JSON-RPC 2.0, MCP \
                   protocol): tools `delegate_to_agent`, `get_delegation_status`, \
                   `cancel_delegation`, `continue_with_session`, `close_session`. POST sends \
                   a JSON-RPC message (answered as JSON or an SSE stream), GET opens the \
                   session's event stream, DELETE ends the MCP session (`Mcp-Session-Id`). \
                   Takes the API token, a personal token (`tth_…`: its person's rights) or a \
                   launched session's MCP token as bearer.",
    request_body(content = serde_json::Value, content_type = "application/json", description = "A JSON-RPC 2.0 message"),
    responses(
        (status = 200, description = "JSON-RPC answer (application/json) or an event stream (text/event-stream)"),
        (status = 202, description = "A notification or response was accepted"),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn mcp(
    Api(s): Api,
    axum::Extension(slot): axum::Extension<McpSlot>,
    mut req: Request,
) -> Response {
    let peer = crate::auth::peer(req.extensions());
    if let Err(e) = slot.auth.not_blocked(peer) {
        return e.into_response();
    }
    let bearer = crate::auth::bearer(req.headers());
    let personal_token = bearer.is_some_and(|t| t.starts_with(tether_runtime::TOKEN_PREFIX));
    let personal = match bearer {
        Some(t) if personal_token => slot.auth.identify(t, peer).await,
        _ => Ok(None),
    };
    match personal {
        Err(e) => return e.into_response(),
        Ok(Some(who)) => {
            if let Err(e) = crate::auth::check_route(&who, req.method(), "/mcp") {
                return e.into_response();
            }
            // The MCP server reads it from the request (`DelegationServer::caller`).
            req.extensions_mut().insert(who);
        }
        Ok(None) if !tether_mcp::admits(&s.runtime, &slot.token, req.headers()) => {
            // A personal token was counted by `identify`; any other refused one here.
            if bearer.is_some() && !personal_token {
                let now = std::time::Instant::now();
                slot.auth
                    .refused(peer, now, "a wrong, revoked or expired token")
                    .await;
            }
            return ApiError::unauthorized().into_response();
        }
        Ok(None) => {}
    }
    let service = slot
        .service
        .get_or_init(|| {
            tether_mcp::http_service(
                s.runtime.clone(),
                slot.token.to_string(),
                tokio_util::sync::CancellationToken::new(),
            )
        })
        .clone();
    match service.oneshot(req).await {
        Ok(resp) => resp.map(axum::body::Body::new),
        Err(e) => match e {},
    }
}
