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

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct ListQuery {
    /// Also approved and expired pairings (default: pending ones only).
    #[serde(default)]
    all: bool,
}

/// Pairing codes given to unknown senders, newest first.
#[utoipa::path(
    get,
    path = "/api/v1/pairings",
    tag = "pairings",
    params(ListQuery),
    responses(
        (status = 200, description = "Pairings, newest first (at most 500)", body = [pairing::PairingView]),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
async fn list(
    State(s): State<PairingState>,
    Query(q): Query<ListQuery>,
) -> Result<Response, ChannelError> {
    Ok(Json(pairing::list(&s.store, q.all).await?).into_response())
}

/// Approves a pending, fresh code: its account is linked to the person chosen in the
/// body (absent or `{}`: a new member named after the account), allowed on its channel,
/// and told so.
#[utoipa::path(
    post,
    path = "/api/v1/pairings/{code}/approve",
    tag = "pairings",
    params(("code" = String, Path, description = "The pairing code (case and dashes do not matter)")),
    request_body(content = Option<pairing::ApprovePairing>, description = "Whom the account becomes"),
    responses(
        (status = 200, description = "Approved", body = pairing::PairingView),
        (status = 400, description = "Already approved, expired, a disabled person, a role \
            above member, or the account is linked already", body = ErrorBody),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 404, description = "No such code", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
async fn approve(
    State(s): State<PairingState>,
    who: Option<axum::Extension<tether_runtime::Identity>>,
    Path(code): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, ChannelError> {
    let to: pairing::ApprovePairing = if body.iter().all(u8::is_ascii_whitespace) {
        pairing::ApprovePairing::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ChannelError::BadRequest(format!("invalid body: {e}")))?
    };
    let by = who
        .as_ref()
        .map_or_else(|| "api".to_owned(), |w| format!("{} on api", w.name));
    let p = pairing::approve(&s.store, &code, &by, &to).await?;
    let entry = tether_store::NewAudit {
        action: tether_proto::AuditAction::PairingApproved,
        person_id: who.map(|w| w.0.person),
        by,
        target: Some(format!("{}:{}", p.channel, p.user_id)),
        detail: Some(format!("code {}", p.code)),
    };
    if let Err(e) = s.store.people().record_audit(&entry).await {
        tracing::error!("the audit log did not take a pairing approval: {e}");
    }
    if let Some(core) = s.cores.get(p.channel.as_str()) {
        core.wake.notify_one();
    }
    Ok(Json(p).into_response())
}

/// A chat a conversation is in (issue 28).
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct ConversationChat {
    pub channel: String,
    /// The chat (and topic, or member of a group) on that channel.
    pub chat_key: String,
    /// Its replies come to this chat: the one its latest channel message came from.
    pub replies: bool,
}

/// `GET /api/v1/conversations/{id}/chats`.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct ConversationChats {
    pub chats: Vec<ConversationChat>,
}

/// The channel chats a conversation is in, and which of them its replies go to (the
/// page shows it in the binding bar; the page itself always shows everything).
#[utoipa::path(
    get,
    path = "/api/v1/conversations/{id}/chats",
    tag = "pairings",
    params(("id" = String, Path, description = "Conversation id")),
    responses(
        (status = 200, description = "Its chats, oldest first", body = ConversationChats),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 404, description = "No such conversation (or not one's to see)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
async fn chats(
    State(s): State<PairingState>,
    Path(id): Path<String>,
) -> Result<Response, ChannelError> {
    let id = tether_proto::ConversationId::from(id);
    if s.store
        .conversations()
        .get_conversation(&id)
        .await?
        .is_none()
    {
        return Err(ChannelError::NotFound(format!("conversation {id}")));
    }
    let rows = s.store.channels().chats_of_conversation(&id).await?;
    let chats = rows
        .into_iter()
        .map(|c| ConversationChat {
            channel: c.channel,
            chat_key: c.chat_key,
            replies: !c.muted,
        })
        .collect();
    Ok(Json(ConversationChats { chats }).into_response())
}

/// The OpenAPI paths of the channels: the pairing API and the webhooks (documented
/// whether or not a channel is configured: a webhook that is off answers 404).
#[derive(utoipa::OpenApi)]
#[openapi(
    paths(list, approve, chats, crate::telegram::webhook::hook, crate::feishu::webhook::hook,
        crate::slack::webhook::hook, crate::discord::interactions::hook
    ),
    components(schemas(
        pairing::PairingView,
        pairing::ApprovePairing,
        ConversationChat,
        ConversationChats
    )),
    tags(
        (name = "pairings", description = "Pairing codes of unknown channel senders"),
        (name = "webhooks", description = "Platform callbacks (no token: each checks its own secret or signature; the Host check does not apply)"),
    )
)]
pub struct ChannelsDoc;

/// `GET /api/v1/pairings[?all=true]`, `POST /api/v1/pairings/{code}/approve`.
pub(crate) fn pairing_routes(
    store: Store,
    cores: Arc<HashMap<&'static str, SharedCore>>,
) -> axum::Router {
    axum::Router::new()
        .route("/api/v1/pairings", get(list))
        .route("/api/v1/pairings/{code}/approve", post(approve))
        .route("/api/v1/conversations/{id}/chats", get(chats))
        .with_state(PairingState { store, cores })
}
