//! The ACP v1 driver (gemini --acp, codex-acp, claude-agent-acp, the fake agent):
//! `initialize`, then `session/new`, or a strict `session/resume` / `session/load`, and an
//! optional best-effort `session/set_model`. Turns run in [`session`]; the translation of
//! incoming messages lives in [`state`]; the messages are the schema's types ([`wire`]).

mod gemini_chats;
mod session;
mod state;
mod wire;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use wire::{AgentCapabilities, InitializeResponse, NewSessionResponse, Open};

use crate::driver::{AgentDriver, AgentError, AgentSession, StartRequest};
use crate::host::{Attached, Route};
use crate::jsonrpc::{Incoming, Options};
use crate::launch::{Handshake, StepError, finish_start, request_spec, resume_failure, spawn_rpc};
use crate::turn::PromptLock;
use gemini_chats::GeminiChats;
use session::AcpSession;
use state::{Phase, Shared};

/// After `session/load`: how long the agent must be silent before the replay counts as
/// over, and the longest wait for that.
const REPLAY_SILENCE: Duration = Duration::from_millis(100);
const REPLAY_SETTLE_MAX: Duration = Duration::from_secs(2);

/// The ACP protocol version tether speaks.
pub const PROTOCOL_VERSION: u64 = 1;

/// Starts ACP agents.
#[derive(Debug, Clone)]
pub struct AcpDriver {
    /// Limit for each start-up request (`initialize`, `session/new`, `session/load`,
    /// `session/resume`, `session/set_model`).
    pub start_timeout: Duration,
    /// Where agent process groups are recorded (see [`crate::groups`]).
    pub records: Option<crate::GroupRecords>,
    /// Shared processes: `Some`, a session opens on a running agent of the same
    /// configuration when one has room (see [`crate::host`]); `None`, every session gets a
    /// process of its own.
    pub hosts: Option<crate::Hosts>,
}

impl Default for AcpDriver {
    fn default() -> Self {
        AcpDriver {
            start_timeout: Duration::from_secs(30),
            records: None,
            hosts: None,
        }
    }
}

const OPTIONS: Options = Options {
    jsonrpc_field: true,
};

/// The session an ACP message belongs to (`sessionId`).
fn session_of(incoming: &Incoming) -> crate::host::Addressee {
    let params = match incoming {
        Incoming::Notification { params, .. } | Incoming::Request { params, .. } => params,
    };
    match params.get("sessionId").and_then(Value::as_str) {
        Some(id) => crate::host::Addressee::Session(id.to_owned()),
        None => crate::host::Addressee::Unnamed,
    }
}

#[async_trait]
impl AgentDriver for AcpDriver {
    async fn start(&self, req: StartRequest) -> Result<Box<dyn AgentSession>, AgentError> {
        let spec = request_spec(&req, &self.records);
        let chats = GeminiChats::of(&spec.program, &spec.environment(), &req.cwd);
        if let Some(c) = &chats {
            // Before gemini's start-up clean-up looks at them (see `gemini_chats`).
            kept("sweep", c.sweep().await);
        }
        if let Some(hosts) = &self.hosts {
            return self.start_shared(hosts, &spec, &req, chats.as_ref()).await;
        }
        let shared = Shared::new();
        let (process, conn) = spawn_rpc(&spec, OPTIONS, shared.handler(), |_| {})?;
        let starter = Starter {
            rpc: Handshake {
                conn: &conn,
                process: &process,
                timeout: self.start_timeout,
            },
            shared: &shared,
            req: &req,
            chats: chats.as_ref(),
        };
        let run = async {
            let init = initialize(&starter.rpc).await?;
            starter.open(&capabilities(&init)?).await
        };
        let (session_id, images) = finish_start(run.await, conn.close(), &process).await?;
        Ok(Box::new(AcpSession {
            session_id,
            images,
            closable: false,
            conn,
            process: Attached::Own(process),
            shared,
            prompt_lock: PromptLock::default(),
            unfinished: Default::default(),
        }))
    }
}

