//! The driver contract: start (or strictly resume) an agent session, run turns that
//! stream normalised events, answer permission requests and questions, cancel, shut down.

use std::collections::BTreeMap;
use std::path::PathBuf;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tether_proto::{Decision, ErrorCode};
use tokio::sync::{mpsc, oneshot};

/// Which protocol an agent speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DriverKind {
    /// Agent Client Protocol v1 over stdio (gemini --acp, codex-acp, ...).
    Acp,
    /// `codex app-server` over stdio.
    Codex,
    /// `claude -p` with stream-json input and output.
    Claude,
}

/// How to launch one configured agent (`[agents.<name>]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentSpec {
    /// The configured name (`codex`, `claude`, `gemini`, `fake`, ...).
    pub name: String,
    pub driver: DriverKind,
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables passed from tether's own environment when set (`pass_env`; see
    /// [`crate::env`]).
    #[serde(default)]
    pub pass_env: Vec<String>,
    /// Extra environment on top of the explicit base environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

/// What to start.
#[derive(Debug, Clone)]
pub struct StartRequest {
    pub spec: AgentSpec,
    pub cwd: PathBuf,
    pub model: Option<String>,
    /// `Some(external id)`: resume that session strictly, or fail with
    /// [`AgentError::ResumeUnavailable`]. `None`: a new session.
    pub resume: Option<String>,
    /// MCP servers to give the agent (tether's delegation server, bound to this session).
    pub mcp_servers: Vec<McpServer>,
    /// The ceiling a new process takes a slot of (`None`: uncounted).
    pub ceiling: Option<crate::ProcessCeiling>,
}

/// An MCP server for the agent (ACP `mcpServers`, Codex `mcp_servers`, Claude
/// `--mcp-config`): a stdio program it starts, or, where the agent speaks MCP over HTTP and
/// `http` is given, that endpoint instead (no companion process per session).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpServer {
    pub name: String,
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    /// Passed in the environment, never in argv (tokens live here).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The same server over streamable HTTP.
    #[serde(default)]
    pub http: Option<McpHttp>,
}

/// An MCP endpoint over streamable HTTP, with the bearer token the agent sends.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpHttp {
    pub url: String,
    pub bearer_token: String,
}

impl std::fmt::Debug for McpHttp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token stays out of logs.
        f.debug_struct("McpHttp")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// Something the agent said during a turn.
#[derive(Debug)]
pub enum AgentEvent {
    MessageDelta(String),
    ThoughtDelta(String),
    ToolCall {
        id: String,
        title: String,
        kind: Option<String>,
        status: Option<String>,
        detail: Option<serde_json::Value>,
    },
    ToolCallUpdate {
        id: String,
        title: Option<String>,
        status: Option<String>,
        detail: Option<serde_json::Value>,
    },
    /// The agent asks for permission; answer through `reply` (dropping it = cancelled).
    Permission(PermissionRequest),
    /// The agent asks the person a question; answer through `reply`.
    Question(QuestionRequest),
    /// Tokens the agent reports spent since its previous report (issue 29): each report
    /// is new usage, never a running total, so the ledger adds them as they come.
    Usage(UsageReport),
    /// The vendor's report of the account's usage window (issue 29): window budgets
    /// compare against it.
    Window(crate::windows::WindowReport),
}

/// New usage, as the agent reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageReport {
    pub tokens: tether_core::usage::Tokens,
    /// The model that spent them, when the agent says.
    pub model: Option<String>,
    /// What identifies this report within its session across restarts, when the agent
    /// gives something that does (Codex: the thread's running total after the step):
    /// the ledger stores a report with a key once per session, so a report the agent
    /// sends again after a resume is not counted twice.
    pub key: Option<String>,
}

