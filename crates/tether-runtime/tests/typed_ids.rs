//! The runtime's and the store's public API take tether's newtype ids, each where it is
//! meant (issue 11): a session id cannot be passed where a conversation id is meant.
//!
//! These checks are made by the compiler: each `takes_*` call compiles only if the
//! function's id parameter is exactly `&` that id type (a function item is matched on its
//! exact signature; no deref coercion applies, so a `&str` parameter would not match),
//! and each `let _: T = …` only if the field has that type. With `String`/`&str` ids this
//! file did not compile. The id types do not convert into each other implicitly (no
//! `Deref`/`From` between them), so an exact `&ConversationId` parameter refuses a
//! `&SessionId`.

use tether_proto::{
    ApprovalId, Continuation, ConversationId, EventPayload, QuestionId, SendMessage, SessionId,
    StatusArgs, TaskArgs, TaskClosed, TaskId, TaskRef, TaskSnapshot, TaskStarted, TurnId,
};
use tether_runtime::{Caller, Runtime, Scope};
use tether_store::{
    ChannelChat, ConversationRow, Conversations, Delegation, DelegationRow, DelegationTurnRow,
    Events, LedgerEntry, ListCursor, NewApproval, NewDelegation, NewDelegationTurn, NewQuestion,
    NewSession, NewTurn, RecoveredConversation, Requests,
};

/// `f(&receiver, &id)`: compiles only if the id parameter is `&A`.
fn takes_1<R: 'static, A: 'static, F, Fut>(_: F)
where
    F: FnOnce(&'static R, &'static A) -> Fut,
{
}

/// `f(&receiver, &id, b, c)`.
fn takes_3<R: 'static, A: 'static, B, C, F, Fut>(_: F)
where
    F: FnOnce(&'static R, &'static A, B, C) -> Fut,
{
}

/// `f(&receiver, b, &id, …)`: the id second.
fn takes_second_of_2<R: 'static, A: 'static, B, F, Fut>(_: F)
where
    F: FnOnce(&'static R, B, &'static A) -> Fut,
{
}

fn takes_second_of_3<R: 'static, A: 'static, B, C, F, Fut>(_: F)
where
    F: FnOnce(&'static R, B, &'static A, C) -> Fut,
{
}

