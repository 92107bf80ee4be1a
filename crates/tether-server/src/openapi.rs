//! The OpenAPI document: every route and every wire type (the channels add the
//! pairing API and the webhooks, see [`crate::ExtraRoutes`]). It is the API contract, served
//! without auth at `GET /api/openapi.json`.

use axum::Json;
use axum::extract::State;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::handlers::event_page;
use crate::handlers::{self, agents, approvals, conversations, delegation, sessions};
use crate::{AppState, list_sse, sse, web};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "tether",
        description = "Keeps coding agents in continuous sessions. All routes except health \
                       and this document need `Authorization: Bearer <token>` (see \
                       `tether token`). Errors are `{\"error\": {\"code\", \"message\"}}`."
    ),
    paths(
        handlers::health,
        handlers::ready,
        agents::list,
        agents::workspace,
        conversations::create,
        conversations::list,
        conversations::get,
        conversations::update,
        conversations::send_message,
        conversations::history,
        conversations::new_session,
        conversations::detach,
        conversations::stop,
        delegation::continuation,
        delegation::continue_task,
        delegation::close_task,
        delegation::children,
        sse::conversation_events,
        event_page::events_page,
        list_sse::list_events,
        sessions::get,
        sessions::turns,
        sessions::events,
        approvals::list_approvals,
        approvals::answer_approval,
        approvals::list_questions,
        approvals::answer_question,
        handlers::pool,
        delegation::mcp,
        web::index,
        web::asset_route,
        handlers::runtime,
        handlers::cluster,
        handlers::attachments::upload,
        handlers::attachments::download,
        handlers::attachments::turn_files,
        crate::links::make_links,
        handlers::attachments::turn_file,
        handlers::people::me,
        handlers::people::list_tokens,
        handlers::people::create_token,
        handlers::people::revoke_token,
        handlers::people::list_people,
        handlers::people::add_person,
        handlers::people::update_person,
        handlers::audit::audit,
        handlers::usage::usage,
        handlers::usage::budgets,
        handlers::usage::create_budget,
        handlers::usage::delete_budget,
        crate::oidc::providers,
        crate::oidc::login,
        crate::oidc::callback,
        crate::oidc::signout,
        handlers::accounts::my_accounts,
        handlers::accounts::redeem,
        handlers::accounts::make_code,
        handlers::accounts::unlink_mine,
        handlers::accounts::accounts_of,
        handlers::accounts::link,
        handlers::accounts::unlink,
    ),
    components(schemas(
        tether_proto::Health,
        tether_proto::Readiness,
        agents::AgentInfo,
        tether_proto::PoolStatus,
        tether_proto::PoolProcess,
        tether_proto::PoolSpare,
        tether_proto::RuntimeFigures,
        tether_proto::ClusterView,
        tether_proto::NodeView,
        tether_proto::LeaderView,
        tether_proto::CreateConversation,
        tether_proto::UpdateConversation,
        tether_proto::Binding,
        tether_proto::Conversation,
        tether_proto::SendMessage,
        tether_proto::Attachment,
        tether_proto::AttachmentKind,
        tether_proto::Uploaded,
        tether_proto::TurnFile,
        tether_proto::TurnFiles,
        tether_proto::Workspace,
        tether_proto::LinkRequest,
        tether_proto::SignedLink,
        tether_proto::SignedLinks,
        tether_proto::MessageOutcomeKind,
        tether_proto::MessageOutcome,
        tether_proto::HistoryMessage,
        tether_proto::Session,
        tether_proto::Turn,
        tether_proto::Approval,
        tether_proto::AnswerApproval,
        tether_proto::Question,
        tether_proto::AnswerQuestion,
        tether_proto::EventPage,
        tether_proto::ActionResult,
        tether_proto::EventEnvelope,
        tether_proto::EventPayload,
        tether_proto::ErrorBody,
        tether_proto::ErrorDetail,
        tether_proto::ErrorCode,
        tether_proto::ConversationState,
        tether_proto::ConversationKind,
        tether_proto::SessionStatus,
        tether_proto::TurnStatus,
        tether_proto::ApprovalStatus,
        tether_proto::Decision,
        tether_proto::QuestionStatus,
        tether_proto::NewSessionReason,
        tether_proto::MessageRole,
        tether_proto::Continuation,
        tether_proto::ContinueRequest,
        tether_proto::CloseRequest,
        tether_proto::TaskStarted,
        tether_proto::TaskClosed,
        tether_proto::TaskSnapshot,
        tether_proto::TaskList,
        tether_proto::TaskOutcome,
        tether_proto::TaskStatus,
        tether_proto::Availability,
        tether_proto::TurnOrigin,
        tether_proto::BlockedOn,
        tether_proto::BlockedKind,
        tether_proto::ConversationEventPage,
        tether_proto::ConversationChange,
        tether_proto::ConversationChangeKind,
        tether_proto::Person,
        tether_proto::Me,
        crate::oidc::Providers,
        tether_proto::ChannelAccount,
        tether_proto::AccountList,
        tether_proto::RedeemLinkCode,
        tether_proto::LinkCode,
        tether_proto::LinkAccount,
        tether_proto::ApiToken,
        tether_proto::NewApiToken,
        tether_proto::CreatedToken,
        tether_proto::NewPersonRequest,
        tether_proto::UpdatePerson,
        tether_proto::TokenList,
        tether_proto::AuditPage,
        tether_proto::UsageView,
        tether_proto::UsageSums,
        tether_proto::UsagePoint,
        tether_proto::BudgetView,
        tether_proto::NewBudget,
        handlers::usage::BudgetList,
        tether_proto::AuditEntry,
        tether_proto::AuditAction,
        tether_proto::PeopleList,
        tether_proto::Role,
        tether_proto::TokenScope,
        tether_proto::Visibility,
    )),
    modifiers(&Security),
    tags(
        (name = "meta", description = "Health"),
        (name = "conversations", description = "Conversations, messages, history, session controls, event stream"),
        (name = "sessions", description = "Runtime sessions, turns and events"),
        (name = "approvals", description = "Permission requests from agents"),
        (name = "questions", description = "Questions from agents"),
        (name = "delegation", description = "Delegated sub-conversations: availability, continue, close; MCP over streamable HTTP at /mcp"),
        (name = "people", description = "People, roles and personal API tokens"),
        (name = "usage", description = "The usage ledger and budgets"),
        (name = "page", description = "The web chat page and its files (no token; the page asks for it)"),
    )
)]
pub struct ApiDoc;

struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        components.add_security_scheme(
            "query_token",
            SecurityScheme::ApiKey(ApiKey::Query(ApiKeyValue::with_description(
                "token",
                "The API token as a query parameter (event stream only, for EventSource)",
            ))),
        );
    }
}

/// `GET /api/openapi.json`: [`ApiDoc`] plus the paths of the routes mounted from outside
/// this crate (pairings and webhooks of the channels).
pub(crate) async fn serve_openapi(State(s): State<AppState>) -> Json<utoipa::openapi::OpenApi> {
    Json(s.openapi.as_ref().clone())
}
