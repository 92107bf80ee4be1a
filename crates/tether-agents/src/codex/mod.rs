//! The Codex driver over `codex app-server` (stdio, JSON-RPC without the `"jsonrpc"`
//! field): `initialize`, the `initialized` notification, then `thread/start{cwd, model?,
//! approvalPolicy, sandbox, config?}` (the MCP servers go in as `mcp_servers.<name>`
//! config overrides), or a strict `thread/resume{threadId}` whose thread id must
//! come back unchanged. Turns run in [`session`]; notifications are translated in
//! [`state`] and [`items`]; server→client requests are answered in [`requests`].
//!
//! The approval policy and sandbox mode come from the agent's environment
//! (`TETHER_CODEX_APPROVAL_POLICY`, default `untrusted`: Codex asks before running
//! commands; `TETHER_CODEX_SANDBOX`, default `workspace-write`); both variables are
//! consumed here and not passed on to the process.

mod items;
mod requests;
mod session;
mod state;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::driver::{AgentDriver, AgentError, AgentSession, McpServer, StartRequest};
use crate::host::{Attached, Route};
use crate::jsonrpc::{CloseInfo, Incoming, Options};
use crate::launch::{Handshake, StepError, finish_start, request_spec, resume_failure, spawn_rpc};
use crate::process::ProcessSpec;
use crate::turn::PromptLock;
use session::CodexSession;
use state::{Phase, Shared};

/// Agent environment variable choosing Codex's approval policy.
pub const APPROVAL_POLICY_ENV: &str = "TETHER_CODEX_APPROVAL_POLICY";
/// Agent environment variable choosing Codex's sandbox mode.
pub const SANDBOX_ENV: &str = "TETHER_CODEX_SANDBOX";
/// Codex asks before running anything that is not known to be safe.
pub const DEFAULT_APPROVAL_POLICY: &str = "untrusted";
pub const DEFAULT_SANDBOX: &str = "workspace-write";

/// Starts `codex app-server` sessions.
#[derive(Debug, Clone)]
pub struct CodexDriver {
    /// Limit for each start-up request (`initialize`, `thread/start`, `thread/resume`).
    pub start_timeout: Duration,
    /// Where agent process groups are recorded (see [`crate::groups`]).
    pub records: Option<crate::GroupRecords>,
    /// Shared processes: `Some`, a thread starts on a running `codex app-server` of the
    /// same configuration when one has room (see [`crate::host`]); `None`, every session
    /// gets a process of its own.
    pub hosts: Option<crate::Hosts>,
}

impl Default for CodexDriver {
    fn default() -> Self {
        CodexDriver {
            start_timeout: Duration::from_secs(30),
            records: None,
            hosts: None,
        }
    }
}

/// Splits the tether-only settings off the agent's environment.
fn settings(env: &BTreeMap<String, String>) -> (String, String, BTreeMap<String, String>) {
    let mut env = env.clone();
    let approval = env
        .remove(APPROVAL_POLICY_ENV)
        .unwrap_or_else(|| DEFAULT_APPROVAL_POLICY.to_owned());
    let sandbox = env
        .remove(SANDBOX_ENV)
        .unwrap_or_else(|| DEFAULT_SANDBOX.to_owned());
    (approval, sandbox, env)
}

const OPTIONS: Options = Options {
    jsonrpc_field: false,
};

/// The thread a message of `codex app-server` belongs to (`threadId`, or the `thread`
/// object of `thread/started`); a rate-limit snapshot is about the account, so every
/// thread's.
fn thread_of(incoming: &Incoming) -> crate::host::Addressee {
    let (params, method) = match incoming {
        Incoming::Notification { params, method } | Incoming::Request { params, method, .. } => {
            (params, method)
        }
    };
    let thread = params.get("threadId").and_then(Value::as_str).or_else(|| {
        params
            .get("thread")
            .and_then(|t| t.get("id"))
            .and_then(Value::as_str)
    });
    match thread {
        Some(id) => crate::host::Addressee::Session(id.to_owned()),
        None if method == "account/rateLimits/updated" => crate::host::Addressee::Account,
        None => crate::host::Addressee::Unnamed,
    }
}

#[async_trait]
impl AgentDriver for CodexDriver {
    async fn start(&self, req: StartRequest) -> Result<Box<dyn AgentSession>, AgentError> {
        let (approval, sandbox, env) = settings(&req.spec.env);
        let spec = ProcessSpec {
            env,
            ..request_spec(&req, &self.records)
        };
        if let Some(hosts) = &self.hosts {
            return self
                .start_shared(hosts, &spec, &req, approval, sandbox)
                .await;
        }
        let shared = Shared::new();
        let closed = Arc::clone(&shared);
        let (process, conn) = spawn_rpc(&spec, OPTIONS, shared.handler(), move |info| {
            closed.on_closed(info)
        })?;
        let rpc = Handshake {
            conn: &conn,
            process: &process,
            timeout: self.start_timeout,
        };
        let starter = Starter {
            rpc,
            shared: &shared,
            req: &req,
            approval,
            sandbox,
            keep_config: false,
        };
        let run = async {
            handshake(&starter.rpc).await?;
            starter.open().await
        };
        let thread_id = finish_start(run.await, conn.close(), &process).await?;
        Ok(Box::new(CodexSession {
            thread_id,
            conn,
            process: Attached::Own(process),
            shared,
            prompt_lock: PromptLock::default(),
            unfinished: Default::default(),
        }))
    }
}

