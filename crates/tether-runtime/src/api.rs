//! The runtime's public face, and the only `impl Runtime`: what the HTTP API, the MCP
//! server and the channels call. Every change is a `Command` through [`Runtime::call`];
//! the work is done by the services behind it, each a view of the runtime in its own
//! module: `Conversations`, `Router` (binding rules, actors, routing locks),
//! `Delegations`, `Attachments`, `Placement` (where a call runs, forwarding), `Feed` and
//! `Dispatch` (the one match over commands).

use futures::future::BoxFuture;
use tether_proto::{
    Approval, ApprovalId, Attachment, AttachmentId, Continuation, Conversation, ConversationId,
    CreateConversation, Decision, EventEnvelope, EventPage, HistoryMessage, MessageOutcome,
    Question, QuestionId, SendMessage, Session, SessionId, TaskClosed, TaskId, TaskSnapshot,
    TaskStarted, TurnFiles, TurnId, UpdateConversation,
};
use tether_store::{Follower, Scope, Store};
use tokio::sync::broadcast;

use crate::access::Access;
use crate::attachments::Attachments;
use crate::call::{Call, Command, Identity, Principal, Reply};
use crate::cluster::service::Placement;
use crate::conversations::Conversations;
use crate::ctx::Ctx;
use crate::delegation::Delegations;
use crate::delegation::registry::Caller;
use crate::dispatch::Dispatch;
use crate::error::Result;
use crate::feed::Feed;
use crate::session::mailbox::ActorHandle;
use crate::session::router_entry::Router;
use crate::{Runtime, RuntimeConfig, RuntimeError};

impl Runtime {
    // Start-up and the services.
    /// Opens the runtime on a store, running start-up recovery first: open turns become
    /// `interrupted`, pending approvals and questions `expired`, sessions dormant.
    pub async fn start(config: RuntimeConfig, store: Store) -> Result<Runtime> {
        Self::start_with(config, store, crate::Seams::default()).await
    }

