//! `/api/v1/approvals` and `/api/v1/questions`: list (in pages, newest first) and
//! answer. The first answer wins, whichever channel it comes from.

use crate::auth::Api;
use axum::Json;
use serde::Deserialize;
use tether_proto::{
    AnswerApproval, AnswerQuestion, Approval, ApprovalId, ApprovalStatus, ErrorBody, Question,
    QuestionId, QuestionStatus,
};
use utoipa::IntoParams;

use super::{page_limit, page_response};
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery, Via};
use axum::response::Response;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ApprovalsQuery {
    /// Only approvals in this state (e.g. `pending`); all when omitted.
    status: Option<ApprovalStatus>,
    /// Page size (default 100, at most 1000).
    limit: Option<u32>,
    /// Where the page starts: the `X-Next-Cursor` header of the page before.
    cursor: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct QuestionsQuery {
    /// Only questions in this state (e.g. `pending`); all when omitted.
    status: Option<QuestionStatus>,
    /// Page size (default 100, at most 1000).
    limit: Option<u32>,
    /// Where the page starts: the `X-Next-Cursor` header of the page before.
    cursor: Option<String>,
}

#[utoipa::path(
    get,
    path = "/api/v1/approvals",
    tag = "approvals",
    params(ApprovalsQuery),
    responses(
        (status = 200, description = "One page of approvals, newest first; the \
            `X-Next-Cursor` header (absent on the last page) asks for the next one. A page \
            holds those you may read among `limit` stored, so it can be shorter and still \
            have a next page", body = [Approval],
            headers(("X-Next-Cursor" = String, description = "Pass as `cursor` for the next page"))),
        (status = 400, description = "Bad query or cursor", body = ErrorBody),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn list_approvals(
    Api(s): Api,
    ApiQuery(q): ApiQuery<ApprovalsQuery>,
) -> Result<Response, ApiError> {
    let page = s
        .runtime
        .list_approvals(q.status, q.cursor.as_deref(), page_limit(q.limit)?)
        .await?;
    Ok(page_response(page.items, page.next_cursor))
}

#[utoipa::path(
    post,
    path = "/api/v1/approvals/{id}",
    tag = "approvals",
    params(("id" = String, Path, description = "Approval id")),
    request_body = AnswerApproval,
    responses(
        (status = 200, description = "The resolved approval", body = Approval),
        (status = 400, description = "Invalid body or decision not offered", body = ErrorBody),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 404, description = "No such approval", body = ErrorBody),
        (status = 409, description = "Already answered, expired or cancelled", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn answer_approval(
    Api(s): Api,
    Via(via): Via,
    ApiPath(id): ApiPath<ApprovalId>,
    ApiJson(req): ApiJson<AnswerApproval>,
) -> Result<Json<Approval>, ApiError> {
    Ok(Json(
        s.runtime.answer_approval(&id, req.decision, via).await?,
    ))
}

#[utoipa::path(
    get,
    path = "/api/v1/questions",
    tag = "questions",
    params(QuestionsQuery),
    responses(
        (status = 200, description = "One page of questions, newest first; the \
            `X-Next-Cursor` header (absent on the last page) asks for the next one. A page \
            holds those you may read among `limit` stored, so it can be shorter and still \
            have a next page", body = [Question],
            headers(("X-Next-Cursor" = String, description = "Pass as `cursor` for the next page"))),
        (status = 400, description = "Bad query or cursor", body = ErrorBody),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn list_questions(
    Api(s): Api,
    ApiQuery(q): ApiQuery<QuestionsQuery>,
) -> Result<Response, ApiError> {
    let page = s
        .runtime
        .list_questions(q.status, q.cursor.as_deref(), page_limit(q.limit)?)
        .await?;
    Ok(page_response(page.items, page.next_cursor))
}

#[utoipa::path(
    post,
    path = "/api/v1/questions/{id}",
    tag = "questions",
    params(("id" = String, Path, description = "Question id")),
    request_body = AnswerQuestion,
    responses(
        (status = 200, description = "The answered question", body = Question),
        (status = 400, description = "Invalid body", body = ErrorBody),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 404, description = "No such question", body = ErrorBody),
        (status = 409, description = "Already answered, expired or cancelled", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn answer_question(
    Api(s): Api,
    Via(via): Via,
    ApiPath(id): ApiPath<QuestionId>,
    ApiJson(req): ApiJson<AnswerQuestion>,
) -> Result<Json<Question>, ApiError> {
    Ok(Json(
        s.runtime.answer_question(&id, &req.answer, via).await?,
    ))
}
