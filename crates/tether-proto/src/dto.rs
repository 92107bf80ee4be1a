//! HTTP request and response bodies of `/api/v1`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::{
    ApprovalId, ApprovalStatus, ConversationId, ConversationKind, ConversationState, Decision,
    ErrorCode, MessageRole, NewSessionReason, PersonId, QuestionId, QuestionStatus, SessionId,
    SessionStatus, TurnId, TurnStatus, Visibility,
};

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Health {
    pub status: String,
    pub version: String,
    /// The daemon's random per-run id (also in its data dir's `daemon.json`): lets a
    /// local client check it reached this data dir's daemon before sending the token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_id: Option<String>,
}

/// `POST /api/v1/drain` (issue 31): the node drains; how far.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DrainStatus {
    /// Always true: the node drains (asking again changes nothing).
    pub draining: bool,
    /// Sessions still live on this node.
    pub live_sessions: usize,
    /// Of those, running a turn.
    pub busy_sessions: usize,
}

/// `GET /api/v1/ready` (issue 25): whether this node can serve requests now.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Readiness {
    /// `ready`, `unavailable` or `draining` (both served with 503).
    pub status: String,
    /// The store: `ok`, or `unavailable`.
    pub store: String,
    /// Why not, when not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateConversation {
    #[serde(default)]
    pub title: Option<String>,
    /// A configured agent name (`GET /api/v1/agents`); absent: the default agent. Any
    /// other name is refused with `unknown_agent`.
    #[serde(default)]
    pub agent: Option<String>,
    /// The model for new sessions; absent, blank or `"default"`: the agent's default.
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub cwd: Option<String>,
    /// Who else sees it: `private` (the default: its owner and the admins) or `team`.
    #[serde(default)]
    pub visibility: Option<Visibility>,
    /// `worktree`: its sessions run in a git worktree of their own (issue 32); `none`;
    /// absent: as `[worktrees] isolate_roots` says for its directory.
    #[serde(default)]
    pub isolation: Option<Isolation>,
}

/// Where a conversation's sessions work (issue 32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// In the conversation's directory.
    None,
    /// In a git worktree of their own, on the branch `tether/<short id>`.
    Worktree,
}

/// A conversation's worktree (issue 32): `GET /api/v1/conversations/{id}/worktree`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WorktreeView {
    /// `none` (the conversation works in its own directory), `wanted` (made when the
    /// next session starts), `active`, `discarded` or `off`.
    pub status: String,
    pub branch: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The commit it was made from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// Its latest snapshot commit (`refs/tether/snapshots/<short id>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
    /// Paths changed against the base (uncommitted and untracked files included).
    #[serde(default)]
    pub changed_files: Vec<String>,
    /// `git diff --stat` against the base.
    #[serde(default)]
    pub stat: String,
}