impl CodexDriver {
    /// A thread on a shared process (see [`crate::host`]): the handshake runs once per
    /// process; a failed one retires the process.
    async fn start_shared(
        &self,
        hosts: &crate::Hosts,
        spec: &ProcessSpec,
        req: &StartRequest,
        approval: String,
        sandbox: String,
    ) -> Result<Box<dyn AgentSession>, AgentError> {
        let lease = hosts.acquire("codex", spec, OPTIONS, thread_of, req.resume.as_deref())?;
        let host = Arc::clone(&lease.host);
        let rpc = Handshake {
            conn: &host.conn,
            process: &host.process,
            timeout: self.start_timeout,
        };
        if let Err(e) = host.initialized(|| handshake(&rpc)).await {
            lease.retire();
            return Err(e);
        }
        let shared = Shared::new();
        let route = |strict| {
            let closed = Arc::clone(&shared);
            Route {
                handler: shared.handler(),
                on_closed: Some(Box::new(move |info: &CloseInfo| closed.on_closed(info))),
                strict,
            }
        };
        if let Some(id) = &req.resume {
            lease
                .route(id, route(true))
                .inspect_err(|_| lease.failed())?;
        }
        // Back on the process it left, with the same MCP servers and token, and codex
        // still holds the thread: it keeps the servers it had, so `thread/resume` goes
        // without `config` (with it codex opens them all again, most of a dormant
        // follow-up's time; D165).
        let config = mcp_config(&req.mcp_servers)
            .map(|c| c.to_string())
            .unwrap_or_default();
        let keep_config = match (&req.resume, lease.home_config()) {
            (Some(id), Some(home)) if home == config => still_loaded(&rpc, id).await,
            _ => false,
        };
        let starter = Starter {
            rpc,
            shared: &shared,
            req,
            approval,
            sandbox,
            keep_config,
        };
        // A failure gives the slot back; the process goes on if others use it.
        let thread_id = starter.open().await.inspect_err(|_| lease.failed())?;
        lease.opened_with(config);
        if req.resume.is_none() {
            lease
                .route(&thread_id, route(false))
                .inspect_err(|_| lease.failed())?;
        }
        Ok(Box::new(CodexSession {
            thread_id,
            conn: host.conn.clone(),
            process: Attached::Shared(lease),
            shared,
            prompt_lock: PromptLock::default(),
            unfinished: Default::default(),
        }))
    }
}

/// `initialize`, then the `initialized` notification: once per process.
async fn handshake(rpc: &Handshake<'_>) -> Result<Value, AgentError> {
    let params = json!({
        "clientInfo": {"name": "tether", "title": "tether", "version": env!("CARGO_PKG_VERSION")},
    });
    let init = rpc
        .call("initialize", params)
        .await
        .map_err(|e| rpc.start_error("initialize", e))?;
    rpc.conn
        .notify("initialized", Value::Null)
        .await
        .map_err(|e| rpc.start_error("initialized", StepError::Rpc(e)))?;
    Ok(init)
}

/// Whether codex still holds thread `id` loaded (`thread/loaded/list`); false when it
/// cannot say.
async fn still_loaded(rpc: &Handshake<'_>, id: &str) -> bool {
    let mut cursor: Option<String> = None;
    // Bounded: a process hosts at most `sessions_per_process` threads of ours.
    for _ in 0..64 {
        let params = json!({"cursor": cursor, "limit": 100});
        let Ok(page) = rpc.call("thread/loaded/list", params).await else {
            return false;
        };
        let data = page.get("data").and_then(Value::as_array);
        if data.is_some_and(|d| d.iter().any(|t| t.as_str() == Some(id))) {
            return true;
        }
        cursor = page
            .get("nextCursor")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if cursor.is_none() {
            return false;
        }
    }
    false
}

/// Opening one thread.
struct Starter<'a> {
    rpc: Handshake<'a>,
    shared: &'a Arc<Shared>,
    req: &'a StartRequest,
    approval: String,
    sandbox: String,
    /// Resume without `config`: the thread is still loaded with the same MCP servers.
    keep_config: bool,
}

