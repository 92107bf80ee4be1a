//! A conversation's isolated worktree (issue 32): its branch and changes, its patch, and
//! turning isolation on or off, merging the branch back or discarding it.

use axum::Json;
use axum::http::header;
use axum::response::IntoResponse;
use tether_proto::{ConversationId, ErrorBody, WorktreeAction, WorktreeView};

use crate::auth::Api;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath};

/// The conversation's worktree: status, branch, base, changed files and `--stat`.
#[utoipa::path(
    get,
    path = "/api/v1/conversations/{id}/worktree",
    tag = "worktrees",
    params(("id" = String, Path, description = "Conversation id")),
    responses(
        (status = 200, description = "The worktree (status `none`: not isolated)", body = WorktreeView),
        (status = 404, description = "No such conversation", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn get(
    Api(s): Api,
    ApiPath(id): ApiPath<ConversationId>,
) -> Result<Json<WorktreeView>, ApiError> {
    Ok(Json(s.runtime.worktrees().view(&id).await?))
}

/// The patch of the worktree's changes against its base (uncommitted and untracked files
/// included), as `text/x-diff`.
#[utoipa::path(
    get,
    path = "/api/v1/conversations/{id}/worktree/diff",
    tag = "worktrees",
    params(("id" = String, Path, description = "Conversation id")),
    responses(
        (status = 200, description = "The patch", content_type = "text/x-diff", body = String),
        (status = 404, description = "No such conversation, or it has no worktree", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn diff(
    Api(s): Api,
    ApiPath(id): ApiPath<ConversationId>,
) -> Result<axum::response::Response, ApiError> {
    let patch = s.runtime.worktrees().patch(&id).await?;
    Ok((
        [(header::CONTENT_TYPE, "text/x-diff; charset=utf-8")],
        patch,
    )
        .into_response())
}

/// Isolation on or off, a merge of the branch into the repository's checked-out branch
/// (`merge_conflict` changes nothing), or a discard of the worktree.
#[utoipa::path(
    post,
    path = "/api/v1/conversations/{id}/worktree",
    tag = "worktrees",
    params(("id" = String, Path, description = "Conversation id")),
    request_body = WorktreeAction,
    responses(
        (status = 200, description = "The worktree after the action", body = WorktreeView),
        (status = 400, description = "isolation_needs_git: the directory is not in a git repository", body = ErrorBody),
        (status = 409, description = "merge_conflict (nothing changed), or something in the way (conflict)", body = ErrorBody),
        (status = 502, description = "worktree_failed: git or the set-up failed", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn act(
    Api(s): Api,
    ApiPath(id): ApiPath<ConversationId>,
    ApiJson(action): ApiJson<WorktreeAction>,
) -> Result<Json<WorktreeView>, ApiError> {
    let w = s.runtime.worktrees();
    Ok(Json(match action {
        WorktreeAction::Isolate { on } => w.set_isolation(&id, on).await?,
        WorktreeAction::Merge { ff_only } => w.merge(&id, ff_only).await?,
        WorktreeAction::Discard => w.discard(&id).await?,
    }))
}