#[derive(Debug)]
pub struct PermissionRequest {
    pub title: String,
    pub kind: Option<String>,
    pub detail: Option<serde_json::Value>,
    /// The decisions this agent offers.
    pub options: Vec<Decision>,
    pub reply: oneshot::Sender<PermissionReply>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PermissionReply {
    Decision(Decision),
    /// Expired, or the turn was cancelled.
    Cancelled,
}

#[derive(Debug)]
pub struct QuestionRequest {
    pub prompt: String,
    /// `Some(answer)`, or `None` when the question was cancelled or expired.
    pub reply: oneshot::Sender<Option<String>>,
}

/// What a turn sends the agent: the person's text and the images it takes natively (the
/// runtime sends images only to a session whose [`AgentSession::accepts_images`] is
/// true; anything else arrives as files named in `text`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Prompt {
    pub text: String,
    pub images: Vec<ImageInput>,
}

impl Prompt {
    /// A prompt of text only.
    pub fn text(text: impl Into<String>) -> Prompt {
        Prompt {
            text: text.into(),
            images: Vec::new(),
        }
    }
}

/// One image, as every agent protocol carries it: a media type and base64 bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageInput {
    /// `image/png`, `image/jpeg`, `image/gif` or `image/webp`.
    pub mime: String,
    /// The bytes, standard base64 with padding.
    pub data_base64: String,
}

impl ImageInput {
    /// The image as a `data:` URL (Codex's image input item).
    pub fn data_url(&self) -> String {
        format!("data:{};base64,{}", self.mime, self.data_base64)
    }
}

/// How a turn ended, when the agent ended it normally.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnOutcome {
    pub stop_reason: StopReason,
    /// The agent's message text of this turn, concatenated.
    pub text: String,
    pub usage: Option<serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    EndTurn,
    Cancelled,
    MaxTokens,
    MaxTurnRequests,
    Refusal,
    Other(String),
}

impl StopReason {
    pub fn as_str(&self) -> &str {
        match self {
            StopReason::EndTurn => "end_turn",
            StopReason::Cancelled => "cancelled",
            StopReason::MaxTokens => "max_tokens",
            StopReason::MaxTurnRequests => "max_turn_requests",
            StopReason::Refusal => "refusal",
            StopReason::Other(s) => s,
        }
    }
}

/// Everything that can go wrong talking to an agent.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("could not start agent: {message}{}", tail(stderr_tail))]
    Spawn {
        message: String,
        stderr_tail: String,
    },
    #[error("cannot resume session {external_id}: {message}")]
    ResumeUnavailable {
        external_id: String,
        message: String,
    },
    /// The working directory no longer passes the checks it passed when it was chosen.
    #[error("working directory {path} is not allowed: {reason}")]
    InvalidCwd { path: String, reason: String },
    #[error("agent process exited ({status}){}", tail(stderr_tail))]
    Crashed { status: String, stderr_tail: String },
    #[error("agent error: {message}")]
    Agent { message: String },
    #[error("protocol error: {message}")]
    Protocol { message: String },
    #[error("agent did not answer {what} within {secs}s{}", tail(stderr_tail))]
    Timeout {
        what: String,
        secs: u64,
        stderr_tail: String,
    },
    /// Every shared process of the agent is at its session limit and the process cap is
    /// reached (the runtime first makes room by evicting an idle session).
    #[error(
        "every agent process is at its session limit ({sessions_per_process} each) and the \
         process cap ({max_processes}) is reached"
    )]
    ProcessLimit {
        sessions_per_process: usize,
        max_processes: usize,
    },
    /// tether runs as many agent processes as `[pool] process_limit` allows, and none
    /// could be ended to make room (see [`crate::ProcessCeiling`]).
    #[error(
        "tether runs its limit of {limit} agent processes (`[pool] process_limit`) and \
         every one is busy; try again when a turn has ended"
    )]
    ProcessCeiling { limit: usize },
    /// The vendor's usage or rate limit stopped the turn (issue 29): Codex's
    /// `usageLimitExceeded`, Claude's 429 `rate_limit_error` (or `rate_limit_event`
    /// rejected). `resets_at_ms` when the vendor said when it resets.
    #[error("usage limit reached: {message}")]
    UsageLimit {
        message: String,
        resets_at_ms: Option<i64>,
    },
}

