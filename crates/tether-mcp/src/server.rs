//! The MCP server handler: `initialize`, `tools/list`, `tools/call`, bound to a caller —
//! the session whose token opened a socket connection, or whoever each HTTP request's
//! bearer token names. Session tokens are checked again on every call, so a token
//! revoked while a connection stays open is refused from then on.

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;
use tether_proto::ErrorCode;
use tether_runtime::{Caller, Identity, Runtime, RuntimeError};

use crate::tools;

/// How the handler learns who calls.
#[derive(Clone)]
pub enum CallerSource {
    /// A socket connection opened with this session token.
    Token(String),
    /// Streamable HTTP: the API token (external client) or a session token, per request.
    Bearer { api_token: String },
}

/// tether's delegation MCP server.
#[derive(Clone)]
pub struct DelegationServer {
    runtime: Runtime,
    source: CallerSource,
}

impl DelegationServer {
    pub fn new(runtime: Runtime, source: CallerSource) -> Self {
        DelegationServer { runtime, source }
    }

    /// Who calls, and the runtime acting with their rights (issue 28): an agent session
    /// as its conversation's owner; the bootstrap token as the install's owner; a
    /// personal token (resolved by the HTTP route, which puts its [`Identity`] on the
    /// request) as its person with its scopes. `Ok(None)`: refused (an unknown token, or
    /// a conversation whose owner is disabled or gone).
    async fn caller(
        &self,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Option<(Caller, Runtime)>, RuntimeError> {
        let session = |token: &str| self.runtime.mcp_caller(token);
        let found = match &self.source {
            CallerSource::Token(token) => session(token),
            CallerSource::Bearer { api_token } => {
                let Some(parts) = ctx.extensions.get::<http::request::Parts>() else {
                    return Ok(None);
                };
                if let Some(who) = parts.extensions.get::<Identity>() {
                    let rt = self.runtime.acting_as(who.clone());
                    return Ok(Some((Caller::External, rt)));
                }
                match crate::bearer(&parts.headers) {
                    Some(t) if crate::constant_time_eq(t.as_bytes(), api_token.as_bytes()) => {
                        let rt = self.runtime.acting_as(self.runtime.owner_identity());
                        return Ok(Some((Caller::External, rt)));
                    }
                    Some(t) => session(t),
                    None => None,
                }
            }
        };
        let Some(caller) = found else {
            return Ok(None);
        };
        let Caller::Session {
            conversation_id, ..
        } = &caller
        else {
            return Ok(None);
        };
        let people = self.runtime.people();
        let who = people.conversation_owner(conversation_id).await?;
        let rt = who.map(|who| self.runtime.acting_as(who));
        Ok(rt.map(|rt| (caller.clone(), rt)))
    }
}

/// The client's own id for this tool call, when it sends one in `_meta` (Claude Code:
/// `claudecode/toolUseId`; others: a key ending in `toolCallId`/`tool_call_id`).
fn tool_call_id(meta: Option<Value>) -> Option<String> {
    let Some(Value::Object(m)) = meta else {
        return None;
    };
    m.iter()
        .find(|(k, _)| {
            k.ends_with("toolUseId") || k.ends_with("toolCallId") || k.ends_with("tool_call_id")
        })
        .and_then(|(_, v)| v.as_str().map(str::to_string))
}

impl ServerHandler for DelegationServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("tether", env!("CARGO_PKG_VERSION")))
            .with_instructions(tools::INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools::tools(
            &self.runtime.agent_names(),
        )))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let found = match self.caller(&context).await {
            Ok(found) => found,
            Err(e) => return Ok(tools::from_err(e).into()),
        };
        let Some((caller, runtime)) = found else {
            return Ok(tools::error_result(
                ErrorCode::Unauthorized,
                "this MCP connection's token is not (or no longer) valid, or the person it acts \
                 for is disabled",
            )
            .into());
        };
        let args = request.arguments.clone().unwrap_or_default();
        let call_id = request
            .meta
            .as_ref()
            .and_then(|m| tool_call_id(serde_json::to_value(m).ok()))
            .or_else(|| tool_call_id(serde_json::to_value(&context.meta).ok()));
        let call = tools::call(&runtime, &caller, &request.name, &args, call_id.as_deref());
        tokio::select! {
            res = call => Ok(res.into()),
            () = context.ct.cancelled() => Err(ErrorData::internal_error("cancelled by the client", None)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_client_tool_call_ids() {
        let meta = serde_json::json!({"claudecode/toolUseId": "toolu_1", "x": 1});
        assert_eq!(tool_call_id(Some(meta)).as_deref(), Some("toolu_1"));
        let meta = serde_json::json!({"progressToken": 3});
        assert_eq!(tool_call_id(Some(meta)), None);
        assert_eq!(tool_call_id(None), None);
    }
}
