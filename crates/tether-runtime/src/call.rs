//! The runtime's command API as data (the codex-rs `Op` pattern): every call that
//! changes something is a [`Command`], sent with who asked ([`Principal`]) and the trace
//! it belongs to ([`TraceContext`]) as one [`Call`] to [`crate::Runtime::call`], which
//! answers one [`Reply`]. A call runs where the conversation's commands run: on this node,
//! or forwarded to the owner as the same serialised `Call` (see `cluster/routed.rs`).
//! Types only; what each command does is in `dispatch.rs`.

use serde::{Deserialize, Serialize};
use tether_proto::{
    Approval, ApprovalId, Conversation, ConversationId, CreateConversation, Decision,
    MessageOutcome, PersonId, Question, QuestionId, Role, SendMessage, SessionId, TaskClosed,
    TaskId, TaskSnapshot, TaskStarted, TokenScope, TurnId, UpdateConversation,
};

use crate::RuntimeError;
use crate::delegation::registry::Caller;
use crate::error::Result;

/// A person as the runtime checks them (issue 28): who, their role, and the scopes of
/// what they signed in with. Resolved by the adapter that took the request (a token, a
/// sign-in session), carried with every call and checked where every call passes
/// ([`crate::Runtime::call`], `access.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub person: PersonId,
    pub name: String,
    pub role: Role,
    pub scopes: Vec<TokenScope>,
}

impl Identity {
    /// The actor `tether_core::authz` decides for.
    pub fn actor(&self) -> tether_core::Actor<'_> {
        tether_core::Actor {
            person: &self.person,
            role: self.role,
            scopes: tether_core::Scopes::of(&self.scopes),
        }
    }

    /// Whether they see every conversation (owners and admins do).
    pub fn sees_all(&self) -> bool {
        tether_core::authz::at_least(self.role, Role::Admin)
    }
}

/// Who asked. A person is named as history and approvals record them (`api`, `web`,
/// `telegram:<user>`, or their own name); with an [`Identity`] what they may do is
/// checked, without one they are trusted (tether's own adapters acting for someone the
/// adapter admitted: a channel's allowed user until accounts are linked to people).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Principal {
    /// A person, named as history and approvals record them.
    Person { name: String },
    /// An agent session tether launched, calling through its MCP token.
    Agent {
        conversation_id: ConversationId,
        session_id: SessionId,
    },
    /// An MCP client outside tether, holding the API token.
    External,
    /// tether itself: work a node hands to another (a task's first turn, a report).
    System,
}

impl Principal {
    /// Who asks when the HTTP API calls without naming a person (the teams issue names
    /// them).
    pub(crate) fn api() -> Principal {
        Principal::person("api")
    }

    /// A person named `name`.
    pub fn person(name: impl Into<String>) -> Principal {
        Principal::Person { name: name.into() }
    }

    /// The name recorded with what this caller does (`by` of a message or an answer).
    pub fn name(&self) -> String {
        match self {
            Principal::Person { name } => name.clone(),
            Principal::Agent { session_id, .. } => format!("agent:{session_id}"),
            Principal::External => "mcp".to_owned(),
            Principal::System => "tether".to_owned(),
        }
    }

    /// The caller of a delegation operation (tether's own work acts as a person would).
    pub fn caller(&self) -> Caller {
        match self {
            Principal::Agent {
                conversation_id,
                session_id,
            } => Caller::Session {
                conversation_id: conversation_id.clone(),
                session_id: session_id.clone(),
            },
            Principal::External => Caller::External,
            Principal::Person { .. } | Principal::System => Caller::Person,
        }
    }
}

impl From<&Caller> for Principal {
    fn from(c: &Caller) -> Principal {
        match c {
            Caller::Session {
                conversation_id,
                session_id,
            } => Principal::Agent {
                conversation_id: conversation_id.clone(),
                session_id: session_id.clone(),
            },
            Caller::External => Principal::External,
            Caller::Person => Principal::person("api"),
        }
    }
}

/// The W3C trace context a call belongs to (`traceparent`), carried with a forwarded
/// call so its work on the owner joins the same trace. Empty until tracing is on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceContext {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

/// One call: what to do, who asked, in which trace.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Call {
    pub command: Command,
    pub by: Principal,
    /// The person whose rights the call is checked with (a person, an agent session
    /// acting as its conversation's owner, an MCP client with a personal token); `None`:
    /// tether's own, trusted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub who: Option<Identity>,
    #[serde(default)]
    pub trace: TraceContext,
}

impl Call {
    pub fn new(command: Command, by: Principal) -> Call {
        Call {
            command,
            by,
            who: None,
            trace: TraceContext::default(),
        }
    }
}

