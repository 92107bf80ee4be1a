//! The Claude Code driver: one persistent `claude -p --input-format stream-json
//! --output-format stream-json --verbose --permission-prompt-tool stdio` process per live
//! session (the configured command and arguments, plus `--session-id <new uuid>` or
//! `--resume <id>`, and `--model M` when asked).
//!
//! Start-up: `control_request initialize`, answered before any prompt. Resume is strict:
//! a process that ends at start saying "No conversation found" is
//! [`AgentError::ResumeUnavailable`]; the session id is then read with `get_status` where
//! claude offers it, and every message of every turn is checked too (a turn whose
//! `system/init` names another session fails before anything of it is shown, and the
//! process is killed). The wire layer is [`wire`], the routing of output [`state`],
//! control requests [`control`], the pure mappings [`map`], turns [`session`].

mod control;
mod map;
mod meter;
#[cfg(test)]
mod routing_tests;
mod session;
mod state;
mod wire;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value, json};

use crate::driver::{AgentDriver, AgentError, AgentSession, McpServer, StartRequest};
use crate::jsonrpc::CloseInfo;
use crate::launch::{
    Launched, finish_start, request_spec, spawn_agent, spawn_failure, start_timeout,
};
use crate::process::{AgentProcess, ProcessSpec};
use crate::turn::PromptLock;
use session::ClaudeSession;
use state::Shared;
use wire::{ControlError, Link};

/// At most this long for the optional `get_status` check of a resumed session.
const STATUS_WAIT: Duration = Duration::from_secs(5);

/// What claude prints on stderr when `--resume` names an unknown session.
const NO_CONVERSATION: &str = "No conversation found";

/// Starts Claude Code sessions.
#[derive(Debug, Clone)]
pub struct ClaudeDriver {
    /// Limit for the `initialize` control request.
    pub start_timeout: Duration,
    /// Where agent process groups are recorded (see [`crate::groups`]).
    pub records: Option<crate::GroupRecords>,
}

impl Default for ClaudeDriver {
    fn default() -> Self {
        ClaudeDriver {
            start_timeout: Duration::from_secs(30),
            records: None,
        }
    }
}

/// The process to run: the configured command and arguments plus session and model
/// selection and `--mcp-config` for the MCP servers.
fn process_spec(
    req: &StartRequest,
    session_id: &str,
    records: &Option<crate::GroupRecords>,
) -> ProcessSpec {
    let mut spec = request_spec(req, records);
    // claude refuses to run as root without it; no other agent is told so.
    spec.env
        .entry("IS_SANDBOX".to_owned())
        .or_insert_with(|| "1".to_owned());
    let flag = match req.resume {
        Some(_) => "--resume",
        None => "--session-id",
    };
    spec.args.extend([flag.to_owned(), session_id.to_owned()]);
    if let Some(model) = &req.model {
        spec.args.extend(["--model".to_owned(), model.clone()]);
    }
    if let Some((config, secrets)) = mcp_config(&req.mcp_servers) {
        spec.args
            .extend(["--mcp-config".to_owned(), config.to_string()]);
        spec.env.extend(secrets);
        // tether's own servers check their callers: their tools need no per-call approval.
        for s in &req.mcp_servers {
            spec.args
                .extend(["--allowedTools".to_owned(), format!("mcp__{}", s.name)]);
        }
    }
    spec
}

/// `{"mcpServers": {name: {command, args, env}}}` for `--mcp-config`. Environment values
/// stay out of argv: the config names `${TETHER_MCP_<n>_<KEY>}`, which claude expands from
/// its own environment (returned as the second part).
fn mcp_config(servers: &[McpServer]) -> Option<(Value, BTreeMap<String, String>)> {
    if servers.is_empty() {
        return None;
    }
    let mut secrets = BTreeMap::new();
    let mut config = Map::new();
    for (n, server) in servers.iter().enumerate() {
        if let Some(http) = &server.http {
            // Over HTTP: no companion process; claude expands the token's variable in
            // `headers` too.
            let var = format!("TETHER_MCP_{n}_BEARER");
            secrets.insert(var.clone(), http.bearer_token.clone());
            config.insert(
                server.name.clone(),
                json!({"type": "http", "url": http.url,
                       "headers": {"Authorization": format!("Bearer ${{{var}}}")}}),
            );
            continue;
        }
        let mut env = Map::new();
        for (key, value) in &server.env {
            let clean: String = key
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() {
                        c.to_ascii_uppercase()
                    } else {
                        '_'
                    }
                })
                .collect();
            let var = format!("TETHER_MCP_{n}_{clean}");
            env.insert(key.clone(), json!(format!("${{{var}}}")));
            secrets.insert(var, value.clone());
        }
        config.insert(
            server.name.clone(),
            json!({"type": "stdio", "command": server.command, "args": server.args, "env": env}),
        );
    }
    Some((json!({ "mcpServers": config }), secrets))
}

