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
use tether_runtime::{Caller, Runtime};

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

    fn caller(&self, ctx: &RequestContext<RoleServer>) -> Option<Caller> {
        match &self.source {
            CallerSource::Token(token) => self.runtime.mcp_caller(token),
            CallerSource::Bearer { api_token } => {
                let parts = ctx.extensions.get::<http::request::Parts>()?;
                let token = crate::bearer(&parts.headers)?;
                if crate::constant_time_eq(token.as_bytes(), api_token.as_bytes()) {
                    Some(Caller::External)
                } else {
                    self.runtime.mcp_caller(token)
                }
            }
        }
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
        let Some(caller) = self.caller(&context) else {
            return Ok(tools::error_result(
                ErrorCode::Unauthorized,
                "this MCP connection's token is not (or no longer) valid",
            )
            .into());
        };
        let args = request.arguments.clone().unwrap_or_default();
        let call_id = request
            .meta
            .as_ref()
            .and_then(|m| tool_call_id(serde_json::to_value(m).ok()))
            .or_else(|| tool_call_id(serde_json::to_value(&context.meta).ok()));
        let call = tools::call(
            &self.runtime,
            &caller,
            &request.name,
            &args,
            call_id.as_deref(),
        );
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
