//! The store's channel, delegation, attachment and node methods, each run by the backend the
//! store opened (see `dispatch`).

use tether_proto::*;

use super::{Backend, forward};
use crate::*;

forward! {
    // channels
    /// The chat's mapping, if the chat was seen before.
    pub async fn channel_chat(&self, channel: &str, chat_key: &str) -> Result<Option<ChannelChat>>;

    /// Every chat of a channel.
    pub async fn channel_chats(&self, channel: &str) -> Result<Vec<ChannelChat>>;

    /// Points a mapped chat at another conversation (its old one was archived), with a
    /// fresh event cursor.
    pub async fn remap_channel_chat(
        &self,
        channel: &str,
        chat_key: &str,
        conversation_id: &ConversationId,
    ) -> Result<ChannelChat>;

    /// Maps a chat to a conversation, starting its event cursor at `cursor`; an existing
    /// mapping wins and is returned.
    pub async fn insert_channel_chat(
        &self,
        channel: &str,
        chat_key: &str,
        conversation_id: &ConversationId,
        address: &str,
        cursor: i64,
    ) -> Result<ChannelChat>;

    /// Inserts outbox rows (see [`NewOutbox::replace`]) and moves the chat's event
    /// cursor forward, in one transaction. Returns how many rows were written.
    pub async fn advance_channel_chat(
        &self,
        channel: &str,
        chat_key: &str,
        cursor: i64,
        items: &[NewOutbox],
    ) -> Result<usize>;

    /// Inserts outbox rows (see [`NewOutbox::replace`]). Returns how many were written.
    pub async fn enqueue_outbox(&self, items: &[NewOutbox]) -> Result<usize>;

    /// The rows at the head of their lanes (oldest pending row of each chat) that are
    /// due at `now`, oldest first.
    pub async fn due_outbox(&self, channel: &str, now: i64, limit: u32) -> Result<Vec<OutboxRow>>;

    /// When the next lane head of the channel is due, if any.
    pub async fn next_outbox_due(&self, channel: &str) -> Result<Option<i64>>;

    /// The row with that key.
    pub async fn outbox_row(&self, channel: &str, dedupe_key: &str) -> Result<Option<OutboxRow>>;

    /// Every row of a channel, oldest first (diagnostics and tests).
    pub async fn list_outbox(&self, channel: &str) -> Result<Vec<OutboxRow>>;

    /// Marks a row sent, unless its body was replaced meanwhile (then it stays pending
    /// and the new body goes out next). `remote_id` is kept when `None`.
    pub async fn mark_outbox_sent(
        &self,
        id: i64,
        version: i64,
        remote_id: Option<&str>,
    ) -> Result<()>;

    /// Records a failed attempt; the row is tried again at `next_attempt_at`.
    pub async fn mark_outbox_retry(&self, id: i64, next_attempt_at: i64, error: &str) -> Result<()>;

    /// Ends a row without delivery (`failed` or `skipped`).
    pub async fn mark_outbox_done(&self, id: i64, status: OutboxStatus, error: &str) -> Result<()>;

    // channels_inbound
    /// Records an inbound dedupe key; `false` when it was seen before.
    pub async fn remember_inbound(&self, source: &str, key: &str) -> Result<bool>;

    /// Records the dedupe key and keeps the raw update, in one transaction; `true` when
    /// the key is new (the caller then handles the update and later calls
    /// [`Store::mark_inbound_handled`]).
    pub async fn accept_inbound(&self, channel: &str, key: &str, payload: &str) -> Result<bool>;

    /// Marks an accepted update handled: it will not be replayed, and its row goes (the
    /// dedupe key stays in `inbound_dedupe` until [`Store::prune_inbound`]).
    pub async fn mark_inbound_handled(&self, channel: &str, key: &str) -> Result<()>;

    /// Forgets the dedupe keys of `source` recorded before `before_ms` (a platform that
    /// redelivers later than that is no longer recognised); returns how many went.
    pub async fn prune_inbound(&self, source: &str, before_ms: i64) -> Result<u64>;

    /// The accepted updates not yet handled, in arrival order.
    pub async fn unhandled_inbound(&self, channel: &str) -> Result<Vec<PendingInbound>>;

    // channels_pairing
    /// Whether a user was allowed by pairing.
    pub async fn channel_user_allowed(&self, channel: &str, user_id: &str) -> Result<bool>;

    /// The user's pending pairing, if any.
    pub async fn pending_pairing(&self, channel: &str, user_id: &str) -> Result<Option<Pairing>>;

    /// How many pending pairings of `channel` were created at or after `since_ms`.
    pub async fn count_pending_pairings(&self, channel: &str, since_ms: i64) -> Result<i64>;

    /// Deletes the pending pairings of `channel` created before `before_ms` (expired
    /// codes: they can no longer be approved); returns how many went.
    pub async fn prune_pairings(&self, channel: &str, before_ms: i64) -> Result<u64>;

    /// Stores a new pending pairing code unless `channel` already has `max` pending ones
    /// created at or after `fresh_since_ms` (checked in the same statement, so parallel
    /// senders cannot overshoot); `false` when full or the code is taken (tell them apart
    /// with [`Store::count_pending_pairings`]).
    pub async fn insert_pairing_capped(
        &self,
        p: &Pairing,
        fresh_since_ms: i64,
        max: i64,
    ) -> Result<bool>;

    /// Stores a new pending pairing code; `false` when the code is taken.
    pub async fn insert_pairing(&self, p: &Pairing) -> Result<bool>;

    /// Pairings, newest first, optionally only those with `status`.
    pub async fn list_pairings(&self, status: Option<&str>) -> Result<Vec<Pairing>>;

    /// The pairing with that code.
    pub async fn get_pairing(&self, code: &str) -> Result<Option<Pairing>>;

    /// Approves a pending pairing: the user is allowed from now on and `notice` (built
    /// from the pairing) is queued, in one transaction. `None` when no pending pairing
    /// has that code.
    pub async fn approve_pairing(
        &self,
        code: &str,
        by: &str,
        notice: impl FnOnce(&Pairing) -> NewOutbox,
    ) -> Result<Option<Pairing>>;

    /// A per-channel value (such as the Telegram update offset).
    pub async fn channel_state(&self, channel: &str, key: &str) -> Result<Option<String>>;

    pub async fn set_channel_state(&self, channel: &str, key: &str, value: &str) -> Result<()>;

    // delegation
    /// Creates the task in one transaction: the `delegate` conversation, its bound session
    /// (`session_started`), the first turn (queued, with the task as the user message),
    /// the task row, turn version 1, and `delegation_started` on the parent's session.
    pub async fn create_delegation(
        &self,
        d: &NewDelegation,
    ) -> Result<(Session, Vec<EventEnvelope>)>;

    /// Ids of the tasks not released yet, oldest first.
    pub async fn unreleased_delegation_ids(&self) -> Result<Vec<TaskId>>;

    pub async fn get_delegation(&self, task_id: &TaskId) -> Result<Option<DelegationRow>>;

    /// The tasks of a parent conversation, oldest first.
    pub async fn children_of(
        &self,
        parent_conversation_id: &ConversationId,
    ) -> Result<Vec<DelegationRow>>;

    /// The task's latest turn.
    pub async fn latest_delegation_turn(
        &self,
        task_id: &TaskId,
    ) -> Result<Option<DelegationTurnRow>>;

    /// The delegation turn of a runtime turn, if it is one.
    pub async fn delegation_turn(&self, turn_id: &TurnId) -> Result<Option<DelegationTurnRow>>;

    /// Delegation turns started by a parent's turn that have not ended.
    pub async fn open_turns_started_in(
        &self,
        parent_turn_id: &TurnId,
    ) -> Result<Vec<DelegationTurnRow>>;

    /// How many tasks of the parent conversation (`None`: of the external scope, the
    /// tasks no conversation started) have a turn that has not ended.
    pub async fn running_children(
        &self,
        parent_conversation_id: Option<&ConversationId>,
    ) -> Result<usize>;

    /// Adds the next turn of a task (queued, with the message in the history) and,
    /// when given, the ledger entry, in one transaction. Returns the new turn version.
    pub async fn add_delegation_turn(
        &self,
        t: &NewDelegationTurn,
        ledger_entry: Option<&LedgerEntry>,
    ) -> Result<i64>;

    // delegation_ledger
    /// The ledger entry of a continuation id in a scope.
    pub async fn ledger_entry(
        &self,
        scope: &str,
        continuation_id: &str,
    ) -> Result<Option<LedgerEntry>>;

    /// Claims a continuation id for one request, with the ledger read in the same
    /// transaction: the recorded entry, the claim, or who holds it now.
    pub async fn claim_continuation(
        &self,
        scope: &str,
        continuation_id: &str,
        node_id: &str,
        claim: &str,
    ) -> Result<ContinuationClaim>;

    /// Gives a claim back (its request failed before recording anything).
    pub async fn release_continuation(
        &self,
        scope: &str,
        continuation_id: &str,
        claim: &str,
    ) -> Result<()>;

    /// Releases a task for good: `released_at`, the session `closed`, a status message,
    /// and the ledger entry, in one transaction. `false` when it was already released.
    pub async fn release_delegation(
        &self,
        task_id: &TaskId,
        note: &str,
        ledger_entry: Option<&LedgerEntry>,
    ) -> Result<(bool, Vec<EventEnvelope>)>;

    /// Records the outcome event of a delegation turn once: on the parent's session, or
    /// on the child's own session when the task has no parent session (an external MCP
    /// client's task). `None` when it was already reported.
    pub async fn report_delegation_turn(
        &self,
        turn_id: &TurnId,
        payload: &EventPayload,
    ) -> Result<Option<EventEnvelope>>;

    /// Gives up on reporting a delegation turn: marks it handled and records why on the
    /// session its outcome would have gone to (a status event). `None` when it was
    /// already reported.
    pub async fn record_unreportable_turn(
        &self,
        turn_id: &TurnId,
        why: &str,
    ) -> Result<Option<EventEnvelope>>;

    /// Ids of the delegation turns that ended but whose outcome was not reported yet,
    /// oldest first (ids only: one unreadable row never hides the others).
    pub async fn unreported_delegation_turn_ids(&self) -> Result<Vec<TurnId>>;

    /// Delegation turns that ended but whose outcome was not reported yet.
    pub async fn unreported_delegation_turns(&self) -> Result<Vec<DelegationTurnRow>>;

    // attachments
    /// Records attachments whose bytes are stored already, all or none, in one
    /// transaction; `created_at_ms` is set here.
    pub async fn insert_attachments(&self, rows: &[Attachment]) -> Result<Vec<Attachment>>;

    pub async fn get_attachment(&self, attachment_id: &AttachmentId) -> Result<Option<Attachment>>;

    /// Gives not yet sent attachments to a turn; the number of rows claimed (an id of
    /// another conversation, unknown or sent already is not claimed).
    pub async fn claim_attachments(
        &self,
        conversation_id: &ConversationId,
        ids: &[&AttachmentId],
        turn_id: &TurnId,
    ) -> Result<u64>;

    /// Stores a history entry that carries attachments (a `/file` reply): the entry and
    /// the attachments' link to it in one transaction. Only attachments of this
    /// conversation that belong to no turn or message yet are linked. The entry's id.
    pub async fn add_message_with_attachments(
        &self,
        conversation_id: &ConversationId,
        role: tether_proto::MessageRole,
        text: &str,
        ids: &[&AttachmentId],
    ) -> Result<i64>;

    /// The attachments of these history entries, each with its entry's id, in upload
    /// order.
    pub async fn attachments_of_messages(
        &self,
        message_ids: &[i64],
    ) -> Result<Vec<(i64, Attachment)>>;

    /// Frees the attachments given to a turn that was never stored.
    pub async fn release_attachments(&self, turn_id: &TurnId) -> Result<()>;

    /// The attachments a turn's message carried, in upload order.
    pub async fn turn_attachments(&self, turn_id: &TurnId) -> Result<Vec<Attachment>>;

    /// The attachments of several turns (a history page), in upload order.
    pub async fn attachments_of_turns(&self, turn_ids: &[TurnId]) -> Result<Vec<Attachment>>;

    /// Deletes a conversation's attachment rows; the content hashes no row names any
    /// more (their blobs may be deleted).
    pub async fn delete_conversation_attachments(
        &self,
        conversation_id: &ConversationId,
    ) -> Result<Vec<String>>;

    /// The `detail` of a turn's edit tool calls (`kind = "edit"`), oldest first: where the
    /// files an agent changed are named.
    pub async fn turn_edit_details(
        &self,
        conversation_id: &ConversationId,
        turn_id: &TurnId,
    ) -> Result<Vec<serde_json::Value>>;

    /// Whether any row names this content (a blob without one may be deleted).
    pub async fn attachment_blob_used(&self, sha256: &str) -> Result<bool>;

    // nodes
    /// Registers `n` (or replaces an earlier row of the same id).
    pub async fn register_node(&self, n: &NodeRow) -> Result<()>;

    /// A heartbeat: the node's lease now runs until `lease_until_ms`. `false` when the
    /// node has no row (it was removed: it must register again).
    pub async fn renew_node_lease(
        &self,
        id: &str,
        now_ms: i64,
        lease_until_ms: i64,
    ) -> Result<bool>;

    /// Every registered node, oldest first (alive or not: see [`NodeRow::alive`]).
    pub async fn nodes(&self) -> Result<Vec<NodeRow>>;

    /// Removes a node's row (it stopped).
    pub async fn remove_node(&self, id: &str) -> Result<()>;

    // owners (issue 12; `sql/owners.rs`; the claims are in `tail`: they sync the
    // tail of other nodes' commits)
    /// The owner of conversation `id`, if it has one (released: none).
    pub async fn conversation_owner(&self, id: &ConversationId) -> Result<Option<OwnerRow>>;

    /// The conversations node `node_id` owns.
    pub async fn owned_conversations(&self, node_id: &str) -> Result<Vec<OwnerRow>>;

    /// Conversations whose owner's lease ended before `now_ms` (or whose owner has no
    /// row): what survivors take over.
    pub async fn orphaned_conversations(&self, now_ms: i64) -> Result<Vec<OwnerRow>>;

    /// How many conversations each node owns (nodes owning none are not listed).
    pub async fn owner_counts(&self) -> Result<Vec<(String, i64)>>;

    /// Gives conversation `id` up if `node_id` still owns it under `epoch`: `false` when
    /// it was not. The row stays with no node, so the next claim still raises the epoch.
    pub async fn release_conversation(
        &self,
        id: &ConversationId,
        node_id: &str,
        epoch: i64,
    ) -> Result<bool>;

    // leader leases (issue 12; `sql/leaders.rs`)
    /// Claims the lease `name` for node `node_id` at `now_ms`: this node leads under a
    /// new epoch when nobody led or the leader's node lease ended; a leader keeps its
    /// epoch; another live leader keeps the lease.
    pub async fn claim_leader(&self, name: &str, node_id: &str, now_ms: i64) -> Result<LeaderClaim>;

    /// Every lease, by name (see [`LeaderRow::alive`]).
    pub async fn leaders(&self) -> Result<Vec<LeaderRow>>;

    /// Gives the lease `name` up if `node_id` still holds it under `epoch`: `false` when
    /// it did not.
    pub async fn release_leader(&self, name: &str, node_id: &str, epoch: i64) -> Result<bool>;

    // outbox claims (issue 12; `sql/outbox_claims.rs`)
    /// Claims up to `limit` due lane heads of `channel` (the oldest pending row of each
    /// chat) for node `node_id` until `claim_until`: rows nobody else holds a live claim
    /// on. Oldest first. Marking a row (sent, retry, done) ends its claim.
    pub async fn claim_outbox(
        &self,
        channel: &str,
        node_id: &str,
        now: i64,
        claim_until: i64,
        limit: u32,
    ) -> Result<Vec<OutboxRow>>;

    /// Drops every claim `node_id` holds on `channel`'s rows (left by its previous life).
    pub async fn release_outbox_claims(&self, channel: &str, node_id: &str) -> Result<u64>;
}
