//! `/api/v1/schedules` (issue 30): scheduled turns on a conversation — made, listed with
//! their next run, paused, resumed, edited and deleted. `tether_runtime::Schedules` checks
//! who may do what (a conversation's writers manage its schedules, its readers see them).

use axum::Json;
use axum::http::StatusCode;
use serde::Deserialize;
use tether_proto::{ErrorBody, NewSchedule, ScheduleList, ScheduleView, UpdateSchedule};
use utoipa::IntoParams;

use crate::auth::Api;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct ScheduleQuery {
    /// One conversation's schedules (default: every one you may read).
    conversation_id: Option<String>,
}

#[utoipa::path(
    get,
    path = "/api/v1/schedules",
    tag = "schedules",
    params(ScheduleQuery),
    responses(
        (status = 200, description = "Schedules with their next run", body = ScheduleList),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 404, description = "No such conversation (or not yours to read)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn list(
    Api(s): Api,
    ApiQuery(q): ApiQuery<ScheduleQuery>,
) -> Result<Json<ScheduleList>, ApiError> {
    let conv = q.conversation_id.filter(|c| !c.is_empty()).map(Into::into);
    let schedules = s.runtime.schedules().list(conv.as_ref()).await?;
    Ok(Json(ScheduleList { schedules }))
}

#[utoipa::path(
    post,
    path = "/api/v1/schedules",
    tag = "schedules",
    request_body = NewSchedule,
    responses(
        (status = 201, description = "The schedule, with its next run", body = ScheduleView),
        (status = 400, description = "`bad_request`: the message names the field (an \
            invalid expression, an unknown time zone, runs closer than the minimum interval, \
            a prompt over the message limit, too many schedules on the conversation)", body = ErrorBody),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 403, description = "`forbidden`: you may not write to the conversation", body = ErrorBody),
        (status = 404, description = "No such conversation", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn create(
    Api(s): Api,
    ApiJson(req): ApiJson<NewSchedule>,
) -> Result<(StatusCode, Json<ScheduleView>), ApiError> {
    let made = s.runtime.schedules().create(req).await?;
    Ok((StatusCode::CREATED, Json(made)))
}

#[utoipa::path(
    get,
    path = "/api/v1/schedules/{id}",
    tag = "schedules",
    params(("id" = String, Path, description = "Schedule id (`sch_…`)")),
    responses(
        (status = 200, description = "The schedule", body = ScheduleView),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 404, description = "No such schedule (or not yours to read)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn get(
    Api(s): Api,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<ScheduleView>, ApiError> {
    Ok(Json(s.runtime.schedules().get(&id).await?))
}

#[utoipa::path(
    patch,
    path = "/api/v1/schedules/{id}",
    tag = "schedules",
    params(("id" = String, Path, description = "Schedule id (`sch_…`)")),
    request_body = UpdateSchedule,
    responses(
        (status = 200, description = "The schedule as changed, with its next run", body = ScheduleView),
        (status = 400, description = "`bad_request`: the message names the field", body = ErrorBody),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 403, description = "`forbidden`: you may not write to its conversation", body = ErrorBody),
        (status = 404, description = "No such schedule", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn update(
    Api(s): Api,
    ApiPath(id): ApiPath<String>,
    ApiJson(req): ApiJson<UpdateSchedule>,
) -> Result<Json<ScheduleView>, ApiError> {
    Ok(Json(s.runtime.schedules().update(&id, req).await?))
}

#[utoipa::path(
    delete,
    path = "/api/v1/schedules/{id}",
    tag = "schedules",
    params(("id" = String, Path, description = "Schedule id (`sch_…`)")),
    responses(
        (status = 204, description = "Deleted, with its waiting run"),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 403, description = "`forbidden`: you may not write to its conversation", body = ErrorBody),
        (status = 404, description = "No such schedule", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn delete(
    Api(s): Api,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    s.runtime.schedules().delete(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}