/// Every call that changes something. The comment of each says its [`Reply`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum Command {
    /// [`Reply::Conversation`].
    CreateConversation { request: CreateConversation },
    /// [`Reply::Conversation`].
    UpdateConversation {
        conversation_id: ConversationId,
        update: UpdateConversation,
    },
    /// A command, an answer to a pending question, or a prompt. With `turn_id`, a
    /// message that may be delivered again: routed once (see
    /// [`crate::Runtime::send_message_once`]). [`Reply::Message`].
    SendMessage {
        conversation_id: ConversationId,
        message: SendMessage,
        #[serde(default)]
        turn_id: Option<TurnId>,
    },
    /// [`Reply::Message`].
    NewSession { conversation_id: ConversationId },
    /// [`Reply::Message`].
    Detach { conversation_id: ConversationId },
    /// [`Reply::Message`].
    Stop { conversation_id: ConversationId },
    /// [`Reply::Approval`].
    AnswerApproval {
        approval_id: ApprovalId,
        decision: Decision,
    },
    /// [`Reply::Question`].
    AnswerQuestion {
        question_id: QuestionId,
        answer: String,
    },
    /// A new delegated task. [`Reply::TaskStarted`].
    Delegate {
        agent_type: String,
        task: String,
        #[serde(default)]
        working_dir: Option<String>,
        #[serde(default)]
        tool_call_id: Option<String>,
    },
    /// [`Reply::TaskStarted`].
    ContinueTask {
        task_id: TaskId,
        message: String,
        continuation_id: String,
    },
    /// [`Reply::TaskClosed`].
    CloseTask {
        task_id: TaskId,
        continuation_id: String,
    },
    /// [`Reply::Task`].
    CancelTask { task_id: TaskId },
    /// Between nodes: a new task's first turn (the sender is at its cap). [`Reply::Done`].
    StartTask { task_id: TaskId, turn_id: TurnId },
    /// Between nodes: evict the conversation's session if it is idle (its parent's live
    /// children elsewhere are at `max_live_per_owner`). [`Reply::Evicted`].
    EvictIdle { conversation_id: ConversationId },
    /// Between nodes: the report of an ended delegation turn, written by the owner of
    /// the conversation it goes to. [`Reply::Done`].
    ReportTurn {
        conversation_id: ConversationId,
        turn_id: TurnId,
    },
}

/// The answer to a [`Call`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "reply", content = "value", rename_all = "snake_case")]
pub enum Reply {
    Conversation(Box<Conversation>),
    Message(Box<MessageOutcome>),
    Approval(Box<Approval>),
    Question(Box<Question>),
    TaskStarted(Box<TaskStarted>),
    TaskClosed(Box<TaskClosed>),
    Task(Box<TaskSnapshot>),
    Evicted(bool),
    Done,
}

/// Each reply type taken out of its [`Reply`] variant; another variant is a bug
/// (`internal`), never a value of the wrong type.
macro_rules! reply_types {
    ($($variant:ident => $ty:ty),* $(,)?) => {$(
        impl TryFrom<Reply> for $ty {
            type Error = RuntimeError;
            fn try_from(r: Reply) -> Result<$ty> {
                match r {
                    Reply::$variant(v) => Ok(*v),
                    other => Err(unexpected(stringify!($variant), &other)),
                }
            }
        }
        impl From<$ty> for Reply {
            fn from(v: $ty) -> Reply {
                Reply::$variant(Box::new(v))
            }
        }
    )*};
}

reply_types! {
    Conversation => Conversation,
    Message => MessageOutcome,
    Approval => Approval,
    Question => Question,
    TaskStarted => TaskStarted,
    TaskClosed => TaskClosed,
    Task => TaskSnapshot,
}

impl TryFrom<Reply> for bool {
    type Error = RuntimeError;
    fn try_from(r: Reply) -> Result<bool> {
        match r {
            Reply::Evicted(v) => Ok(v),
            other => Err(unexpected("Evicted", &other)),
        }
    }
}

impl TryFrom<Reply> for () {
    type Error = RuntimeError;
    fn try_from(r: Reply) -> Result<()> {
        match r {
            Reply::Done => Ok(()),
            other => Err(unexpected("Done", &other)),
        }
    }
}

fn unexpected(wanted: &str, got: &Reply) -> RuntimeError {
    let got = match got {
        Reply::Conversation(_) => "Conversation",
        Reply::Message(_) => "Message",
        Reply::Approval(_) => "Approval",
        Reply::Question(_) => "Question",
        Reply::TaskStarted(_) => "TaskStarted",
        Reply::TaskClosed(_) => "TaskClosed",
        Reply::Task(_) => "Task",
        Reply::Evicted(_) => "Evicted",
        Reply::Done => "Done",
    };
    RuntimeError::Internal(format!("a call answered {got} where {wanted} was due"))
}

