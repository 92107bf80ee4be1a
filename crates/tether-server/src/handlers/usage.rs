//! `GET /api/v1/usage` and `/api/v1/budgets` (issue 29): the usage ledger's totals and
//! series per conversation, delegation tree, person or team, and the budgets (admins make
//! and delete them). `tether_runtime::Usage` checks who may read what.

use axum::Json;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use tether_proto::{BudgetView, ErrorBody, NewBudget, UsageView};
use tether_runtime::{UsageAsk, UsageBucket};
use utoipa::{IntoParams, ToSchema};

use crate::auth::Api;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct UsageQuery {
    /// `conversation` (default with `conversation_id`), `tree`, `person` (default
    /// without: your own) or `team`.
    scope: Option<String>,
    /// The conversation (for `conversation` and `tree`).
    conversation_id: Option<String>,
    /// The person (for `person`; default: you).
    person_id: Option<String>,
    /// The series' bucket: `day` (default), `week` or `month` (UTC).
    bucket: Option<String>,
    /// How far back the series goes, in days (default 30, at most 3660).
    days: Option<u32>,
}

/// `GET /api/v1/budgets`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct BudgetList {
    budgets: Vec<BudgetView>,
}

#[utoipa::path(
    get,
    path = "/api/v1/usage",
    tag = "usage",
    params(UsageQuery),
    responses(
        (status = 200, description = "Totals, a series over time and the budgets the \
            scope's usage counts toward", body = UsageView),
        (status = 400, description = "`bad_request`: a scope, bucket or id that does not fit", body = ErrorBody),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 403, description = "`forbidden`: someone else's or the team's usage \
            without being an admin", body = ErrorBody),
        (status = 404, description = "No such conversation (or not yours to read)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn usage(
    Api(s): Api,
    ApiQuery(q): ApiQuery<UsageQuery>,
) -> Result<Json<UsageView>, ApiError> {
    let conv = q.conversation_id.filter(|c| !c.is_empty()).map(Into::into);
    let default = if conv.is_some() {
        "conversation"
    } else {
        "person"
    };
    let ask = match (q.scope.as_deref().unwrap_or(default), conv) {
        ("conversation", Some(c)) => UsageAsk::Conversation(c),
        ("tree", Some(c)) => UsageAsk::Tree(c),
        ("conversation" | "tree", None) => {
            return Err(ApiError::bad_request(
                "conversation_id: this scope names a conversation",
            ));
        }
        ("person", None) => UsageAsk::Person(q.person_id.map(Into::into)),
        ("team", None) => UsageAsk::Team,
        ("person" | "team", Some(_)) => {
            return Err(ApiError::bad_request("conversation_id: not for this scope"));
        }
        (other, _) => {
            return Err(ApiError::bad_request(format!(
                "scope: {other:?} is not conversation, tree, person or team"
            )));
        }
    };
    let bucket = match q.bucket.as_deref().unwrap_or("day") {
        "day" => UsageBucket::Day,
        "week" => UsageBucket::Week,
        "month" => UsageBucket::Month,
        other => {
            return Err(ApiError::bad_request(format!(
                "bucket: {other:?} is not day, week or month"
            )));
        }
    };
    let days = q.days.unwrap_or(30);
    if !(1..=3660).contains(&days) {
        return Err(ApiError::bad_request("days: between 1 and 3660"));
    }
    Ok(Json(s.runtime.usage().view(ask, bucket, days).await?))
}

#[utoipa::path(
    get,
    path = "/api/v1/budgets",
    tag = "usage",
    responses(
        (status = 200, description = "Every budget with its use in the current period", body = BudgetList),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 403, description = "`forbidden`: not an admin", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn budgets(Api(s): Api) -> Result<Json<BudgetList>, ApiError> {
    Ok(Json(BudgetList {
        budgets: s.runtime.usage().budgets().await?,
    }))
}

#[utoipa::path(
    post,
    path = "/api/v1/budgets",
    tag = "usage",
    request_body = NewBudget,
    responses(
        (status = 201, description = "The budget", body = BudgetView),
        (status = 400, description = "`bad_request`: the message names the field", body = ErrorBody),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 403, description = "`forbidden`: not an admin", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn create_budget(
    Api(s): Api,
    ApiJson(req): ApiJson<NewBudget>,
) -> Result<(StatusCode, Json<BudgetView>), ApiError> {
    let b = s.runtime.usage().create_budget(req).await?;
    Ok((StatusCode::CREATED, Json(b)))
}

#[utoipa::path(
    delete,
    path = "/api/v1/budgets/{id}",
    tag = "usage",
    params(("id" = String, Path, description = "Budget id (`bud_…`)")),
    responses(
        (status = 204, description = "Deleted: turns it refused may run again"),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 403, description = "`forbidden`: not an admin", body = ErrorBody),
        (status = 404, description = "No such budget", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn delete_budget(
    Api(s): Api,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    s.runtime.usage().delete_budget(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}
