//! `GET /api/v1/conversations/{id}/events/page`: a conversation's events read backwards
//! from the end, so a client opens a long conversation at its latest events and fetches
//! older ones as the person scrolls up (the SSE stream then follows from the last one).

use crate::auth::Api;
use axum::Json;
use serde::Deserialize;
use tether_proto::{ConversationEventPage, ConversationId, ErrorBody};
use utoipa::IntoParams;

use super::page_limit;
use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery};

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct EventPageQuery {
    /// Only events with `id` less than this (default: up to the latest event).
    before_id: Option<i64>,
    /// Page size (default 100, at most 1000).
    limit: Option<u32>,
}

#[utoipa::path(
    get,
    path = "/api/v1/conversations/{id}/events/page",
    tag = "conversations",
    params(("id" = String, Path, description = "Conversation id"), EventPageQuery),
    responses(
        (status = 200, description = "The last `limit` events before `before_id`, oldest first", body = ConversationEventPage),
        (status = 400, description = "Bad query", body = ErrorBody),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 404, description = "No such conversation", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn events_page(
    Api(s): Api,
    ApiPath(id): ApiPath<ConversationId>,
    ApiQuery(q): ApiQuery<EventPageQuery>,
) -> Result<Json<ConversationEventPage>, ApiError> {
    Ok(Json(
        s.runtime
            .conversation_events_before(&id, q.before_id, page_limit(q.limit)?)
            .await?,
    ))
}