impl AcpDriver {
    /// A session on a shared process (see [`crate::host`]): `initialize` runs once per
    /// process; a failed one retires the process.
    async fn start_shared(
        &self,
        hosts: &crate::Hosts,
        spec: &crate::process::ProcessSpec,
        req: &StartRequest,
        chats: Option<&GeminiChats>,
    ) -> Result<Box<dyn AgentSession>, AgentError> {
        let lease = hosts.acquire("acp", spec, OPTIONS, session_of, req.resume.as_deref())?;
        let host = Arc::clone(&lease.host);
        let rpc = Handshake {
            conn: &host.conn,
            process: &host.process,
            timeout: self.start_timeout,
        };
        let init = match host.initialized(|| initialize(&rpc)).await {
            Ok(init) => init,
            Err(e) => {
                lease.retire();
                return Err(e);
            }
        };
        let caps = capabilities(&init).inspect_err(|_| lease.retire())?;
        let shared = Shared::new();
        let route = |strict| Route {
            handler: shared.handler(),
            on_closed: None,
            strict,
        };
        if let Some(id) = &req.resume {
            lease
                .route(id, route(true))
                .inspect_err(|_| lease.failed())?;
        }
        let starter = Starter {
            rpc,
            shared: &shared,
            req,
            chats,
        };
        // A failure gives the slot back; the process goes on if others use it.
        let (session_id, images) = starter.open(&caps).await.inspect_err(|_| lease.failed())?;
        if req.resume.is_none() {
            lease
                .route(&session_id, route(false))
                .inspect_err(|_| lease.failed())?;
        }
        // `session/close` is not in the stable schema: read from the raw answer.
        let closable = init
            .pointer("/agentCapabilities/sessionCapabilities/close")
            .is_some_and(|c| !c.is_null());
        Ok(Box::new(AcpSession {
            session_id,
            images,
            closable,
            conn: host.conn.clone(),
            process: Attached::Shared(lease),
            shared,
            prompt_lock: PromptLock::default(),
            unfinished: Default::default(),
        }))
    }
}

/// Logs what keeping gemini's chat files did not manage (the load then says the rest).
fn kept(what: &str, result: std::io::Result<usize>) {
    match result {
        Ok(0) => {}
        Ok(n) => tracing::debug!(removed = n, "gemini chat files: {what}"),
        Err(e) => tracing::warn!(error = %e, "gemini chat files: {what} failed"),
    }
}

/// `initialize`: once per process; the raw answer.
async fn initialize(rpc: &Handshake<'_>) -> Result<Value, AgentError> {
    rpc.call("initialize", wire::to_json(&wire::initialize())?)
        .await
        .map_err(|e| rpc.start_error("initialize", e))
}

/// The agent's capabilities from its `initialize` answer; another protocol version is
/// refused.
fn capabilities(init: &Value) -> Result<AgentCapabilities, AgentError> {
    match wire::read::<InitializeResponse>("initialize reply", init) {
        Ok(reply) if u64::from(reply.protocol_version.as_u16()) == PROTOCOL_VERSION => {
            Ok(reply.agent_capabilities)
        }
        Ok(reply) => Err(AgentError::Protocol {
            message: format!(
                "agent speaks ACP version {}, tether speaks 1",
                reply.protocol_version
            ),
        }),
        // Unreadable (no protocolVersion, say): go on with no optional capabilities.
        Err(e) => {
            tracing::warn!("{e}; assuming ACP 1 without optional capabilities");
            Ok(AgentCapabilities::default())
        }
    }
}

/// Opening one session.
struct Starter<'a> {
    rpc: Handshake<'a>,
    shared: &'a Arc<Shared>,
    req: &'a StartRequest,
    /// gemini's chat files, kept resumable around a `session/load`.
    chats: Option<&'a GeminiChats>,
}

