//! The ACP messages tether sends and reads, as the published schema types
//! (`agent-client-protocol-schema`, v1; types only, the transport stays `jsonrpc.rs`), and
//! the conversions between them and the JSON values the transport carries.
//!
//! Tolerance: the schema types ignore fields they do not know, and most optional fields
//! fall back to their default when malformed (`DefaultOnError`); `_meta` is a plain
//! optional field. What tether reads beyond the stable schema (`models` of a new session,
//! `usage` of a prompt reply, a load reply's `sessionId`, unknown stop reasons) is read
//! from the raw reply next to the typed one.

use std::collections::BTreeMap;
use std::path::Path;

use agent_client_protocol_schema::ProtocolVersion;
pub(crate) use agent_client_protocol_schema::v1::*;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::driver::{AgentError, McpServer as McpSpec, StopReason as TurnStop};

/// JSON for a message to send.
pub(crate) fn to_json<T: Serialize>(message: &T) -> Result<Value, AgentError> {
    serde_json::to_value(message).map_err(|e| AgentError::Protocol {
        message: format!("encoding an ACP message: {e}"),
    })
}

/// A message received (a reply, or an incoming request's params), read as `T`.
pub(crate) fn read<T: DeserializeOwned>(what: &str, value: &Value) -> Result<T, String> {
    T::deserialize(value).map_err(|e| format!("{what}: {e}"))
}

/// `initialize`: tether offers no file system or terminal, and form elicitation.
pub(crate) fn initialize() -> InitializeRequest {
    let caps = ClientCapabilities::new()
        .fs(FileSystemCapabilities::new())
        .terminal(false)
        .elicitation(ElicitationCapabilities::new().form(ElicitationFormCapabilities::new()));
    InitializeRequest::new(ProtocolVersion::V1)
        .client_capabilities(caps)
        .client_info(Implementation::new("tether", env!("CARGO_PKG_VERSION")))
}

/// The stdio MCP servers to hand to a session.
pub(crate) fn mcp_servers(specs: &[McpSpec], http: bool) -> Vec<McpServer> {
    specs
        .iter()
        .map(|m| match m.http.as_ref().filter(|_| http) {
            // The agent speaks MCP over HTTP (`mcpCapabilities.http`): no companion.
            Some(h) => McpServer::Http(McpServerHttp::new(m.name.clone(), h.url.clone()).headers(
                vec![HttpHeader::new(
                    "Authorization",
                    format!("Bearer {}", h.bearer_token),
                )],
            )),
            None => McpServer::Stdio(
                McpServerStdio::new(m.name.clone(), m.command.clone())
                    .args(m.args.clone())
                    .env(env(&m.env)),
            ),
        })
        .collect()
}

fn env(vars: &BTreeMap<String, String>) -> Vec<EnvVariable> {
    vars.iter()
        .map(|(k, v)| EnvVariable::new(k.clone(), v.clone()))
        .collect()
}

/// How a session is opened: new, or an existing one resumed or loaded.
pub(crate) enum Open<'a> {
    New,
    Resume(&'a str),
    Load(&'a str),
}

impl Open<'_> {
    pub fn method(&self) -> &'static str {
        match self {
            Open::New => "session/new",
            Open::Resume(_) => "session/resume",
            Open::Load(_) => "session/load",
        }
    }

    /// The request's params.
    pub fn params(&self, cwd: &Path, servers: Vec<McpServer>) -> Result<Value, AgentError> {
        match self {
            Open::New => to_json(&NewSessionRequest::new(cwd).mcp_servers(servers)),
            Open::Resume(id) => {
                to_json(&ResumeSessionRequest::new(id.to_string(), cwd).mcp_servers(servers))
            }
            Open::Load(id) => {
                to_json(&LoadSessionRequest::new(id.to_string(), cwd).mcp_servers(servers))
            }
        }
    }
}

/// `session/prompt`: the text block, then one image block per image (sent only to an
/// agent whose `promptCapabilities.image` is set).
pub(crate) fn prompt(
    session_id: &str,
    prompt: &crate::driver::Prompt,
) -> Result<Value, AgentError> {
    let mut blocks = vec![ContentBlock::Text(TextContent::new(prompt.text.clone()))];
    blocks.extend(
        prompt
            .images
            .iter()
            .map(|i| ContentBlock::Image(ImageContent::new(i.data_base64.clone(), i.mime.clone()))),
    );
    to_json(&PromptRequest::new(session_id.to_owned(), blocks))
}

/// `session/cancel`.
pub(crate) fn cancel(session_id: &str) -> Result<Value, AgentError> {
    to_json(&CancelNotification::new(session_id.to_owned()))
}

pub(crate) fn stop_reason(reason: StopReason) -> TurnStop {
    match reason {
        StopReason::EndTurn => TurnStop::EndTurn,
        StopReason::Cancelled => TurnStop::Cancelled,
        StopReason::MaxTokens => TurnStop::MaxTokens,
        StopReason::MaxTurnRequests => TurnStop::MaxTurnRequests,
        StopReason::Refusal => TurnStop::Refusal,
        // The schema's enum is non-exhaustive: a variant added later is shown as it is
        // spelt on the wire.
        other => TurnStop::Other(
            serde_json::to_value(other)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
        ),
    }
}