#[async_trait]
impl AgentDriver for ClaudeDriver {
    async fn start(&self, req: StartRequest) -> Result<Box<dyn AgentSession>, AgentError> {
        let session_id = match &req.resume {
            Some(id) => id.clone(),
            None => uuid::Uuid::new_v4().to_string(),
        };
        let Launched {
            process,
            stdin,
            stdout,
            on_close,
        } = spawn_agent(&process_spec(&req, &session_id, &self.records), |_| {})?;
        let shared = Shared::new(session_id.clone());
        let link = Link::spawn(stdout, stdin, shared.handler(), on_close);
        let starter = Starter {
            link: &link,
            process: &process,
            shared: &shared,
            timeout: self.start_timeout,
            session_id: &session_id,
            resumed: req.resume.is_some(),
        };
        finish_start(starter.run().await, link.close(), &process).await?;
        Ok(Box::new(ClaudeSession {
            session_id,
            resumed: req.resume.is_some(),
            link,
            process,
            shared,
            prompt_lock: PromptLock::default(),
        }))
    }
}

/// One start-up sequence.
struct Starter<'a> {
    link: &'a Link,
    process: &'a AgentProcess,
    shared: &'a Arc<Shared>,
    timeout: Duration,
    session_id: &'a str,
    resumed: bool,
}

impl Starter<'_> {
    fn unavailable(&self, message: String) -> AgentError {
        AgentError::ResumeUnavailable {
            external_id: self.session_id.to_owned(),
            message,
        }
    }

    /// claude ended during start-up: an unknown session when resuming, else a spawn error.
    fn exited(&self, during: &str, info: CloseInfo) -> AgentError {
        if self.resumed && info.stderr_tail.contains(NO_CONVERSATION) {
            let tail = info.stderr_tail.trim_end();
            return self.unavailable(format!("claude exited ({}): {tail}", info.status));
        }
        AgentError::Spawn {
            message: format!("claude exited during {during} ({})", info.status),
            stderr_tail: info.stderr_tail,
        }
    }

    async fn run(&self) -> Result<(), AgentError> {
        let init = tokio::time::timeout(
            self.timeout,
            self.link.request(json!({"subtype": "initialize"})),
        )
        .await;
        match init {
            Ok(Ok(_)) => {}
            Ok(Err(ControlError::Closed(info))) => return Err(self.exited("initialize", info)),
            Ok(Err(ControlError::Remote(message))) => {
                let message = format!("initialize failed: {message}");
                return Err(spawn_failure(message, self.process));
            }
            Ok(Err(ControlError::Write(message))) => {
                return Err(spawn_failure(message, self.process));
            }
            Err(_) => return Err(start_timeout("initialize", self.timeout, self.process)),
        }
        if self.resumed {
            self.check_status().await?;
        }
        if let Some(other) = self.shared.lock().mismatch.clone() {
            return Err(self.unavailable(format!("claude continued as another session ({other})")));
        }
        Ok(())
    }

    /// Reads the session id claude is in (`get_status`) where it offers that; otherwise
    /// the first turn's messages are checked.
    async fn check_status(&self) -> Result<(), AgentError> {
        let wait = self.timeout.min(STATUS_WAIT);
        let status =
            tokio::time::timeout(wait, self.link.request(json!({"subtype": "get_status"}))).await;
        match status {
            Ok(Ok(status)) => match map::status_session_id(&status) {
                Some(id) if id != self.session_id => {
                    Err(self.unavailable(format!("claude continued as another session ({id})")))
                }
                Some(_) => Ok(()),
                None => {
                    tracing::debug!(%status, "get_status names no session; checking the first turn");
                    Ok(())
                }
            },
            Ok(Err(ControlError::Closed(info))) => Err(self.exited("get_status", info)),
            Ok(Err(ControlError::Remote(message))) => {
                tracing::debug!(%message, "claude offers no get_status; checking the first turn");
                Ok(())
            }
            Ok(Err(ControlError::Write(message))) => Err(spawn_failure(message, self.process)),
            Err(_) => {
                tracing::warn!("claude did not answer get_status; checking the first turn");
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::driver::{AgentSpec, DriverKind};

    #[test]
    fn launch_arguments() {
        let mut req = StartRequest {
            spec: AgentSpec {
                name: "claude".to_owned(),
                driver: DriverKind::Claude,
                command: "claude".to_owned(),
                args: vec!["-p".to_owned()],
                pass_env: Vec::new(),
                env: BTreeMap::new(),
            },
            cwd: "/w".into(),
            model: Some("sonnet".to_owned()),
            resume: None,
            ceiling: None,
            mcp_servers: Vec::new(),
        };
        assert_eq!(
            process_spec(&req, "id1", &None).args,
            ["-p", "--session-id", "id1", "--model", "sonnet"]
        );
        req.model = None;
        req.resume = Some("id2".to_owned());
        req.mcp_servers.push(McpServer {
            name: "tether".to_owned(),
            command: "/bin/tether".to_owned(),
            args: vec!["mcp".to_owned()],
            env: BTreeMap::from([("TETHER_TOKEN".to_owned(), "s3cret".to_owned())]),
            http: None,
        });
        let spec = process_spec(&req, "id2", &None);
        assert_eq!(spec.args[..3], ["-p", "--resume", "id2"]);
        assert_eq!(spec.args[3], "--mcp-config");
        assert!(!spec.args.iter().any(|a| a.contains("s3cret")));
        let config: Value = serde_json::from_str(&spec.args[4]).unwrap();
        assert_eq!(
            config,
            json!({"mcpServers": {"tether": {"type": "stdio", "command": "/bin/tether",
                "args": ["mcp"], "env": {"TETHER_TOKEN": "${TETHER_MCP_0_TETHER_TOKEN}"}}}})
        );
        assert_eq!(spec.env["TETHER_MCP_0_TETHER_TOKEN"], "s3cret");
    }
}