impl Starter<'_> {
    /// A new session, or the strict resume of the requested one; the session id, and
    /// whether the agent takes image content blocks in prompts
    /// (`promptCapabilities.image`).
    async fn open(&self, caps: &AgentCapabilities) -> Result<(String, bool), AgentError> {
        let (session_id, result) = match &self.req.resume {
            None => self.new_session(caps).await?,
            Some(id) => (id.clone(), self.resume(id, caps).await?),
        };
        self.shared.lock().phase = Phase::Idle;
        if let Some(model) = &self.req.model {
            self.set_model(&session_id, model, result.get("models"))
                .await;
        }
        Ok((session_id, caps.prompt_capabilities.image))
    }

    fn open_params(&self, open: &Open<'_>, caps: &AgentCapabilities) -> Result<Value, AgentError> {
        let http = caps.mcp_capabilities.http;
        open.params(
            &self.req.cwd,
            wire::mcp_servers(&self.req.mcp_servers, http),
        )
    }

    async fn new_session(&self, caps: &AgentCapabilities) -> Result<(String, Value), AgentError> {
        let result = self
            .rpc
            .call("session/new", self.open_params(&Open::New, caps)?)
            .await
            .map_err(|e| self.rpc.start_error("session/new", e))?;
        let reply = wire::read::<NewSessionResponse>("session/new reply", &result)
            .map_err(|message| AgentError::Protocol { message })?;
        let id = reply.session_id.to_string();
        self.shared.lock().session_id = Some(id.clone());
        Ok((id, result))
    }

    /// `session/resume` if offered, else `session/load` (its replay is discarded), else
    /// [`AgentError::ResumeUnavailable`].
    async fn resume(&self, id: &str, caps: &AgentCapabilities) -> Result<Value, AgentError> {
        let unavailable = |message: String| AgentError::ResumeUnavailable {
            external_id: id.to_owned(),
            message,
        };
        let open = match (
            caps.session_capabilities.resume.is_some(),
            caps.load_session,
        ) {
            (true, _) => Open::Resume(id),
            (false, true) => Open::Load(id),
            (false, false) => {
                return Err(unavailable(
                    "the agent supports neither session/resume nor session/load".to_owned(),
                ));
            }
        };
        let method = open.method();
        {
            let mut state = self.shared.lock();
            state.session_id = Some(id.to_owned());
            state.strict = true;
            state.phase = Phase::Quiet;
        }
        let params = self.open_params(&open, caps)?;
        let chats = self.chats.filter(|_| matches!(open, Open::Load(_)));
        if let Some(c) = chats {
            match c.park(id).await {
                Ok(true) => {}
                Ok(false) => tracing::debug!(id, "gemini has no chat file of the session"),
                Err(e) => tracing::warn!(id, error = %e, "cannot prepare gemini's chat files"),
            }
        }
        let result = self.rpc.call(method, params).await;
        if let Some(c) = chats {
            // The load wrote an empty file for the session: gone before any clean-up.
            kept("sweep", c.sweep().await);
        }
        let result = result.map_err(|e| match e {
            // The agent could not load the session in time: that is not a start-up failure.
            StepError::Timeout(e) => unavailable(e.to_string()),
            StepError::Rpc(e) => unavailable(resume_failure(method, e)),
        })?;
        if matches!(open, Open::Load(_)) {
            self.shared
                .settle_replay(REPLAY_SILENCE, REPLAY_SETTLE_MAX)
                .await;
        }
        // Not in the schema's load/resume replies, but some agents name the session there.
        let reported = result.get("sessionId").and_then(Value::as_str);
        let other = match (reported, &self.shared.lock().mismatch) {
            (_, Some(other)) => Some(other.clone()),
            (Some(reported), None) if reported != id => Some(reported.to_owned()),
            _ => None,
        };
        if let Some(other) = other {
            return Err(unavailable(format!(
                "the agent continued as another session ({other})"
            )));
        }
        Ok(result)
    }

    /// Best effort: only when the agent advertises models; failures are logged. (Model
    /// selection is not in the stable schema: `models` and `session/set_model` stay JSON.)
    async fn set_model(&self, session_id: &str, model: &str, models: Option<&Value>) {
        let Some(models) = models.filter(|m| m.is_object()) else {
            tracing::debug!(
                model,
                "agent offers no model selection; keeping its default"
            );
            return;
        };
        if models.get("currentModelId").and_then(Value::as_str) == Some(model) {
            return;
        }
        let params = json!({"sessionId": session_id, "modelId": model});
        match self.rpc.call("session/set_model", params).await {
            Ok(_) => {}
            Err(StepError::Timeout(e)) => tracing::warn!(model, "setting the model: {e}"),
            Err(StepError::Rpc(e)) => {
                tracing::warn!(model, "setting the model: {}", e.into_agent_error())
            }
        }
    }
}