fn tail(stderr_tail: &str) -> String {
    if stderr_tail.trim().is_empty() {
        String::new()
    } else {
        format!("; stderr: {}", stderr_tail.trim_end())
    }
}

impl AgentError {
    /// The stable wire code for this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            AgentError::Spawn { .. } => ErrorCode::SpawnFailed,
            AgentError::InvalidCwd { .. } => ErrorCode::InvalidCwd,
            AgentError::ResumeUnavailable { .. } => ErrorCode::ResumeUnavailable,
            AgentError::Crashed { .. } => ErrorCode::AgentCrashed,
            AgentError::Agent { .. } => ErrorCode::AgentError,
            AgentError::Protocol { .. } => ErrorCode::ProtocolError,
            AgentError::Timeout { .. } => ErrorCode::StartTimeout,
            AgentError::ProcessLimit { .. } | AgentError::ProcessCeiling { .. } => {
                ErrorCode::ProcessLimit
            }
            AgentError::UsageLimit { .. } => ErrorCode::UsageLimit,
        }
    }
}

/// Which process a live session runs in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessRef {
    /// The shared process's number ([`crate::host::ProcessView::id`]); `None` when the
    /// session has a process of its own.
    pub shared: Option<u64>,
    pub pid: Option<u32>,
}

/// Starts agent sessions of one protocol.
#[async_trait]
pub trait AgentDriver: Send + Sync {
    /// Spawns the agent and opens a new session, or resumes `req.resume` strictly: when
    /// the agent cannot load it or reports a different id, this fails with
    /// [`AgentError::ResumeUnavailable`] and nothing is prompted.
    async fn start(&self, req: StartRequest) -> Result<Box<dyn AgentSession>, AgentError>;
}

/// One live agent session (a process is attached). All methods take `&self` so that
/// `cancel` can run while `prompt` is in flight.
#[async_trait]
pub trait AgentSession: Send + Sync {
    /// The agent's own resume id (ACP sessionId, Codex thread id, Claude session id).
    fn external_id(&self) -> String;

    /// Runs one turn. Streams events into `events` until the turn ends. Only one prompt
    /// runs at a time per session.
    async fn prompt(
        &self,
        text: &str,
        events: mpsc::UnboundedSender<AgentEvent>,
    ) -> Result<TurnOutcome, AgentError>;

    /// Whether this session takes images as its own image input (ACP: the agent's
    /// `promptCapabilities.image`). When false the runtime sends images as files.
    fn accepts_images(&self) -> bool {
        false
    }

    /// [`AgentSession::prompt`] with images. The default sends the text alone: it is
    /// only called with images on a session that [`accepts_images`](Self::accepts_images).
    async fn prompt_with(
        &self,
        prompt: &Prompt,
        events: mpsc::UnboundedSender<AgentEvent>,
    ) -> Result<TurnOutcome, AgentError> {
        self.prompt(&prompt.text, events).await
    }

    /// Asks the agent to end the running turn; `prompt` then returns with
    /// [`StopReason::Cancelled`] (or an error if the agent died).
    async fn cancel(&self) -> Result<(), AgentError>;

    /// Whether the process is still running.
    fn is_alive(&self) -> bool;

    /// The process the session runs in (for `GET /api/v1/pool`).
    fn process(&self) -> ProcessRef {
        ProcessRef::default()
    }

    /// Asked before [`AgentSession::shutdown`]: whether the agent keeps this session
    /// loaded after it (a Codex thread left on a shared process that goes on running),
    /// and when that ends; `None` when the session ends with its shutdown.
    fn parked(&self) -> Option<crate::host::Parked> {
        None
    }

    /// Ends the session: a process of its own is ended and reaped; on a shared process
    /// the session only detaches (the process ends after its idle time once empty).
    async fn shutdown(&self);
}