impl Command {
    /// Its name (the wire tag), for spans and logs.
    pub fn name(&self) -> &'static str {
        match self {
            Command::CreateConversation { .. } => "create_conversation",
            Command::UpdateConversation { .. } => "update_conversation",
            Command::SendMessage { .. } => "send_message",
            Command::NewSession { .. } => "new_session",
            Command::Detach { .. } => "detach",
            Command::Stop { .. } => "stop",
            Command::AnswerApproval { .. } => "answer_approval",
            Command::AnswerQuestion { .. } => "answer_question",
            Command::Delegate { .. } => "delegate",
            Command::ContinueTask { .. } => "continue_task",
            Command::CloseTask { .. } => "close_task",
            Command::CancelTask { .. } => "cancel_task",
            Command::StartTask { .. } => "start_task",
            Command::EvictIdle { .. } => "evict_idle",
            Command::ReportTurn { .. } => "report_turn",
        }
    }

    /// Whether the command may start a turn in a session that is not live yet (a
    /// draining node without another node to send it to refuses those, issue 31): a
    /// prompt (not a tether command), a task's new turn, a new task.
    pub(crate) fn starts_work(&self) -> bool {
        match self {
            Command::SendMessage { message, .. } => {
                let text = message.text.trim_start();
                !text.starts_with('/') || text.starts_with("//")
            }
            Command::ContinueTask { .. } | Command::StartTask { .. } | Command::Delegate { .. } => {
                true
            }
            Command::CreateConversation { .. }
            | Command::UpdateConversation { .. }
            | Command::NewSession { .. }
            | Command::Detach { .. }
            | Command::Stop { .. }
            | Command::AnswerApproval { .. }
            | Command::AnswerQuestion { .. }
            | Command::CloseTask { .. }
            | Command::CancelTask { .. }
            | Command::EvictIdle { .. }
            | Command::ReportTurn { .. } => false,
        }
    }

    /// The conversation the command acts on when the command itself names it (an
    /// approval's or a question's is read from the store; a new conversation or task
    /// has none yet).
    pub(crate) fn named_conversation(&self) -> Option<ConversationId> {
        match self {
            Command::UpdateConversation {
                conversation_id, ..
            }
            | Command::SendMessage {
                conversation_id, ..
            }
            | Command::NewSession { conversation_id }
            | Command::Detach { conversation_id }
            | Command::Stop { conversation_id }
            | Command::EvictIdle { conversation_id }
            | Command::ReportTurn {
                conversation_id, ..
            } => Some(conversation_id.clone()),
            Command::ContinueTask { task_id, .. }
            | Command::CloseTask { task_id, .. }
            | Command::CancelTask { task_id }
            | Command::StartTask { task_id, .. } => Some(task_id.conversation_id()),
            Command::CreateConversation { .. }
            | Command::Delegate { .. }
            | Command::AnswerApproval { .. }
            | Command::AnswerQuestion { .. } => None,
        }
    }
}

/// The commands as the typed methods of `Runtime` make them.
impl Command {
    pub(crate) fn update(id: &ConversationId, update: UpdateConversation) -> Command {
        Command::UpdateConversation {
            conversation_id: id.clone(),
            update,
        }
    }

    pub(crate) fn send(
        id: &ConversationId,
        message: SendMessage,
        turn: Option<&TurnId>,
    ) -> Command {
        Command::SendMessage {
            conversation_id: id.clone(),
            message,
            turn_id: turn.cloned(),
        }
    }

    pub(crate) fn new_session(id: &ConversationId) -> Command {
        let conversation_id = id.clone();
        Command::NewSession { conversation_id }
    }

    pub(crate) fn detach(id: &ConversationId) -> Command {
        let conversation_id = id.clone();
        Command::Detach { conversation_id }
    }

    pub(crate) fn stop(id: &ConversationId) -> Command {
        let conversation_id = id.clone();
        Command::Stop { conversation_id }
    }

    pub(crate) fn answer_approval(id: &ApprovalId, decision: Decision) -> Command {
        let approval_id = id.clone();
        Command::AnswerApproval {
            approval_id,
            decision,
        }
    }

    pub(crate) fn answer_question(id: &QuestionId, answer: &str) -> Command {
        Command::AnswerQuestion {
            question_id: id.clone(),
            answer: answer.to_owned(),
        }
    }

    pub(crate) fn delegate(
        agent_type: &str,
        task: &str,
        working_dir: Option<&str>,
        tool_call_id: Option<&str>,
    ) -> Command {
        Command::Delegate {
            agent_type: agent_type.to_owned(),
            task: task.to_owned(),
            working_dir: working_dir.map(str::to_owned),
            tool_call_id: tool_call_id.map(str::to_owned),
        }
    }

    pub(crate) fn continue_task(task_id: &TaskId, message: &str, continuation_id: &str) -> Command {
        Command::ContinueTask {
            task_id: task_id.clone(),
            message: message.to_owned(),
            continuation_id: continuation_id.to_owned(),
        }
    }

    pub(crate) fn close_task(task_id: &TaskId, continuation_id: &str) -> Command {
        Command::CloseTask {
            task_id: task_id.clone(),
            continuation_id: continuation_id.to_owned(),
        }
    }

    pub(crate) fn cancel_task(task_id: &TaskId) -> Command {
        let task_id = task_id.clone();
        Command::CancelTask { task_id }
    }
}
