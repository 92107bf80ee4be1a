//! `GET /api/v1/audit` (issue 28): the audit log, newest first, in pages, for admins
//! (`tether_runtime::People::audit` checks it); cluster-wide on PostgreSQL.

use axum::Json;
use serde::Deserialize;
use tether_proto::{AuditPage, ErrorBody};
use utoipa::IntoParams;

use crate::auth::Api;
use crate::error::ApiError;
use crate::extract::ApiQuery;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct AuditQuery {
    /// Only entries older than this id (the `next_before` of the page before).
    before: Option<i64>,
    /// Page size (default 100, at most 500).
    limit: Option<u32>,
}

#[utoipa::path(
    get,
    path = "/api/v1/audit",
    tag = "people",
    params(AuditQuery),
    responses(
        (status = 200, description = "Entries, newest first", body = AuditPage),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 403, description = "`forbidden`: not an admin, or a token without the \
            `admin` scope", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn audit(
    Api(s): Api,
    ApiQuery(q): ApiQuery<AuditQuery>,
) -> Result<Json<AuditPage>, ApiError> {
    let limit = q
        .limit
        .unwrap_or(100)
        .clamp(1, tether_runtime::MAX_AUDIT_PAGE);
    let entries = s.runtime.people().audit(q.before, limit).await?;
    let next_before = if entries.len() == limit as usize {
        entries.last().map(|e| e.id)
    } else {
        None
    };
    Ok(Json(AuditPage {
        entries,
        next_before,
    }))
}
