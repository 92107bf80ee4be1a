//! `/api/v1/me/accounts`, `/api/v1/me/link-codes` and `/api/v1/people/{id}/accounts`
//! (issue 28): one person across channels. A person links their own channel accounts
//! with a one-time code (either way round); admins link and unlink anyone's. A wrong code
//! counts toward the address's guessing limit like a wrong token. What each may do is the
//! runtime's check (`tether_runtime::People`).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use tether_proto::{
    AccountList, ChannelAccount, ErrorBody, ErrorCode, LinkAccount, LinkCode, PersonId,
    RedeemLinkCode,
};

use crate::AppState;
use crate::auth::Api;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath};

#[utoipa::path(
    get,
    path = "/api/v1/me/accounts",
    tag = "people",
    responses(
        (status = 200, description = "One's linked channel accounts", body = AccountList),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn my_accounts(Api(s): Api) -> Result<Json<AccountList>, ApiError> {
    Ok(Json(s.runtime.people().accounts(None).await?))
}

#[utoipa::path(
    post,
    path = "/api/v1/me/accounts",
    tag = "people",
    request_body = RedeemLinkCode,
    responses(
        (status = 201, description = "Linked: the account `/link` gave the code on is \
            now one's own", body = ChannelAccount),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 404, description = "`not_found`: the code is unknown, used or expired \
            (counted toward the guessing limit)", body = ErrorBody),
        (status = 409, description = "`conflict`: the account is linked already", body = ErrorBody),
        (status = 429, description = "`too_many_attempts`: too many wrong codes or tokens \
            from this address", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn redeem(
    Api(s): Api,
    State(state): State<AppState>,
    peer: crate::extract::Peer,
    ApiJson(req): ApiJson<RedeemLinkCode>,
) -> Result<(StatusCode, Json<ChannelAccount>), ApiError> {
    state.guard.not_blocked(peer.0)?;
    match s.runtime.people().redeem_link_code(&req.code).await {
        Ok(a) => Ok((StatusCode::CREATED, Json(a))),
        Err(e) => {
            if e.code() == ErrorCode::NotFound {
                let now = std::time::Instant::now();
                state
                    .guard
                    .refused(peer.0, now, "a wrong, used or expired link code")
                    .await;
            }
            Err(e.into())
        }
    }
}

#[utoipa::path(
    post,
    path = "/api/v1/me/link-codes",
    tag = "people",
    responses(
        (status = 201, description = "A code to send on a channel as `/link <code>` \
            (ten minutes, once)", body = LinkCode),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn make_code(Api(s): Api) -> Result<(StatusCode, Json<LinkCode>), ApiError> {
    let code = s.runtime.people().link_code_for_me().await?;
    Ok((StatusCode::CREATED, Json(code)))
}

#[utoipa::path(
    delete,
    path = "/api/v1/me/accounts/{channel}/{user_id}",
    tag = "people",
    params(
        ("channel" = String, Path, description = "The channel (`telegram`, `slack`, …)"),
        ("user_id" = String, Path, description = "The platform's user id"),
    ),
    responses(
        (status = 204, description = "Unlinked: its messages are no longer one's own"),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 404, description = "Not an account of one's own", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn unlink_mine(
    Api(s): Api,
    ApiPath((channel, user_id)): ApiPath<(String, String)>,
) -> Result<StatusCode, ApiError> {
    s.runtime
        .people()
        .unlink_account(None, &channel, &user_id)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(
    get,
    path = "/api/v1/people/{id}/accounts",
    tag = "people",
    params(("id" = String, Path, description = "Person id")),
    responses(
        (status = 200, description = "The person's linked channel accounts", body = AccountList),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 403, description = "`forbidden`: admins only", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn accounts_of(
    Api(s): Api,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<AccountList>, ApiError> {
    let id = PersonId::from(id);
    Ok(Json(s.runtime.people().accounts(Some(&id)).await?))
}

#[utoipa::path(
    post,
    path = "/api/v1/people/{id}/accounts",
    tag = "people",
    params(("id" = String, Path, description = "Person id")),
    request_body = LinkAccount,
    responses(
        (status = 201, description = "Linked", body = ChannelAccount),
        (status = 400, description = "Empty channel or user id", body = ErrorBody),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 403, description = "`forbidden`: admins only", body = ErrorBody),
        (status = 404, description = "No such person", body = ErrorBody),
        (status = 409, description = "`conflict`: the account is linked already (unlink \
            it first)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn link(
    Api(s): Api,
    ApiPath(id): ApiPath<String>,
    ApiJson(req): ApiJson<LinkAccount>,
) -> Result<(StatusCode, Json<ChannelAccount>), ApiError> {
    let id = PersonId::from(id);
    let a = s.runtime.people().link_account(&id, req).await?;
    Ok((StatusCode::CREATED, Json(a)))
}

#[utoipa::path(
    delete,
    path = "/api/v1/people/{id}/accounts/{channel}/{user_id}",
    tag = "people",
    params(
        ("id" = String, Path, description = "Person id"),
        ("channel" = String, Path, description = "The channel"),
        ("user_id" = String, Path, description = "The platform's user id"),
    ),
    responses(
        (status = 204, description = "Unlinked"),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 403, description = "`forbidden`: admins only", body = ErrorBody),
        (status = 404, description = "Not an account of that person's", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn unlink(
    Api(s): Api,
    ApiPath((id, channel, user_id)): ApiPath<(String, String, String)>,
) -> Result<StatusCode, ApiError> {
    let id = PersonId::from(id);
    s.runtime
        .people()
        .unlink_account(Some(&id), &channel, &user_id)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