impl Starter<'_> {
    /// A new thread, or the strict resume of the requested one; the thread id.
    async fn open(&self) -> Result<String, AgentError> {
        let thread_id = match &self.req.resume {
            None => self.new_thread().await?,
            Some(id) => self.resume(id).await?,
        };
        let mut state = self.shared.lock();
        state.thread_id = Some(thread_id.clone());
        state.phase = Phase::Idle;
        Ok(thread_id)
    }

    /// The parameters shared by `thread/start` and `thread/resume`.
    fn thread_params(&self) -> Value {
        let mut params = json!({
            "cwd": self.req.cwd,
            "approvalPolicy": self.approval,
            "sandbox": self.sandbox,
        });
        if let Some(model) = &self.req.model {
            params["model"] = json!(model);
        }
        if let Some(config) = mcp_config(&self.req.mcp_servers) {
            params["config"] = config;
        }
        params
    }

    /// The model the thread runs on, as `thread/start` or `thread/resume` says (for the
    /// usage reports).
    fn note_model(&self, result: &Value) {
        if let Some(model) = result.get("model").and_then(Value::as_str) {
            self.shared.lock().meter.model = Some(model.to_owned());
        }
    }

    async fn new_thread(&self) -> Result<String, AgentError> {
        let result = self
            .rpc
            .call("thread/start", self.thread_params())
            .await
            .map_err(|e| self.rpc.start_error("thread/start", e))?;
        self.note_model(&result);
        thread_id(&result).ok_or_else(|| AgentError::Protocol {
            message: "thread/start returned no thread id".to_owned(),
        })
    }

    /// `thread/resume`; any failure, or another thread id, is
    /// [`AgentError::ResumeUnavailable`] (a time-out stays a time-out).
    async fn resume(&self, id: &str) -> Result<String, AgentError> {
        let unavailable = |message: String| AgentError::ResumeUnavailable {
            external_id: id.to_owned(),
            message,
        };
        let mut params = self.thread_params();
        params["threadId"] = json!(id);
        if self.keep_config
            && let Some(p) = params.as_object_mut()
        {
            p.remove("config");
        }
        let asked = std::time::Instant::now();
        let result = self
            .rpc
            .call("thread/resume", params)
            .await
            .inspect(|_| {
                // Where a dormant follow-up's time goes (issue 15's figure 5).
                tracing::debug!(
                    took_us = asked.elapsed().as_micros() as u64,
                    kept_config = self.keep_config,
                    "codex answered thread/resume"
                );
            })
            .map_err(|e| match e {
                StepError::Timeout(e) => e,
                StepError::Rpc(e) => unavailable(resume_failure("thread/resume", e)),
            })?;
        self.note_model(&result);
        match thread_id(&result) {
            Some(reported) if reported == id => Ok(reported),
            Some(other) => Err(unavailable(format!(
                "the agent continued as another thread ({other})"
            ))),
            None => Err(unavailable(
                "thread/resume returned no thread id".to_owned(),
            )),
        }
    }
}

/// Codex config overrides (`mcp_servers.<name>` = `{command, args, env}`) adding the MCP
/// servers to the thread; `None` without servers. They are tether's own servers (which
/// check their callers themselves), so their tools run without a per-call approval
/// (`default_tools_approval_mode = "approve"`; Codex would otherwise ask, and reject).
fn mcp_config(servers: &[McpServer]) -> Option<Value> {
    let config: serde_json::Map<String, Value> = servers
        .iter()
        .map(|s| {
            // Over HTTP where offered (the per-thread config carries the session's token,
            // so threads of one shared process each act as their own session).
            let server = match &s.http {
                Some(http) => json!({"url": http.url,
                                     "http_headers": {"Authorization": format!("Bearer {}", http.bearer_token)},
                                     "default_tools_approval_mode": "approve"}),
                None => json!({"command": s.command, "args": s.args, "env": s.env,
                               "default_tools_approval_mode": "approve"}),
            };
            (format!("mcp_servers.{}", s.name), server)
        })
        .collect();
    (!config.is_empty()).then_some(Value::Object(config))
}

fn thread_id(result: &Value) -> Option<String> {
    result
        .get("thread")
        .and_then(|t| t.get("id"))
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_default_and_are_consumed() {
        let (approval, sandbox, env) = settings(&BTreeMap::new());
        assert_eq!(
            (approval.as_str(), sandbox.as_str()),
            ("untrusted", "workspace-write")
        );
        assert!(env.is_empty());
        let given = BTreeMap::from([
            (APPROVAL_POLICY_ENV.to_owned(), "never".to_owned()),
            (SANDBOX_ENV.to_owned(), "read-only".to_owned()),
            ("CODEX_HOME".to_owned(), "/h".to_owned()),
        ]);
        let (approval, sandbox, env) = settings(&given);
        assert_eq!(
            (approval.as_str(), sandbox.as_str()),
            ("never", "read-only")
        );
        assert_eq!(env.keys().collect::<Vec<_>>(), vec!["CODEX_HOME"]);
    }

    #[test]
    fn mcp_servers_become_config_overrides() {
        assert_eq!(mcp_config(&[]), None);
        let server = McpServer {
            name: "tether".to_owned(),
            command: "/bin/tether".to_owned(),
            args: vec!["mcp".to_owned()],
            env: BTreeMap::from([("TOKEN".to_owned(), "t".to_owned())]),
            http: None,
        };
        assert_eq!(
            mcp_config(&[server]),
            Some(
                json!({"mcp_servers.tether": {"command": "/bin/tether", "args": ["mcp"],
                                               "env": {"TOKEN": "t"},
                                               "default_tools_approval_mode": "approve"}})
            )
        );
    }
}