/// The same for a method of a store handle (`Conversations`, `Events`, …), which takes
/// its receiver, a `Copy` view of the store, by value: `f(handle, &id)`.
fn handle_takes_1<H, A: 'static, F, Fut>(_: F)
where
    F: FnOnce(H, &'static A) -> Fut,
{
}

/// `f(handle, Option<&id>)`.
fn handle_takes_opt<H, A: 'static, F, Fut>(_: F)
where
    F: FnOnce(H, Option<&'static A>) -> Fut,
{
}

/// `f(handle, &id, b)`.
fn handle_takes_2<H, A: 'static, B, F, Fut>(_: F)
where
    F: FnOnce(H, &'static A, B) -> Fut,
{
}

/// `f(handle, &id, b, c)`.
fn handle_takes_3<H, A: 'static, B, C, F, Fut>(_: F)
where
    F: FnOnce(H, &'static A, B, C) -> Fut,
{
}

#[test]
fn the_store_takes_each_id_where_it_is_meant() {
    handle_takes_1::<Conversations<'static>, ConversationId, _, _>(Conversations::get_conversation);
    handle_takes_1::<Conversations<'static>, ConversationId, _, _>(Conversations::list_sessions);
    handle_takes_1::<Conversations<'static>, ConversationId, _, _>(Conversations::open_turns);
    handle_takes_1::<Delegation<'static>, ConversationId, _, _>(Delegation::children_of);
    handle_takes_opt::<Delegation<'static>, ConversationId, _, _>(Delegation::running_children);
    handle_takes_3::<Events<'static>, ConversationId, i64, u32, _, _>(Events::conversation_events);
    handle_takes_3::<Events<'static>, ConversationId, i64, u32, _, _>(Events::history);
    handle_takes_3::<Conversations<'static>, ConversationId, Option<i64>, u32, _, _>(
        Conversations::conversation_events_before,
    );
    handle_takes_1::<Conversations<'static>, SessionId, _, _>(Conversations::get_session);
    handle_takes_3::<Conversations<'static>, SessionId, Option<tether_store::TurnPlace>, u32, _, _>(
        Conversations::session_turns,
    );
    handle_takes_3::<Events<'static>, SessionId, i64, u32, _, _>(Events::session_events);
    handle_takes_1::<Conversations<'static>, TurnId, _, _>(Conversations::get_turn);
    handle_takes_2::<Conversations<'static>, TurnId, Option<&'static str>, _, _>(
        Conversations::start_turn,
    );
    handle_takes_1::<Delegation<'static>, TurnId, _, _>(Delegation::delegation_turn);
    handle_takes_1::<Delegation<'static>, TurnId, _, _>(Delegation::open_turns_started_in);
    handle_takes_2::<Delegation<'static>, TurnId, &'static EventPayload, _, _>(
        Delegation::report_delegation_turn,
    );
    handle_takes_1::<Requests<'static>, ApprovalId, _, _>(Requests::get_approval);
    handle_takes_1::<Requests<'static>, QuestionId, _, _>(Requests::get_question);
    handle_takes_1::<Delegation<'static>, TaskId, _, _>(Delegation::get_delegation);
    handle_takes_1::<Delegation<'static>, TaskId, _, _>(Delegation::latest_delegation_turn);
}

#[test]
fn the_runtime_takes_each_id_where_it_is_meant() {
    takes_1::<Runtime, ConversationId, _, _>(Runtime::get_conversation);
    takes_1::<Runtime, ConversationId, _, _>(Runtime::new_session);
    takes_1::<Runtime, ConversationId, _, _>(Runtime::detach);
    takes_1::<Runtime, ConversationId, _, _>(Runtime::stop);
    takes_1::<Runtime, ConversationId, _, _>(Runtime::delegations_of);
    takes_3::<Runtime, ConversationId, SendMessage, &'static str, _, _>(Runtime::send_message);
    takes_3::<Runtime, ConversationId, Option<i64>, u32, _, _>(Runtime::history);
    takes_1::<Runtime, SessionId, _, _>(Runtime::get_session);
    takes_3::<Runtime, SessionId, Option<&'static str>, u32, _, _>(Runtime::session_turns);
    takes_1::<Runtime, TaskId, _, _>(Runtime::continuation);
    takes_second_of_2::<Runtime, TaskId, &'static Caller, _, _>(Runtime::cancel_task);
    takes_second_of_2::<Runtime, TaskId, &'static Caller, _, _>(Runtime::task_snapshot);
    takes_second_of_3::<Runtime, TaskId, &'static Caller, &'static str, _, _>(Runtime::close_task);
}

#[test]
fn an_answer_names_its_request_by_its_own_id_type() {
    fn approval<F, Fut>(_: F)
    where
        F: FnOnce(
            &'static Runtime,
            &'static ApprovalId,
            tether_proto::Decision,
            &'static str,
        ) -> Fut,
    {
    }
    fn question<F, Fut>(_: F)
    where
        F: FnOnce(&'static Runtime, &'static QuestionId, &'static str, &'static str) -> Fut,
    {
    }
    approval(Runtime::answer_approval);
    question(Runtime::answer_question);
}

/// `tether_core::pick_approval`: picks among approval ids and returns the one it picked.
type PickApproval = fn(
    &[ApprovalId],
    &[(ApprovalId, tether_proto::ApprovalStatus)],
    Option<&str>,
) -> Result<ApprovalId, tether_core::ResolveError>;

/// The rows, the feed's scopes and the delegation wire types carry typed ids.
#[allow(dead_code)]
fn rows_and_wire_types(
    c: ConversationRow,
    d: DelegationRow,
    dt: DelegationTurnRow,
    chat: ChannelChat,
    cursor: ListCursor,
    ledger: LedgerEntry,
    rc: RecoveredConversation,
) {
    let _: ConversationId = c.id;
    let _: Option<SessionId> = c.bound_session_id;
    let _: Option<ConversationId> = c.parent_conversation_id;
    let _: TaskId = d.task_id;
    let _: Option<ConversationId> = d.parent_conversation_id;
    let _: Option<SessionId> = d.parent_session_id;
    let _: Option<TurnId> = d.parent_turn_id;
    let _: SessionId = d.session_id;
    let _: (TaskId, TurnId, Option<TurnId>) = (dt.task_id, dt.turn_id, dt.parent_turn_id);
    let _: ConversationId = chat.conversation_id;
    let _: ConversationId = cursor.id;
    let _: TaskId = ledger.task_id;
    let _: (ConversationId, SessionId) = (rc.conversation_id, rc.session_id);
    let _ = |s: NewSession| -> (SessionId, ConversationId) { (s.id, s.conversation_id) };
    let _ = |t: NewTurn| -> (TurnId, SessionId, ConversationId) {
        (t.id, t.session_id, t.conversation_id)
    };
    let _ = |a: NewApproval| -> (ApprovalId, ConversationId, SessionId, TurnId) {
        (a.id, a.conversation_id, a.session_id, a.turn_id)
    };
    let _ = |q: NewQuestion| -> (QuestionId, ConversationId, SessionId, TurnId) {
        (q.id, q.conversation_id, q.session_id, q.turn_id)
    };
    let _ =
        |n: NewDelegation| -> (TaskId, SessionId, TurnId) { (n.task_id, n.session_id, n.turn_id) };
    let _ = |n: NewDelegationTurn| -> (TaskId, SessionId, TurnId) {
        (n.task_id, n.session_id, n.turn_id)
    };
    let _ = |b: tether_core::BoundSession| -> SessionId { b.session_id };
    let _ = |r: tether_core::SessionRow| -> SessionId { r.id };
    let _ = |v: tether_core::StatusView| -> (Option<SessionId>, Vec<ApprovalId>, Vec<QuestionId>) {
        (v.session_id, v.pending_approvals, v.pending_questions)
    };
    let _: PickApproval = tether_core::pick_approval;
    let _ = Scope::Conversation(ConversationId::from("c"));
    let _ = Scope::Session(SessionId::from("s"));
    let _ = |t: TaskSnapshot| -> (TaskId, Option<TurnId>) { (t.task_id, t.turn_id) };
    let _ = |t: TaskStarted| -> (TaskId, TurnId) { (t.task_id, t.turn_id) };
    let _ = |t: TaskClosed| -> TaskId { t.task_id };
    let _ = |c: Continuation| -> (
        TaskId,
        Option<ConversationId>,
        Option<SessionId>,
        Option<TurnId>,
    ) {
        (
            c.task_id,
            c.parent_conversation_id,
            c.parent_session_id,
            c.parent_turn_id,
        )
    };
    let _ = |a: StatusArgs| -> Vec<TaskId> { a.task_ids };
    let _ = |a: TaskRef| -> TaskId { a.task_id };
    let _ = |a: TaskArgs<tether_proto::CloseRequest>| -> TaskId { a.task_id };
    let _ = |p: EventPayload| -> Option<(TaskId, TurnId)> {
        match p {
            EventPayload::DelegationCompleted {
                task_id, turn_id, ..
            }
            | EventPayload::DelegationSessionUpdate {
                task_id, turn_id, ..
            } => Some((task_id, turn_id)),
            _ => None,
        }
    };
}

#[test]
fn a_task_is_its_child_conversation() {
    let task = TaskId::from("t1");
    let conv: ConversationId = task.conversation_id();
    assert_eq!(conv, "t1");
    assert_eq!(TaskId::of_conversation(&conv), task);
}