    /// [`Runtime::start`] with given agent drivers and clock (in-process tests).
    pub async fn start_with(
        config: RuntimeConfig,
        store: Store,
        seams: crate::Seams,
    ) -> Result<Runtime> {
        crate::boot::start(config, store, seams).await
    }
    pub(crate) fn ctx(&self) -> &Ctx {
        &self.inner.ctx
    }
    pub(crate) fn conversations(&self) -> Conversations<'_> {
        Conversations::new(self)
    }
    pub(crate) fn router(&self) -> Router<'_> {
        Router::new(self)
    }
    pub(crate) fn delegations(&self) -> Delegations<'_> {
        Delegations::new(self)
    }
    pub(crate) fn attachments(&self) -> Attachments<'_> {
        Attachments::new(self)
    }
    pub(crate) fn placement(&self) -> Placement<'_> {
        Placement::new(self)
    }
    pub(crate) fn feed(&self) -> Feed<'_> {
        Feed::new(self)
    }
    pub(crate) fn dispatch(&self) -> Dispatch<'_> {
        Dispatch::new(self)
    }
    pub(crate) fn access(&self) -> Access<'_> {
        Access::new(self)
    }

    // People (issue 28).
    /// This runtime acting for `who` (reads filtered, calls checked: `access.rs`).
    pub fn acting_as(&self, who: Identity) -> Runtime {
        crate::boot::handle(&self.inner, Some(who))
    }
    /// tether's own handle (background work is not the person's).
    pub(crate) fn trusted(&self) -> Runtime {
        crate::boot::handle(&self.inner, None)
    }
    /// The person this handle acts for (`None`: tether's own).
    pub fn identity(&self) -> Option<&Identity> {
        self.who.as_deref()
    }
    /// The install's owner, whom the bootstrap token (`TETHER_TOKEN`) stands for.
    pub fn owner_identity(&self) -> Identity {
        self.access().owner()
    }
    pub fn people(&self) -> crate::People<'_> {
        crate::People::new(self)
    }
    /// The usage ledger and budgets (issue 29).
    pub fn usage(&self) -> crate::Usage<'_> {
        crate::Usage { rt: self }
    }
    /// Draining and the scrape's gauges (issue 31).
    pub fn ops(&self) -> crate::Ops<'_> {
        crate::Ops { rt: self }
    }
    /// Isolated worktrees (issue 32).
    pub fn worktrees(&self) -> crate::Worktrees<'_> {
        crate::Worktrees { rt: self }
    }
    /// Scheduled turns (issue 30).
    pub fn schedules(&self) -> crate::Schedules<'_> {
        crate::Schedules { rt: self }
    }

    // Commands: every change goes through `call` (dispatch.rs).
    /// Runs `call` where the conversation it acts on runs (this node, or its owner).
    /// Boxed: a call may make calls (archiving closes the children's tasks).
    pub fn call(&self, mut call: Call) -> BoxFuture<'_, Result<Reply>> {
        self.access().attach(&mut call);
        Box::pin(self.dispatch().call(call))
    }

    /// [`Runtime::call`] with its reply taken out as `T`.
    pub(crate) async fn call_as<T>(&self, command: Command, by: Principal) -> Result<T>
    where
        T: TryFrom<Reply, Error = RuntimeError>,
    {
        T::try_from(self.call(Call::new(command, by)).await?)
    }
    pub async fn create_conversation(&self, req: CreateConversation) -> Result<Conversation> {
        let command = Command::CreateConversation { request: req };
        self.call_as(command, Principal::api()).await
    }
    pub async fn update_conversation(
        &self,
        id: &ConversationId,
        update: UpdateConversation,
    ) -> Result<Conversation> {
        self.call_as(Command::update(id, update), Principal::api())
            .await
    }

    /// A person's message: a command, an answer to a pending question, or a prompt that
    /// starts a turn (or queues behind the running one). `by` names the sender.
    pub async fn send_message(
        &self,
        id: &ConversationId,
        message: SendMessage,
        by: &str,
    ) -> Result<MessageOutcome> {
        let command = Command::send(id, message, None);
        self.call_as(command, Principal::person(by)).await
    }

    /// [`Runtime::send_message`] for a message that may be delivered again (a channel's
    /// replay): its turn gets the stable `turn_id`; a stored one is not routed again.
    pub async fn send_message_once(
        &self,
        id: &ConversationId,
        message: SendMessage,
        by: &str,
        turn_id: &TurnId,
    ) -> Result<MessageOutcome> {
        let command = Command::send(id, message, Some(turn_id));
        self.call_as(command, Principal::person(by)).await
    }

    /// Unbinds; the next message starts a new session (reason `explicit`).
    pub async fn new_session(&self, id: &ConversationId) -> Result<MessageOutcome> {
        self.call_as(Command::new_session(id), Principal::api())
            .await
    }
    /// Unbinds only.
    pub async fn detach(&self, id: &ConversationId) -> Result<MessageOutcome> {
        self.call_as(Command::detach(id), Principal::api()).await
    }
    /// Cancels the running turn (exactly one `turn_cancelled` event); `nothing_running`
    /// when no turn runs.
    pub async fn stop(&self, id: &ConversationId) -> Result<MessageOutcome> {
        self.call_as(Command::stop(id), Principal::api()).await
    }

    /// First answer wins; a second gets `approval_already_resolved`.
    pub async fn answer_approval(
        &self,
        id: &ApprovalId,
        decision: Decision,
        by: &str,
    ) -> Result<Approval> {
        let command = Command::answer_approval(id, decision);
        self.call_as(command, Principal::person(by)).await
    }
    pub async fn answer_question(
        &self,
        id: &QuestionId,
        answer: &str,
        by: &str,
    ) -> Result<Question> {
        let command = Command::answer_question(id, answer);
        self.call_as(command, Principal::person(by)).await
    }

    /// `delegate_to_agent`: creates the task and starts its first turn; returns at once.
    pub async fn delegate(
        &self,
        caller: &Caller,
        agent_type: &str,
        task: &str,
        working_dir: Option<&str>,
        tool_call_id: Option<&str>,
    ) -> Result<TaskStarted> {
        let command = Command::delegate(agent_type, task, working_dir, tool_call_id);
        self.call_as(command, caller.into()).await
    }

    /// A new turn in the same child session; idempotent by `continuation_id`.
    pub async fn continue_task(
        &self,
        caller: &Caller,
        task_id: &TaskId,
        message: &str,
        continuation_id: &str,
    ) -> Result<TaskStarted> {
        let command = Command::continue_task(task_id, message, continuation_id);
        self.call_as(command, caller.into()).await
    }

    /// Ends a task's turn and process for good (history kept); idempotent by id.
    pub async fn close_task(
        &self,
        caller: &Caller,
        task_id: &TaskId,
        continuation_id: &str,
    ) -> Result<TaskClosed> {
        let command = Command::close_task(task_id, continuation_id);
        self.call_as(command, caller.into()).await
    }

    /// `cancel_delegation`: cancels the running turn and returns the final result; if the
    /// task already finished, returns its result unchanged.
    pub async fn cancel_task(&self, caller: &Caller, task_id: &TaskId) -> Result<TaskSnapshot> {
        self.call_as(Command::cancel_task(task_id), caller.into())
            .await
    }

    // Conversations, sessions and their history.
    /// One page of conversations, most recently updated first, after `cursor`.
    pub async fn list_conversations_page(
        &self,
        include_archived: bool,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<crate::ConversationPage> {
        self.conversations()
            .list_conversations_page(include_archived, cursor, limit)
            .await
    }
    pub async fn get_conversation(&self, id: &ConversationId) -> Result<Conversation> {
        self.conversations().get_conversation(id).await
    }

    /// History (user, agent, status and command messages), oldest first, `id > after_id`.
    pub async fn history(
        &self,
        id: &ConversationId,
        after_id: Option<i64>,
        limit: u32,
    ) -> Result<Vec<HistoryMessage>> {
        self.conversations().history(id, after_id, limit).await
    }

    /// The last `limit` history messages before `before_id`, oldest first.
    pub async fn history_before(
        &self,
        id: &ConversationId,
        before_id: i64,
        limit: u32,
    ) -> Result<Vec<HistoryMessage>> {
        self.conversations()
            .history_before(id, before_id, limit)
            .await
    }

    /// The conversation's events with global id `> after_id`, oldest first.
    pub async fn conversation_events(
        &self,
        id: &ConversationId,
        after_id: i64,
        limit: u32,
    ) -> Result<Vec<EventEnvelope>> {
        self.conversations()
            .conversation_events(id, after_id, limit)
            .await
    }

    /// The last `limit` events of a conversation before `before_id` (the end when
    /// `None`), oldest first.
    pub async fn conversation_events_before(
        &self,
        id: &ConversationId,
        before_id: Option<i64>,
        limit: u32,
    ) -> Result<tether_proto::ConversationEventPage> {
        self.conversations()
            .conversation_events_before(id, before_id, limit)
            .await
    }

    /// Ids of conversations whose list view may have changed, at most one per commit (see
    /// `Conversations::conversation_changes`).
    pub fn conversation_changes(&self) -> broadcast::Receiver<ConversationId> {
        self.conversations().conversation_changes()
    }
    pub async fn get_session(&self, id: &SessionId) -> Result<Session> {
        self.conversations().get_session(id).await
    }
    pub async fn session_events(
        &self,
        id: &SessionId,
        after_seq: i64,
        limit: u32,
    ) -> Result<EventPage> {
        self.conversations()
            .session_events(id, after_seq, limit)
            .await
    }

    // Delegated tasks.
    /// The caller a per-session MCP token stands for (`None`: unknown token).
    pub fn mcp_caller(&self, token: &str) -> Option<Caller> {
        self.delegations().mcp_caller(token)
    }

    /// Whether the MCP endpoints let a connection with `token` in (see `Delegations::mcp_admits`).
    pub fn mcp_admits(&self, token: &str) -> bool {
        self.delegations().mcp_admits(token)
    }

    /// The snapshot of one task the caller may see.
    pub async fn task_snapshot(&self, caller: &Caller, task_id: &TaskId) -> Result<TaskSnapshot> {
        self.delegations().task_snapshot(caller, task_id).await
    }

    /// `get_delegation_status`: snapshots in request order, at once or after a wait (see
    /// `Delegations::delegation_status`; at most [`crate::MAX_WAITS_PER_CALLER`] waits per caller).
    pub async fn delegation_status(
        &self,
        caller: &Caller,
        task_ids: &[TaskId],
        wait_ms: Option<u64>,
    ) -> Result<tether_proto::TaskList> {
        self.delegations()
            .delegation_status(caller, task_ids, wait_ms)
            .await
    }

    /// The delegated tasks of a parent conversation, oldest first.
    pub async fn delegations_of(
        &self,
        parent_conversation_id: &ConversationId,
    ) -> Result<Vec<Continuation>> {
        self.delegations()
            .delegations_of(parent_conversation_id)
            .await
    }

    /// `GET /api/v1/conversations/{id}/continuation`.
    pub async fn continuation(&self, task_id: &TaskId) -> Result<Continuation> {
        self.delegations().continuation(task_id).await
    }

    // Attachments and a turn's files.
    pub fn attachment_limits(&self) -> crate::AttachmentLimits {
        self.attachments().attachment_limits()
    }

    /// Stores files for a later message of the conversation, all checked before any is
    /// stored (see `Attachments::add_attachments`).
    pub async fn add_attachments(
        &self,
        conversation_id: &ConversationId,
        files: &[crate::NewAttachment<'_>],
    ) -> Result<Vec<Attachment>> {
        self.attachments()
            .add_attachments(conversation_id, files)
            .await
    }

    /// An attachment's row and bytes.
    pub async fn attachment(&self, id: &AttachmentId) -> Result<(Attachment, Vec<u8>)> {
        self.attachments().attachment(id).await
    }

    /// The files the agent created or changed in a turn, as they are now.
    pub async fn turn_files(&self, turn_id: &TurnId) -> Result<TurnFiles> {
        self.attachments().turn_files(turn_id).await
    }

    /// The bytes of a file in a turn's working directory (confined to it, within the
    /// per-file attachment limit) and its name.
    pub async fn working_file(&self, turn_id: &TurnId, path: &str) -> Result<(String, Vec<u8>)> {
        self.attachments().working_file(turn_id, path).await
    }

    // Following events live.
    /// Follows a conversation's or a session's events after event id `after_id` (0: from the
    /// beginning), never a gap or a duplicate; unknown is `not_found` (see `Feed::follow`).
    pub async fn follow(&self, scope: Scope, after_id: i64) -> Result<Follower> {
        self.feed().follow(scope, after_id).await
    }

    /// Follows from now on: what committed before the call is not delivered.
    pub async fn follow_from_now(&self, scope: Scope) -> Result<Follower> {
        self.feed().follow_from_now(scope).await
    }

    // The node: the cluster, configuration, figures, shutdown.
    /// Registers this node (reached at `addr`) in the node registry; its lease and
    /// presence hold until [`Membership::leave`](crate::Membership::leave).
    pub async fn join_cluster(&self, addr: String) -> Result<crate::Membership> {
        self.placement().join(addr).await
    }

    /// Follows the other nodes' commits (`None` on SQLite): keep the handle while serving.
    pub async fn follow_other_nodes(&self) -> Result<Option<tether_store::TailHandle>> {
        self.placement().follow_other_nodes().await
    }

    /// The nodes, their leases and live conversations, and the channel leaders.
    pub async fn cluster_view(&self) -> Result<tether_proto::ClusterView> {
        self.placement().view().await
    }

    /// The live pool's state.
    pub fn pool_status(&self) -> crate::PoolStatus {
        let mut status = self.ctx().pool.status();
        status.spares = self.ctx().spares.views();
        status
    }

    /// Names of the configured agents.
    pub fn agent_names(&self) -> Vec<String> {
        self.ctx().config.agents.keys().cloned().collect()
    }

    /// Where conversations may work: the workspace roots and the default folder.
    pub fn workspace(&self) -> tether_proto::Workspace {
        crate::cwd::workspace(&self.ctx().config)
    }

    /// What this node's runtime is doing (`GET /api/v1/runtime`).
    pub fn figures(&self) -> tether_proto::RuntimeFigures {
        let (streamed_events, streamed_batches) = self.ctx().streamed.get();
        let (tailed_events, tail_notices) = self.feed().tail_figures();
        tether_proto::RuntimeFigures {
            routing_locks: self.router().locks_held(),
            streamed_events,
            streamed_batches,
            actors: self.router().actors_running(),
            followed_conversations: self.feed().followed_conversations(),
            event_commits: self.feed().event_commits(),
            tailed_events,
            tail_notices,
            fenced_writes: self.ctx().store.fenced_writes(),
        }
    }

    /// Store calls (database round trips) made since start-up.
    pub fn store_calls(&self) -> u64 {
        self.ctx().store.calls()
    }

    /// The daemon begins to shut down: waits of `get_delegation_status` end now. Idempotent.
    pub fn begin_shutdown(&self) {
        self.delegations().begin_shutdown()
    }

    /// Stops every live session (processes ended and reaped); running turns end `interrupted`.
    pub async fn shutdown(&self) {
        self.begin_shutdown();
        let handles = self.router().close_actors();
        let all = futures::future::join_all(handles.iter().map(ActorHandle::shutdown)).await;
        if all.iter().any(Result::is_err) {
            tracing::warn!("some sessions did not shut down in time");
        }
        // The sessions left their shared processes: end those now, not after their idle
        // time.
        self.ctx().pool.end_processes().await;
        self.ctx().spares.shutdown().await;
    }
}
