//! JSON endpoints of `/api/v1`, grouped by resource.

pub(crate) mod accounts;
pub(crate) mod agents;
pub(crate) mod approvals;
pub(crate) mod attachments;
pub(crate) mod audit;
pub(crate) mod conversations;
pub(crate) mod delegation;
pub(crate) mod event_page;
pub(crate) mod people;
pub(crate) mod schedules;
pub(crate) mod sessions;
pub(crate) mod usage;
pub(crate) mod worktrees;

use crate::auth::Api;
use axum::{Extension, Json};
use tether_proto::{ClusterView, DrainStatus, Health, PoolStatus, Readiness, RuntimeFigures};

/// Default and largest page size of list endpoints.
pub(crate) const DEFAULT_LIMIT: u32 = 100;
pub(crate) const MAX_LIMIT: u32 = 1000;

/// Response header carrying the cursor of a list's next page.
pub(crate) const NEXT_CURSOR: &str = "x-next-cursor";

/// A page of a list as a JSON array, with the next page's cursor in [`NEXT_CURSOR`]
/// (none on the last page).
pub(crate) fn page_response<T: serde::Serialize>(
    items: T,
    next_cursor: Option<String>,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let mut resp = Json(items).into_response();
    if let Some(next) = next_cursor.and_then(|c| axum::http::HeaderValue::from_str(&c).ok()) {
        resp.headers_mut().insert(NEXT_CURSOR, next);
    }
    resp
}

/// `limit` query parameter → page size, at most `MAX_LIMIT`; `0` is refused (it would
/// ask for an empty page, issue 24 first use 9).
pub(crate) fn page_limit(limit: Option<u32>) -> Result<u32, crate::error::ApiError> {
    match limit {
        Some(0) => Err(crate::error::ApiError::bad_request(format!(
            "limit must be between 1 and {MAX_LIMIT}"
        ))),
        Some(n) => Ok(n.min(MAX_LIMIT)),
        None => Ok(DEFAULT_LIMIT),
    }
}

/// Liveness; needs no token.
#[utoipa::path(
    get,
    path = "/api/v1/health",
    tag = "meta",
    responses((status = 200, description = "The daemon is up", body = Health))
)]
pub(crate) async fn health(instance: Option<Extension<crate::InstanceId>>) -> Json<Health> {
    Json(Health {
        status: "ok".to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        instance_id: instance.map(|Extension(id)| id.0),
    })
}

/// Readiness (issue 25): 200 when this node can serve, 503 naming the store while the
/// database is unreachable, or `draining` while the node drains (issue 31; `health`
/// stays "the process is alive"); needs no token.
#[utoipa::path(
    get,
    path = "/api/v1/ready",
    tag = "meta",
    responses(
        (status = 200, description = "The node serves", body = Readiness),
        (status = 503, description = "The store is unreachable (tether reconnects by itself), or the node drains", body = Readiness),
    )
)]
pub(crate) async fn ready(Api(s): Api) -> axum::response::Response {
    use axum::response::IntoResponse;
    if s.runtime.ops().draining() {
        let p = s.runtime.ops().drain_progress();
        return (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            Json(Readiness {
                status: "draining".to_owned(),
                store: "ok".to_owned(),
                message: Some(format!(
                    "this node drains: {} session(s) still live, {} running a turn",
                    p.live, p.busy
                )),
            }),
        )
            .into_response();
    }
    match s.runtime.ops().ready().await {
        Ok(()) => Json(Readiness {
            status: "ready".to_owned(),
            store: "ok".to_owned(),
            message: None,
        })
        .into_response(),
        Err(e) => (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            Json(Readiness {
                status: "unavailable".to_owned(),
                store: "unavailable".to_owned(),
                message: Some(e.to_string()),
            }),
        )
            .into_response(),
    }
}

/// The live pool: how many agent processes are kept, busy and idle, and evictions.
#[utoipa::path(
    get,
    path = "/api/v1/pool",
    tag = "meta",
    responses((status = 200, description = "The live pool", body = PoolStatus)),
    security(("bearer" = []))
)]
pub(crate) async fn pool(Api(s): Api) -> Json<PoolStatus> {
    Json(s.runtime.pool_status())
}

/// The runtime's bookkeeping figures (routing locks, session actors and followed
/// conversations in use, coalesced event writes), to check they stay bounded.
#[utoipa::path(
    get,
    path = "/api/v1/runtime",
    tag = "meta",
    responses((status = 200, description = "Runtime figures", body = RuntimeFigures)),
    security(("bearer" = []))
)]
pub(crate) async fn runtime(Api(s): Api) -> Json<RuntimeFigures> {
    Json(s.runtime.figures())
}

/// The nodes serving this store and their leases.
#[utoipa::path(
    get,
    path = "/api/v1/cluster",
    tag = "meta",
    responses((status = 200, description = "The nodes and their leases", body = ClusterView)),
    security(("bearer" = []))
)]
pub(crate) async fn cluster(Api(s): Api) -> Result<Json<ClusterView>, crate::error::ApiError> {
    Ok(Json(s.runtime.cluster_view().await?))
}

/// Drains this node (issue 31): it stops taking new work (readiness answers 503, the
/// other nodes place new conversations elsewhere), hands its channel leases over, lets
/// running turns finish within `[server] drain_grace_secs` and exits. Admins only.
#[utoipa::path(
    post,
    path = "/api/v1/drain",
    tag = "meta",
    responses((status = 202, description = "The node drains", body = DrainStatus)),
    security(("bearer" = []))
)]
pub(crate) async fn drain(Api(s): Api) -> (axum::http::StatusCode, Json<DrainStatus>) {
    s.runtime.ops().begin_drain().await;
    let p = s.runtime.ops().drain_progress();
    (
        axum::http::StatusCode::ACCEPTED,
        Json(DrainStatus {
            draining: true,
            live_sessions: p.live,
            busy_sessions: p.busy,
        }),
    )
}
