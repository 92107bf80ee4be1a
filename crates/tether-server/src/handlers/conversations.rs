//! `/api/v1/conversations`: create, list, read, rename/archive, send messages, read the
//! history, and the session controls (new session, detach, stop).

use crate::auth::Api;
use axum::Json;
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use tether_proto::{
    Conversation, ConversationId, CreateConversation, ErrorBody, HistoryMessage, MessageOutcome,
    SendMessage, UpdateConversation,
};
use utoipa::IntoParams;

use super::page_limit;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery, Via};

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListQuery {
    /// Include archived conversations (default `false`).
    include_archived: Option<bool>,
    /// Page size (default 100, at most 1000).
    limit: Option<u32>,
    /// Where the page starts: the `X-Next-Cursor` header of the page before.
    cursor: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct HistoryQuery {
    /// Only messages with `id` greater than this.
    after_id: Option<i64>,
    /// Instead: the last `limit` messages with `id` less than this (still oldest first).
    before_id: Option<i64>,
    /// Page size (default 100, at most 1000).
    limit: Option<u32>,
}

#[utoipa::path(
    post,
    path = "/api/v1/conversations",
    tag = "conversations",
    request_body = CreateConversation,
    responses(
        (status = 201, description = "Created", body = Conversation),
        (status = 400, description = "Invalid body, unknown agent or cwd not allowed", body = ErrorBody),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn create(
    Api(s): Api,
    ApiJson(req): ApiJson<CreateConversation>,
) -> Result<(StatusCode, Json<Conversation>), ApiError> {
    let conv = s.runtime.create_conversation(req).await?;
    Ok((StatusCode::CREATED, Json(conv)))
}

#[utoipa::path(
    get,
    path = "/api/v1/conversations",
    tag = "conversations",
    params(ListQuery),
    responses(
        (status = 200, description = "One page of conversations, most recently updated first; \
            the `X-Next-Cursor` header (absent on the last page) asks for the next one", body = [Conversation],
            headers(("X-Next-Cursor" = String, description = "Pass as `cursor` for the next page"))),
        (status = 400, description = "Bad query or cursor", body = ErrorBody),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn list(
    Api(s): Api,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Response, ApiError> {
    let page = s
        .runtime
        .list_conversations_page(
            q.include_archived.unwrap_or(false),
            q.cursor.as_deref(),
            page_limit(q.limit)?,
        )
        .await?;
    Ok(super::page_response(page.conversations, page.next_cursor))
}

#[utoipa::path(
    get,
    path = "/api/v1/conversations/{id}",
    tag = "conversations",
    params(("id" = String, Path, description = "Conversation id")),
    responses(
        (status = 200, description = "The conversation", body = Conversation),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 404, description = "No such conversation", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn get(
    Api(s): Api,
    ApiPath(id): ApiPath<ConversationId>,
) -> Result<Json<Conversation>, ApiError> {
    Ok(Json(s.runtime.get_conversation(&id).await?))
}

#[utoipa::path(
    patch,
    path = "/api/v1/conversations/{id}",
    tag = "conversations",
    params(("id" = String, Path, description = "Conversation id")),
    request_body = UpdateConversation,
    responses(
        (status = 200, description = "Renamed and/or (un)archived", body = Conversation),
        (status = 400, description = "Invalid body", body = ErrorBody),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 404, description = "No such conversation", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn update(
    Api(s): Api,
    ApiPath(id): ApiPath<ConversationId>,
    ApiJson(req): ApiJson<UpdateConversation>,
) -> Result<Json<Conversation>, ApiError> {
    Ok(Json(s.runtime.update_conversation(&id, req).await?))
}

#[utoipa::path(
    post,
    path = "/api/v1/conversations/{id}/messages",
    tag = "conversations",
    params(("id" = String, Path, description = "Conversation id")),
    request_body = SendMessage,
    responses(
        (status = 200, description = "Started, queued, answered a question, or ran a command", body = MessageOutcome),
        (status = 400, description = "Invalid body, unknown or invalid command, unknown agent", body = ErrorBody),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 404, description = "No such conversation", body = ErrorBody),
        (status = 409, description = "The conversation is archived", body = ErrorBody),
        (status = 429, description = "The queue is full", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn send_message(
    Api(s): Api,
    Via(via): Via,
    ApiPath(id): ApiPath<ConversationId>,
    ApiJson(req): ApiJson<SendMessage>,
) -> Result<Json<MessageOutcome>, ApiError> {
    Ok(Json(s.runtime.send_message(&id, req, via).await?))
}

#[utoipa::path(
    get,
    path = "/api/v1/conversations/{id}/messages",
    tag = "conversations",
    params(("id" = String, Path, description = "Conversation id"), HistoryQuery),
    responses(
        (status = 200, description = "History, oldest first (with `before_id`: the page before it)", body = [HistoryMessage]),
        (status = 400, description = "Bad query", body = ErrorBody),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 404, description = "No such conversation", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn history(
    Api(s): Api,
    ApiPath(id): ApiPath<ConversationId>,
    ApiQuery(q): ApiQuery<HistoryQuery>,
) -> Result<Json<Vec<HistoryMessage>>, ApiError> {
    let limit = page_limit(q.limit)?;
    Ok(Json(match q.before_id {
        Some(before) => s.runtime.history_before(&id, before, limit).await?,
        None => s.runtime.history(&id, q.after_id, limit).await?,
    }))
}

#[utoipa::path(
    post,
    path = "/api/v1/conversations/{id}/new-session",
    tag = "conversations",
    params(("id" = String, Path, description = "Conversation id")),
    responses(
        (status = 200, description = "Unbound; the next message starts a new session", body = MessageOutcome),
        (status = 400, description = "`bad_request`: a body other than none or `{}` (this route takes none)", body = ErrorBody),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 404, description = "No such conversation", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn new_session(
    Api(s): Api,
    ApiPath(id): ApiPath<ConversationId>,
    _: crate::extract::NoBody,
) -> Result<Json<MessageOutcome>, ApiError> {
    Ok(Json(s.runtime.new_session(&id).await?))
}

#[utoipa::path(
    post,
    path = "/api/v1/conversations/{id}/detach",
    tag = "conversations",
    params(("id" = String, Path, description = "Conversation id")),
    responses(
        (status = 200, description = "Unbound", body = MessageOutcome),
        (status = 400, description = "`bad_request`: a body other than none or `{}` (this route takes none)", body = ErrorBody),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 404, description = "No such conversation", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn detach(
    Api(s): Api,
    ApiPath(id): ApiPath<ConversationId>,
    _: crate::extract::NoBody,
) -> Result<Json<MessageOutcome>, ApiError> {
    Ok(Json(s.runtime.detach(&id).await?))
}

#[utoipa::path(
    post,
    path = "/api/v1/conversations/{id}/stop",
    tag = "conversations",
    params(("id" = String, Path, description = "Conversation id")),
    responses(
        (status = 200, description = "The running turn is being cancelled", body = MessageOutcome),
        (status = 400, description = "`bad_request`: a body other than none or `{}` (this route takes none)", body = ErrorBody),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 404, description = "No such conversation", body = ErrorBody),
        (status = 409, description = "Nothing is running", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn stop(
    Api(s): Api,
    ApiPath(id): ApiPath<ConversationId>,
    _: crate::extract::NoBody,
) -> Result<Json<MessageOutcome>, ApiError> {
    Ok(Json(s.runtime.stop(&id).await?))
}
