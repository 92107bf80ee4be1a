//! `/api/v1/agents`: the configured agents (for the web page's agent picker).

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use tether_proto::ErrorBody;
use utoipa::ToSchema;

use crate::AppState;

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
pub(crate) async fn list(State(s): State<AppState>) -> Json<Vec<AgentInfo>> {
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
pub(crate) async fn workspace(State(s): State<AppState>) -> Json<tether_proto::Workspace> {
    Json(s.runtime.workspace())
}