/// `POST /api/v1/conversations/{id}/worktree`: isolation on or off, or a merge or a
/// discard of the worktree.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(tag = "action", rename_all = "snake_case", deny_unknown_fields)]
pub enum WorktreeAction {
    /// Isolation for the next session (off is refused while the worktree holds work).
    Isolate { on: bool },
    /// Merge the branch into the repository's checked-out branch (`ff_only`: refuse
    /// anything but a fast-forward).
    Merge {
        #[serde(default)]
        ff_only: bool,
    },
    /// Remove the worktree and its branch (a snapshot keeps its state).
    Discard,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateConversation {
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub archived: Option<bool>,
    /// Only its owner or an admin may change it.
    #[serde(default)]
    pub visibility: Option<Visibility>,
}

/// The bound runtime session, as seen from its conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Binding {
    #[schema(value_type = String)]
    pub session_id: SessionId,
    pub agent: String,
    #[serde(default)]
    pub model: Option<String>,
    pub status: SessionStatus,
    #[serde(default)]
    pub external_id: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Conversation {
    #[schema(value_type = String)]
    pub id: ConversationId,
    pub kind: ConversationKind,
    pub title: String,
    /// The agent the next new session will use.
    pub agent: String,
    /// The model the next new session will use (`null`: the agent's default).
    #[serde(default)]
    pub model: Option<String>,
    pub cwd: String,
    pub archived: bool,
    pub state: ConversationState,
    #[serde(default)]
    pub binding: Option<Binding>,
    /// Messages waiting behind the running turn.
    pub queue_len: u32,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub running_turn_id: Option<TurnId>,
    #[schema(value_type = Vec<String>)]
    pub pending_approvals: Vec<ApprovalId>,
    #[schema(value_type = Vec<String>)]
    pub pending_questions: Vec<QuestionId>,
    /// The person it belongs to (issue 28).
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub owner_id: Option<PersonId>,
    #[serde(default = "private")]
    pub visibility: Visibility,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

fn private() -> Visibility {
    Visibility::Private
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SendMessage {
    /// May be empty or absent when the message carries attachments.
    #[serde(default)]
    pub text: String,
    /// Agent chosen in the UI; differs from the bound session's → new session (drift).
    #[serde(default)]
    pub agent: Option<String>,
    /// Model chosen in the UI; differs from the bound session's → new session (drift).
    /// `"default"` (any case, as in `/model default`) asks for the agent's default model:
    /// from a chosen model that is drift too. Absent, `null` or blank: keep the
    /// conversation's current model preference.
    #[serde(default)]
    pub model: Option<String>,
    /// Attachments uploaded before (`POST …/attachments`) that go with this message,
    /// each at most once. Images reach the agent as its own image input, other files
    /// are copied under `<cwd>/.tether/attachments/` and named in the prompt.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<String>)]
    pub attachments: Vec<crate::AttachmentId>,
}

/// What happened to a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MessageOutcomeKind {
    /// A turn was started at once.
    Started,
    /// The message waits behind the running turn.
    Queued,
    /// The message answered the pending question.
    Answered,
    /// The message was a command; see `reply`.
    Command,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct MessageOutcome {
    pub outcome: MessageOutcomeKind,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub turn_id: Option<TurnId>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub session_id: Option<SessionId>,
    /// Set when this message started a new runtime session.
    #[serde(default)]
    pub new_session: Option<NewSessionReason>,
    /// 1-based place in the queue, when queued.
    #[serde(default)]
    pub queue_position: Option<u32>,
    /// The reply to a command, or the status message explaining a new session.
    #[serde(default)]
    pub reply: Option<String>,
    /// Files the command hands out (`/file <path>`): stored as attachments, downloadable
    /// at `GET /api/v1/attachments/{id}`; channels send them as files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<crate::Attachment>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct HistoryMessage {
    pub id: i64,
    pub role: MessageRole,
    pub text: String,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub session_id: Option<SessionId>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub turn_id: Option<TurnId>,
    pub at_ms: i64,
    /// The files a person's message carried (absent when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<crate::Attachment>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Session {
    #[schema(value_type = String)]
    pub id: SessionId,
    #[schema(value_type = String)]
    pub conversation_id: ConversationId,
    pub agent: String,
    #[serde(default)]
    pub model: Option<String>,
    pub cwd: String,
    pub status: SessionStatus,
    #[serde(default)]
    pub external_id: Option<String>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Turn {
    #[schema(value_type = String)]
    pub id: TurnId,
    #[schema(value_type = String)]
    pub session_id: SessionId,
    #[schema(value_type = String)]
    pub conversation_id: ConversationId,
    pub input: String,
    pub status: TurnStatus,
    #[serde(default)]
    pub result_text: Option<String>,
    #[serde(default)]
    pub stop_reason: Option<String>,
    #[serde(default)]
    pub error_code: Option<ErrorCode>,
    #[serde(default)]
    pub error_message: Option<String>,
    pub created_at_ms: i64,
    #[serde(default)]
    pub started_at_ms: Option<i64>,
    #[serde(default)]
    pub ended_at_ms: Option<i64>,
    #[serde(default)]
    pub usage: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Approval {
    #[schema(value_type = String)]
    pub id: ApprovalId,
    #[schema(value_type = String)]
    pub conversation_id: ConversationId,
    #[schema(value_type = String)]
    pub session_id: SessionId,
    #[schema(value_type = String)]
    pub turn_id: TurnId,
    pub title: String,
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub detail: Option<serde_json::Value>,
    pub options: Vec<Decision>,
    pub status: ApprovalStatus,
    #[serde(default)]
    pub decided_by: Option<String>,
    pub created_at_ms: i64,
    pub deadline_ms: i64,
    #[serde(default)]
    pub resolved_at_ms: Option<i64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerApproval {
    pub decision: Decision,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Question {
    #[schema(value_type = String)]
    pub id: QuestionId,
    #[schema(value_type = String)]
    pub conversation_id: ConversationId,
    #[schema(value_type = String)]
    pub session_id: SessionId,
    #[schema(value_type = String)]
    pub turn_id: TurnId,
    pub prompt: String,
    pub status: QuestionStatus,
    #[serde(default)]
    pub answer: Option<String>,
    pub created_at_ms: i64,
    pub deadline_ms: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerQuestion {
    pub answer: String,
}

/// A paged list of events.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EventPage {
    pub events: Vec<crate::EventEnvelope>,
    /// Pass as `after_seq` to get the next page; `null` when the page is empty.
    #[serde(default)]
    pub next_after_seq: Option<i64>,
}

/// Generic acknowledgement for actions.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ActionResult {
    pub ok: bool,
    #[serde(default)]
    pub message: Option<String>,
}

/// Figures of the runtime's own bookkeeping (`GET /api/v1/runtime`), for operators
/// watching that it stays bounded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RuntimeFigures {
    /// Conversation routing locks held or waited for right now (requests in flight; an
    /// idle conversation holds none).
    pub routing_locks: usize,
    /// Streamed agent events (deltas, tool calls) stored since start-up.
    #[serde(default)]
    pub streamed_events: u64,
    /// Store transactions those events took (coalesced writes: far fewer than events
    /// while agents stream fast).
    #[serde(default)]
    pub streamed_batches: u64,
    /// Session actors running now: sessions with a live process or work in hand. A
    /// dormant session with nothing to do has none.
    #[serde(default)]
    pub actors: usize,
    /// Conversations with at least one live follower (an SSE stream, a mapped chat, a
    /// delegation watch or wait): the event feed keeps a topic for each of these only.
    #[serde(default)]
    pub followed_conversations: usize,
    /// Group commits of streamed batches since start-up: concurrent sessions' batches
    /// share one transaction, so under load far fewer than `streamed_batches`.
    #[serde(default)]
    pub event_commits: u64,
    /// Events other nodes committed that this node handed to its followers (PostgreSQL
    /// clusters; 0 on SQLite).
    #[serde(default)]
    pub tailed_events: u64,
    /// Commit notices received from other nodes (`LISTEN`; the poll delivers without).
    #[serde(default)]
    pub tail_notices: u64,
    /// Writes on behalf of a conversation refused since start-up because another node
    /// took it over (fencing, issue 12; always 0 on SQLite).
    #[serde(default)]
    pub fenced_writes: u64,
}

/// The live pool: agent processes kept between turns (`GET /api/v1/pool`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PoolStatus {
    /// Sessions with a live agent process.
    pub live: usize,
    /// Live sessions running a turn.
    pub busy: usize,
    /// Live sessions waiting for their next turn.
    pub idle: usize,
    /// Global cap (0 = no limit).
    pub max_live: usize,
    /// Cap per owner (0 = no limit).
    pub max_live_per_owner: usize,
    /// Idle sessions are evicted after this (`null`: never).
    #[serde(default)]
    pub idle_ttl_secs: Option<u64>,
    /// Evictions since start (cap and TTL).
    pub evictions: u64,
    /// Agent processes running for live sessions (a shared one may have none for a while:
    /// it ends after its idle time).
    #[serde(default)]
    pub process_count: usize,
    /// Codex and ACP sessions one process hosts at most (1: a process per session).
    #[serde(default)]
    pub sessions_per_process: usize,
    /// Cap on shared processes (0 = no limit).
    #[serde(default)]
    pub max_processes: usize,
    /// The hard ceiling on agent processes of every kind (`[pool] process_limit`, 0 = no
    /// limit).
    #[serde(default)]
    pub process_limit: usize,
    /// Agent processes holding a slot of that ceiling now (own, shared and spare ones,
    /// until reaped).
    #[serde(default)]
    pub agent_processes: usize,
    /// The processes, each with its sessions and resident memory.
    #[serde(default)]
    pub processes: Vec<PoolProcess>,
    /// Warm spare processes started ahead of need (`[pool] claude_spare`): a new session
    /// of their agent in the default working directory and model attaches to one
    /// instead of a cold start. Not in `processes` (they host no session yet).
    #[serde(default)]
    pub spares: Vec<PoolSpare>,
}

/// A warm spare agent process (`GET /api/v1/pool`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PoolSpare {
    /// The configured agent name.
    pub agent: String,
    /// `None` while it is starting (or when its last start failed).
    #[serde(default)]
    pub pid: Option<u32>,
    /// Started and initialised: the next new session of its agent takes it.
    pub ready: bool,
    /// Resident memory of the process and its children, when it can be read.
    #[serde(default)]
    pub rss_bytes: Option<u64>,
}

/// One agent process of the live pool.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PoolProcess {
    /// The configured agent name.
    pub agent: String,
    #[serde(default)]
    pub pid: Option<u32>,
    /// Hosts sessions of many conversations (Codex app-server, ACP); `false`: one
    /// session's own process.
    pub shared: bool,
    /// The live sessions in it.
    #[schema(value_type = Vec<String>)]
    pub sessions: Vec<SessionId>,
    /// Resident memory of the process and its children, when it can be read.
    #[serde(default)]
    pub rss_bytes: Option<u64>,
}

/// `GET /api/v1/workspace`: where a conversation's working directory may lie (under one
/// of the roots) and the folder a conversation created without `cwd` gets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Workspace {
    pub roots: Vec<String>,
    pub default_cwd: String,
}