/// The stop reason of a `session/prompt` reply. A reason the schema does not know is
/// kept as spelt; a reply without one counts as `end_turn` (as before the schema types).
pub(crate) fn prompt_stop(result: &Value) -> TurnStop {
    match read::<PromptResponse>("session/prompt reply", result) {
        Ok(reply) => stop_reason(reply.stop_reason),
        Err(_) => match result.get("stopReason").and_then(Value::as_str) {
            Some(other) => TurnStop::Other(other.to_owned()),
            None => TurnStop::EndTurn,
        },
    }
}

/// The answer to a permission request: the selected option, or cancelled.
pub(crate) fn permission_reply(option_id: Option<&str>) -> Result<Value, AgentError> {
    let outcome = match option_id {
        Some(id) => {
            RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(id.to_owned()))
        }
        None => RequestPermissionOutcome::Cancelled,
    };
    to_json(&RequestPermissionResponse::new(outcome))
}

/// The wire spelling of a schema enum value (`ToolKind::Execute` → `"execute"`).
pub(crate) fn spelling<T: Serialize>(value: &T) -> Option<String> {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_keep_their_wire_shape() {
        let init = to_json(&initialize()).unwrap();
        assert_eq!(init["protocolVersion"], 1);
        assert_eq!(init["clientCapabilities"]["fs"]["readTextFile"], false);
        assert_eq!(init["clientCapabilities"]["terminal"], false);
        assert_eq!(init["clientCapabilities"]["elicitation"]["form"], json!({}));
        assert_eq!(init["clientInfo"]["name"], "tether");
        let spec = McpSpec {
            name: "tether".into(),
            command: "/bin/tether".into(),
            args: vec!["mcp".into()],
            env: BTreeMap::from([("TOKEN".to_owned(), "t".to_owned())]),
            http: Some(crate::driver::McpHttp {
                url: "http://127.0.0.1:1/mcp".into(),
                bearer_token: "t".into(),
            }),
        };
        // An agent without HTTP MCP gets the companion ...
        let new = Open::New
            .params(
                Path::new("/w"),
                mcp_servers(std::slice::from_ref(&spec), false),
            )
            .unwrap();
        assert_eq!(
            new,
            json!({"cwd": "/w", "mcpServers": [{"name": "tether", "command": "/bin/tether",
                "args": ["mcp"], "env": [{"name": "TOKEN", "value": "t"}]}]})
        );
        // ... one with it the endpoint, with the session's token.
        let new = Open::New
            .params(Path::new("/w"), mcp_servers(&[spec], true))
            .unwrap();
        assert_eq!(
            new,
            json!({"cwd": "/w", "mcpServers": [{"type": "http", "name": "tether",
                "url": "http://127.0.0.1:1/mcp",
                "headers": [{"name": "Authorization", "value": "Bearer t"}]}]})
        );
        let load = Open::Load("s1").params(Path::new("/w"), vec![]).unwrap();
        assert_eq!(
            load,
            json!({"cwd": "/w", "mcpServers": [], "sessionId": "s1"})
        );
        assert_eq!(
            prompt("s1", &crate::driver::Prompt::text("hi")).unwrap(),
            json!({"sessionId": "s1", "prompt": [{"type": "text", "text": "hi"}]})
        );
        let with_image = crate::driver::Prompt {
            text: "look".into(),
            images: vec![crate::driver::ImageInput {
                mime: "image/png".into(),
                data_base64: "AAAA".into(),
            }],
        };
        assert_eq!(
            prompt("s1", &with_image).unwrap(),
            json!({"sessionId": "s1", "prompt": [{"type": "text", "text": "look"},
                {"type": "image", "mimeType": "image/png", "data": "AAAA"}]})
        );
        assert_eq!(cancel("s1").unwrap(), json!({"sessionId": "s1"}));
        assert_eq!(
            permission_reply(Some("allow")).unwrap(),
            json!({"outcome": {"outcome": "selected", "optionId": "allow"}})
        );
        assert_eq!(
            permission_reply(None).unwrap(),
            json!({"outcome": {"outcome": "cancelled"}})
        );
    }

    #[test]
    fn replies_tolerate_what_the_schema_does_not_know() {
        let reply = json!({"stopReason": "end_turn", "usage": {"x": 1}, "extra": true});
        assert_eq!(prompt_stop(&reply), TurnStop::EndTurn);
        assert_eq!(
            prompt_stop(&json!({"stopReason": "tired"})),
            TurnStop::Other("tired".to_owned())
        );
        assert_eq!(prompt_stop(&json!({})), TurnStop::EndTurn);
        let update = json!({"sessionId": "s", "_meta": {"a": 1}, "future": 1, "update": {
            "sessionUpdate": "agent_message_chunk", "somethingNew": 2,
            "content": {"type": "text", "text": "hi", "annotations": "bogus"}}});
        let n: SessionNotification = read("update", &update).unwrap();
        assert!(n.meta.is_some());
        assert!(matches!(n.update, SessionUpdate::AgentMessageChunk(_)));
    }
}
