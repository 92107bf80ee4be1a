//! `/api/v1/me`, `/api/v1/tokens` and `/api/v1/people` (issue 28): who one is, one's
//! personal API tokens, and the team's people. What each may do is the runtime's check
//! (`tether_runtime::People`, with `tether_core::authz`'s table).

use axum::Json;
use axum::http::StatusCode;
use serde::Deserialize;
use tether_proto::{
    CreatedToken, ErrorBody, Me, NewApiToken, NewPersonRequest, PeopleList, Person, PersonId,
    TokenList, UpdatePerson,
};
use utoipa::IntoParams;

use crate::auth::Api;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};

#[utoipa::path(
    get,
    path = "/api/v1/me",
    tag = "people",
    responses(
        (status = 200, description = "The person the token stands for, and its scopes", body = Me),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn me(Api(s): Api) -> Result<Json<Me>, ApiError> {
    Ok(Json(s.runtime.people().me().await?))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct TokensQuery {
    /// Everyone's tokens (admins), not only one's own.
    all: Option<bool>,
}

#[utoipa::path(
    get,
    path = "/api/v1/tokens",
    tag = "people",
    params(TokensQuery),
    responses(
        (status = 200, description = "Tokens, newest first (never their secrets)", body = TokenList),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 403, description = "`forbidden`: `all` without being an admin, or a \
            token without the `admin` scope", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn list_tokens(
    Api(s): Api,
    ApiQuery(q): ApiQuery<TokensQuery>,
) -> Result<Json<TokenList>, ApiError> {
    let tokens = s
        .runtime
        .people()
        .list_tokens(q.all.unwrap_or(false))
        .await?;
    Ok(Json(TokenList { tokens }))
}

#[utoipa::path(
    post,
    path = "/api/v1/tokens",
    tag = "people",
    request_body = NewApiToken,
    responses(
        (status = 201, description = "The token, with its secret shown this once", body = CreatedToken),
        (status = 400, description = "Bad name, no scope, or an expiry in the past", body = ErrorBody),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 403, description = "`forbidden`: for someone else without being an \
            admin, or a token without the `admin` scope", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn create_token(
    Api(s): Api,
    ApiJson(req): ApiJson<NewApiToken>,
) -> Result<(StatusCode, Json<CreatedToken>), ApiError> {
    let created = s.runtime.people().create_token(req).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

#[utoipa::path(
    delete,
    path = "/api/v1/tokens/{id}",
    tag = "people",
    params(("id" = String, Path, description = "Token id (`tok_…`)")),
    responses(
        (status = 204, description = "Revoked: it stops working at once on every node, \
            open event streams included"),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 404, description = "No such token of yours, or revoked already", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn revoke_token(
    Api(s): Api,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    s.runtime.people().revoke_token(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(
    get,
    path = "/api/v1/people",
    tag = "people",
    responses(
        (status = 200, description = "Everyone, oldest first", body = PeopleList),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 403, description = "`forbidden`: admins only", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn list_people(Api(s): Api) -> Result<Json<PeopleList>, ApiError> {
    let people = s.runtime.people().list_people().await?;
    Ok(Json(PeopleList { people }))
}

#[utoipa::path(
    post,
    path = "/api/v1/people",
    tag = "people",
    request_body = NewPersonRequest,
    responses(
        (status = 201, description = "Added", body = Person),
        (status = 400, description = "Bad name or email", body = ErrorBody),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 403, description = "`forbidden`: admins add members and viewers, owners \
            anyone", body = ErrorBody),
        (status = 409, description = "`conflict`: the email is someone's already", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn add_person(
    Api(s): Api,
    ApiJson(req): ApiJson<NewPersonRequest>,
) -> Result<(StatusCode, Json<Person>), ApiError> {
    let person = s.runtime.people().add_person(req).await?;
    Ok((StatusCode::CREATED, Json(person)))
}

#[utoipa::path(
    patch,
    path = "/api/v1/people/{id}",
    tag = "people",
    params(("id" = String, Path, description = "Person id")),
    request_body = UpdatePerson,
    responses(
        (status = 200, description = "Changed", body = Person),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 403, description = "`forbidden`: admins change members and viewers only", body = ErrorBody),
        (status = 404, description = "No such person", body = ErrorBody),
        (status = 409, description = "`conflict`: it would leave no enabled owner", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn update_person(
    Api(s): Api,
    ApiPath(id): ApiPath<PersonId>,
    ApiJson(req): ApiJson<UpdatePerson>,
) -> Result<Json<Person>, ApiError> {
    Ok(Json(s.runtime.people().update_person(&id, req).await?))
}
