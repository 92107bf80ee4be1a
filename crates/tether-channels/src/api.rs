//! HTTP routes the channels add to the daemon: the pairing API (behind the bearer
//! token, mounted by the server) and the webhooks (public, each verified by its
//! channel's own secret or signature).

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use tether_proto::ErrorBody;
use tether_store::Store;

use crate::ChannelError;
use crate::core::SharedCore;
use crate::pairing;

#[derive(Clone)]
struct PairingState {
    store: Store,
    cores: Arc<HashMap<&'static str, SharedCore>>,
}

impl IntoResponse for ChannelError {
    fn into_response(self) -> Response {
        let code = self.code();
        let status =
            StatusCode::from_u16(code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, Json(ErrorBody::new(code, self.to_string()))).into_response()
    }
}

#[derive(Deserialize)]
struct ListQuery {
    #[serde(default)]
    all: bool,
}

async fn list(
    State(s): State<PairingState>,
    Query(q): Query<ListQuery>,
) -> Result<Response, ChannelError> {
    Ok(Json(pairing::list(&s.store, q.all).await?).into_response())
}

async fn approve(
    State(s): State<PairingState>,
    Path(code): Path<String>,
) -> Result<Response, ChannelError> {
    let p = pairing::approve(&s.store, &code, "api").await?;
    if let Some(core) = s.cores.get(p.channel.as_str()) {
        core.wake.notify_one();
    }
    Ok(Json(p).into_response())
}

/// `GET /api/v1/pairings[?all=true]`, `POST /api/v1/pairings/{code}/approve`.
pub(crate) fn pairing_routes(
    store: Store,
    cores: Arc<HashMap<&'static str, SharedCore>>,
) -> axum::Router {
    axum::Router::new()
        .route("/api/v1/pairings", get(list))
        .route("/api/v1/pairings/{code}/approve", post(approve))
        .with_state(PairingState { store, cores })
}
