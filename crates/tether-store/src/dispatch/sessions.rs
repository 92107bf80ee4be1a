//! The store's conversation, session, turn, event and request methods, each run by the
//! backend the store opened (see `dispatch`).

use tether_proto::*;

use super::{Backend, forward};
use crate::*;

forward! {
    // conversations
    /// Inserts a conversation.
    #[allow(clippy::too_many_arguments)]
    pub async fn create_conversation(
        &self,
        id: &ConversationId,
        kind: ConversationKind,
        title: &str,
        agent: &str,
        model: Option<&str>,
        cwd: &str,
        parent_conversation_id: Option<&ConversationId>,
    ) -> Result<ConversationRow>;

    pub async fn get_conversation(&self, id: &ConversationId) -> Result<Option<ConversationRow>>;

    /// Conversations, most recently active first.
    pub async fn list_conversations(&self, include_archived: bool) -> Result<Vec<ConversationRow>>;

    /// Updates title and/or archived flag.
    pub async fn update_conversation(
        &self,
        id: &ConversationId,
        title: Option<&str>,
        archived: Option<bool>,
    ) -> Result<()>;

    /// Names a conversation still titled `untitled`; `false` when it has a title.
    pub async fn name_untitled(&self, id: &ConversationId, untitled: &str, title: &str) -> Result<bool>;

    /// Sets the agent and model the next new session will use.
    pub async fn set_preferences(
        &self,
        id: &ConversationId,
        agent: &str,
        model: Option<&str>,
    ) -> Result<()>;

    /// Unbinds the conversation and records the command reply, in one transaction.
    /// `next_reason` is remembered for the next session (`explicit` after `/new`).
    /// Returns the session that was bound, if any.
    pub async fn unbind(
        &self,
        id: &ConversationId,
        status_text: &str,
        next_reason: Option<NewSessionReason>,
    ) -> Result<Option<SessionId>>;

    /// Creates a session, binds it to its conversation, and records `session_started`
    /// (plus the status message explaining why, if any), all in one transaction.
    pub async fn start_session(
        &self,
        s: &NewSession,
        reason: NewSessionReason,
        status_message: Option<&str>,
    ) -> Result<(Session, Vec<EventEnvelope>)>;

    pub async fn get_session(&self, id: &SessionId) -> Result<Option<Session>>;

    /// The session of `agent` that carries the agent session id `external_id`, if any.
    pub async fn session_with_external_id(
        &self,
        agent: &str,
        external_id: &str,
    ) -> Result<Option<SessionId>>;

    /// A conversation's sessions, oldest first.
    pub async fn list_sessions(&self, conversation_id: &ConversationId) -> Result<Vec<Session>>;

    /// Sets a session's status (and external id when given) with an event, together.
    pub async fn set_session_status(
        &self,
        id: &SessionId,
        status: SessionStatus,
        external_id: Option<&str>,
        event: Option<&EventPayload>,
    ) -> Result<Option<EventEnvelope>>;

    // turns
    /// Inserts a turn (queued or about to run) with the person's message in the history.
    pub async fn insert_turn(&self, t: &NewTurn, by_message: bool) -> Result<Turn>;

    /// Marks a queued turn running and records `turn_started`, together. `None` when the
    /// turn is not queued any more (it already ran or ended).
    pub async fn start_turn(&self, turn_id: &TurnId) -> Result<Option<EventEnvelope>>;

    /// Ends a turn: status, result, the terminal event and a history entry, together.
    /// Returns `None` when the turn machine does not allow the step from its status (it
    /// had already ended: terminal states are immutable).
    pub async fn finish_turn(
        &self,
        turn_id: &TurnId,
        end: &TurnEnd,
        event: &EventPayload,
        message: Option<&NewMessage>,
    ) -> Result<Option<EventEnvelope>>;

    pub async fn get_turn(&self, id: &TurnId) -> Result<Option<Turn>>;

    /// A session's turns, oldest first.
    pub async fn session_turns(&self, session_id: &SessionId) -> Result<Vec<Turn>>;

    /// The conversation's turns that have not ended, oldest first.
    pub async fn open_turns(&self, conversation_id: &ConversationId) -> Result<Vec<Turn>>;

    /// Sets a non-terminal status (running ↔ waiting); terminal turns are left alone.
    pub async fn set_turn_waiting(&self, turn_id: &TurnId, status: TurnStatus) -> Result<()>;

    // events
    /// Appends a history entry, optionally with a `status` event on a session, together.
    pub async fn add_message(
        &self,
        conversation_id: &ConversationId,
        role: MessageRole,
        text: &str,
        session_id: Option<&SessionId>,
        turn_id: Option<&TurnId>,
    ) -> Result<Option<EventEnvelope>>;

    /// A session's events with `seq > after_seq`, oldest first.
    pub async fn session_events(
        &self,
        session_id: &SessionId,
        after_seq: i64,
        limit: u32,
    ) -> Result<Vec<EventEnvelope>>;

    /// A conversation's events (across its sessions) with global `id > after_id`.
    pub async fn conversation_events(
        &self,
        conversation_id: &ConversationId,
        after_id: i64,
        limit: u32,
    ) -> Result<Vec<EventEnvelope>>;

    /// The conversation's history with `id > after_id`, oldest first.
    pub async fn history(
        &self,
        conversation_id: &ConversationId,
        after_id: i64,
        limit: u32,
    ) -> Result<Vec<HistoryMessage>>;

    // approvals
    /// Inserts a pending approval, marks its turn waiting, records `approval_requested`.
    pub async fn create_approval(&self, a: &NewApproval) -> Result<EventEnvelope>;

    /// Resolves a pending approval. `Ok(None)` when it was not pending any more (the
    /// caller reports `approval_already_resolved`); `Err` only for storage failures.
    pub async fn resolve_approval(
        &self,
        id: &ApprovalId,
        status: ApprovalStatus,
        decided_by: Option<&str>,
    ) -> Result<Option<(Approval, EventEnvelope)>>;

    pub async fn get_approval(&self, id: &ApprovalId) -> Result<Option<Approval>>;

    /// Approvals, newest first, optionally filtered by status and/or conversation.
    pub async fn list_approvals(
        &self,
        status: Option<ApprovalStatus>,
        conversation_id: Option<&ConversationId>,
    ) -> Result<Vec<Approval>>;

    /// Inserts a pending question, marks its turn waiting, records `question_asked`.
    pub async fn create_question(&self, q: &NewQuestion) -> Result<EventEnvelope>;

    /// Resolves a pending question; `Ok(None)` when it was not pending any more.
    pub async fn resolve_question(
        &self,
        id: &QuestionId,
        status: QuestionStatus,
        answer: Option<&str>,
        answered_by: Option<&str>,
    ) -> Result<Option<(Question, EventEnvelope)>>;

    pub async fn get_question(&self, id: &QuestionId) -> Result<Option<Question>>;

    /// Questions, newest first, optionally filtered.
    pub async fn list_questions(
        &self,
        status: Option<QuestionStatus>,
        conversation_id: Option<&ConversationId>,
    ) -> Result<Vec<Question>>;

    // recovery
    /// Runs recovery; `notice` writes the status message for one conversation.
    pub async fn recover(
        &self,
        notice: impl Fn(&RecoveredConversation) -> String,
    ) -> Result<RecoveryReport>;

    /// Recovery of conversation `id` alone (issue 12: a conversation taken over from a
    /// node that died or restarted), in one transaction fenced by the epoch this node
    /// holds for it.
    pub async fn recover_conversation(
        &self,
        id: &ConversationId,
        notice: impl Fn(&RecoveredConversation) -> String,
    ) -> Result<RecoveryReport>;

    // pages
    /// One page of conversations, most recently updated first (ties by id), after
    /// `cursor`.
    pub async fn list_conversations_page(
        &self,
        include_archived: bool,
        cursor: Option<&ListCursor>,
        limit: u32,
    ) -> Result<Vec<ConversationRow>>;

    /// The last `limit` events of a conversation with `id < before_id` (all when
    /// `None`), oldest first.
    pub async fn conversation_events_before(
        &self,
        conversation_id: &ConversationId,
        before_id: Option<i64>,
        limit: u32,
    ) -> Result<Vec<EventEnvelope>>;

    /// The last `limit` history messages with `id < before_id`, oldest first.
    pub async fn history_before(
        &self,
        conversation_id: &ConversationId,
        before_id: i64,
        limit: u32,
    ) -> Result<Vec<HistoryMessage>>;

    // view_parts
    /// The [`ViewParts`] of these conversations and sessions (in no particular order).
    pub async fn view_parts(
        &self,
        conversation_ids: &[&ConversationId],
        session_ids: &[&SessionId],
    ) -> Result<ViewParts>;

    // append
    /// Appends events of one session atomically (all or none, gap-free `seq`s in this
    /// order) and publishes them at commit; possibly in one transaction with other
    /// sessions' appends (see the module header).
    pub async fn append_events(
        &self,
        session_id: &SessionId,
        turn_id: Option<&TurnId>,
        payloads: &[EventPayload],
    ) -> Result<Vec<EventEnvelope>>;

    // feed
    /// The conversation of a session (`None`: no such session).
    pub(crate) async fn session_conversation(
        &self,
        session_id: &SessionId,
    ) -> Result<Option<ConversationId>>;

    /// Stored events of a conversation (or of one of its sessions) with `after < id <=
    /// until`, in commit order, at most `limit`.
    pub(crate) async fn events_window(
        &self,
        conversation_id: &ConversationId,
        session_id: Option<&SessionId>,
        after: i64,
        until: i64,
        limit: u32,
    ) -> Result<Vec<EventEnvelope>>;

    /// The id of the conversation's newest stored event (0: none).
    pub(crate) async fn newest_event_id(&self, conversation_id: &ConversationId) -> Result<i64>;
}
