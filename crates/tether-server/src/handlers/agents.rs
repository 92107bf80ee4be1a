//! `/api/v1/agents`: the configured agents (for the web page's agent picker).

use crate::auth::Api;
use axum::Json;
use serde::{Deserialize, Serialize};
use tether_proto::ErrorBody;
use utoipa::ToSchema;

/// A configured agent.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub(crate) struct AgentInfo {
    /// The name conversations and messages use (`agent` fields, `/new <agent>`).
    pub name: String,
}

#[utoipa::path(
    get,
    path = "/api/v1/agents",
    tag = "agents",
    responses(
        (status = 200, description = "Configured agents, by name", body = [AgentInfo]),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn list(Api(s): Api) -> Json<Vec<AgentInfo>> {
    Json(
        s.runtime
            .agent_names()
            .into_iter()
            .map(|name| AgentInfo { name })
            .collect(),
    )
}

#[utoipa::path(
    get,
    path = "/api/v1/workspace",
    tag = "agents",
    responses(
        (status = 200, description = "The workspace roots (a conversation's `cwd` must lie \
            under one) and the default folder", body = tether_proto::Workspace),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn workspace(Api(s): Api) -> Json<tether_proto::Workspace> {
    Json(s.runtime.workspace())
}
