//! `/api/v1/sessions/{id}`: a runtime session, its turns and its events.

use crate::auth::Api;
use axum::Json;
use axum::response::Response;
use serde::Deserialize;
use tether_proto::{ErrorBody, EventPage, Session, SessionId, Turn};
use utoipa::IntoParams;

use super::page_limit;
use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery};

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct EventsQuery {
    /// Only events with `seq` greater than this (default 0: from the start).
    after_seq: Option<i64>,
    /// Page size (default 100, at most 1000).
    limit: Option<u32>,
}

#[utoipa::path(
    get,
    path = "/api/v1/sessions/{id}",
    tag = "sessions",
    params(("id" = String, Path, description = "Session id")),
    responses(
        (status = 200, description = "The session", body = Session),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 404, description = "No such session", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn get(
    Api(s): Api,
    ApiPath(id): ApiPath<SessionId>,
) -> Result<Json<Session>, ApiError> {
    Ok(Json(s.runtime.get_session(&id).await?))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct TurnsQuery {
    /// Page size (default 100, at most 1000).
    limit: Option<u32>,
    /// Where the page starts: the `X-Next-Cursor` header of the page before.
    cursor: Option<String>,
}

#[utoipa::path(
    get,
    path = "/api/v1/sessions/{id}/turns",
    tag = "sessions",
    params(("id" = String, Path, description = "Session id"), TurnsQuery),
    responses(
        (status = 200, description = "One page of the session's turns, oldest first; the \
            `X-Next-Cursor` header (absent on the last page) asks for the next one", body = [Turn],
            headers(("X-Next-Cursor" = String, description = "Pass as `cursor` for the next page"))),
        (status = 400, description = "Bad query or cursor", body = ErrorBody),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 404, description = "No such session", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn turns(
    Api(s): Api,
    ApiPath(id): ApiPath<SessionId>,
    ApiQuery(q): ApiQuery<TurnsQuery>,
) -> Result<Response, ApiError> {
    let page = s
        .runtime
        .session_turns(&id, q.cursor.as_deref(), page_limit(q.limit)?)
        .await?;
    Ok(super::page_response(page.turns, page.next_cursor))
}

#[utoipa::path(
    get,
    path = "/api/v1/sessions/{id}/events",
    tag = "sessions",
    params(("id" = String, Path, description = "Session id"), EventsQuery),
    responses(
        (status = 200, description = "A page of the session's events, by `seq`", body = EventPage),
        (status = 400, description = "Bad query", body = ErrorBody),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 404, description = "No such session", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn events(
    Api(s): Api,
    ApiPath(id): ApiPath<SessionId>,
    ApiQuery(q): ApiQuery<EventsQuery>,
) -> Result<Json<EventPage>, ApiError> {
    let page = s
        .runtime
        .session_events(&id, q.after_seq.unwrap_or(0), page_limit(q.limit)?)
        .await?;
    Ok(Json(page))
}
