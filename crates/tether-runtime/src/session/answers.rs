//! Answers to approvals and questions. The store is the arbiter: a conditional update
//! lets exactly one answer (or the expiry) win; the actor is told afterwards.

use tether_agents::PermissionReply;
use tether_core::approval::{self as rules, resolve_approval, resolve_question};
use tether_core::{RequestKind, expired_notice, left_session_notice};
use tether_proto::{
    Approval, ApprovalId, ApprovalStatus, ConversationId, Decision, MessageRole, Question,
    QuestionId, QuestionStatus, SessionId, TurnId,
};

use crate::RuntimeError;
use crate::ctx::Ctx;
use crate::session::command::{Delivery, Pending};
use crate::session::mailbox::ActorHandle;

/// Resolves an approval with a person's decision; a second answer gets
/// `approval_already_resolved`.
pub(crate) async fn answer_approval(
    ctx: &Ctx,
    actor: Option<&ActorHandle>,
    id: &ApprovalId,
    decision: Decision,
    by: &str,
) -> Result<Approval, RuntimeError> {
    let current = ctx
        .store
        .requests()
        .get_approval(id)
        .await?
        .ok_or_else(|| RuntimeError::NotFound {
            what: "approval",
            id: id.to_string(),
        })?;
    let status = resolve_approval(current.status, decision)?;
    if !current.options.contains(&decision) {
        let offered: Vec<&str> = current.options.iter().map(|d| d.as_str()).collect();
        return Err(RuntimeError::BadRequest(format!(
            "the agent does not offer {decision} for this approval; it offers: {}",
            offered.join(", ")
        )));
    }
    let Some((approval, _)) = ctx
        .store
        .requests()
        .resolve_approval(id, status, Some(by))
        .await?
    else {
        let now = ctx
            .store
            .requests()
            .get_approval(id)
            .await?
            .map(|a| a.status)
            .unwrap_or(current.status);
        return Err(tether_core::approval::ResolveError::AlreadyResolved { status: now }.into());
    };
    crate::metrics::decided("approval", ctx.clock.now_ms() - approval.created_at_ms);
    if let Some(actor) = actor {
        actor
            .deliver(Delivery::Approval {
                approval_id: id.clone(),
                reply: PermissionReply::Decision(decision),
            })
            .await;
    }
    Ok(approval)
}

/// Answers a question; a second answer gets `question_already_resolved`.
pub(crate) async fn answer_question(
    ctx: &Ctx,
    actor: Option<&ActorHandle>,
    id: &QuestionId,
    answer: &str,
    by: &str,
) -> Result<Question, RuntimeError> {
    let current = ctx
        .store
        .requests()
        .get_question(id)
        .await?
        .ok_or_else(|| RuntimeError::NotFound {
            what: "question",
            id: id.to_string(),
        })?;
    resolve_question(current.status)?;
    let resolved = ctx
        .store
        .requests()
        .resolve_question(id, QuestionStatus::Answered, Some(answer), Some(by))
        .await?;
    let Some((question, _)) = resolved else {
        let now = ctx
            .store
            .requests()
            .get_question(id)
            .await?
            .map(|q| q.status)
            .unwrap_or(current.status);
        return Err(
            tether_core::approval::ResolveError::QuestionAlreadyResolved { status: now }.into(),
        );
    };
    crate::metrics::decided("question", ctx.clock.now_ms() - question.created_at_ms);
    if let Some(actor) = actor {
        actor
            .deliver(Delivery::Answer {
                question_id: id.clone(),
                answer: Some(answer.to_string()),
            })
            .await;
    }
    Ok(question)
}

/// Fail closed: a request nobody may answer any more is a denial where the agent offers
/// one (a bare "cancelled" would read as the person stopping the turn).
fn fail_closed(approval: &Approval) -> (PermissionReply, &'static str) {
    if approval.options.contains(&Decision::Deny) {
        (PermissionReply::Decision(Decision::Deny), "denied")
    } else {
        (PermissionReply::Cancelled, "cancelled")
    }
}

/// Puts a status line about a request in the history (on the request's session and turn).
async fn note(
    ctx: &Ctx,
    conversation_id: &ConversationId,
    session_id: &SessionId,
    turn_id: &TurnId,
    text: &str,
) {
    match ctx
        .store
        .events()
        .add_message(
            conversation_id,
            MessageRole::Status,
            text,
            Some(session_id),
            Some(turn_id),
        )
        .await
    {
        Ok(_) => {}
        Err(e) => tracing::error!(error = %e, "cannot record a status line"),
    }
}

/// The deadline passed: expire the request if nobody answered it, say so in the history,
/// and tell the agent.
pub(crate) async fn expire(ctx: &Ctx, pending: &Pending, actor: Option<&ActorHandle>) {
    let now = ctx.clock.now_ms();
    match pending {
        Pending::Approval(id) => {
            // The core decides whether it expires now (still pending, deadline reached);
            // the store's conditional update then lets only one of expiry and answer win.
            let current = ctx.store.requests().get_approval(id).await;
            let Some(status) = due(current, "approval", |a| {
                rules::expire(a.status, now, a.deadline_ms)
            }) else {
                return;
            };
            match ctx
                .store
                .requests()
                .resolve_approval(id, status, None)
                .await
            {
                Ok(Some((approval, _))) => {
                    let (reply, outcome) = fail_closed(&approval);
                    let text = expired_notice(
                        RequestKind::Approval,
                        &approval.id,
                        &approval.title,
                        approval.created_at_ms,
                        now,
                        outcome,
                    );
                    note(
                        ctx,
                        &approval.conversation_id,
                        &approval.session_id,
                        &approval.turn_id,
                        &text,
                    )
                    .await;
                    if let Some(actor) = actor {
                        actor
                            .deliver(Delivery::Approval {
                                approval_id: id.clone(),
                                reply,
                            })
                            .await;
                    }
                }
                Ok(None) => {}
                Err(e) => tracing::error!(error = %e, "cannot expire approval"),
            }
        }
        Pending::Question(id) => {
            let current = ctx.store.requests().get_question(id).await;
            let Some(status) = due(current, "question", |q| {
                rules::expire_question(q.status, now, q.deadline_ms)
            }) else {
                return;
            };
            match ctx
                .store
                .requests()
                .resolve_question(id, status, None, None)
                .await
            {
                Ok(Some((question, _))) => {
                    let text = expired_notice(
                        RequestKind::Question,
                        &question.id,
                        &question.prompt,
                        question.created_at_ms,
                        now,
                        "the agent was told there is no answer",
                    );
                    note(
                        ctx,
                        &question.conversation_id,
                        &question.session_id,
                        &question.turn_id,
                        &text,
                    )
                    .await;
                    if let Some(actor) = actor {
                        actor
                            .deliver(Delivery::Answer {
                                question_id: id.clone(),
                                answer: None,
                            })
                            .await;
                    }
                }
                Ok(None) => {}
                Err(e) => tracing::error!(error = %e, "cannot expire question"),
            }
        }
    }
}

/// The status an expiring request takes now, if any (`None` also when it cannot be read,
/// logged: it stays pending and recovery expires it at the latest).
fn due<T, S>(
    row: Result<Option<T>, tether_store::StoreError>,
    what: &str,
    decide: impl FnOnce(&T) -> Option<S>,
) -> Option<S> {
    match row {
        Ok(row) => row.as_ref().and_then(decide),
        Err(e) => {
            tracing::error!(error = %e, what, "cannot read an expiring request");
            None
        }
    }
}

/// The conversation left `session_id` (`/new`, `/detach`, drift): the session's pending
/// approvals and questions are cancelled (fail closed), each with a status line, so
/// nothing waits on a person who can no longer answer from the conversation.
pub(crate) async fn cancel_left_requests(
    ctx: &Ctx,
    conversation_id: &ConversationId,
    session_id: &SessionId,
) -> Result<Vec<Delivery>, RuntimeError> {
    let mut deliveries = Vec::new();
    let approvals = ctx
        .store
        .requests()
        .list_approvals(Some(ApprovalStatus::Pending), Some(conversation_id))
        .await?;
    for a in approvals.iter().filter(|a| a.session_id == *session_id) {
        let Some((approval, _)) = ctx
            .store
            .requests()
            .resolve_approval(&a.id, ApprovalStatus::Cancelled, None)
            .await?
        else {
            continue; // answered or expired meanwhile
        };
        let (reply, outcome) = fail_closed(&approval);
        let text = left_session_notice(
            RequestKind::Approval,
            &approval.id,
            &approval.title,
            outcome,
        );
        note(ctx, conversation_id, session_id, &approval.turn_id, &text).await;
        deliveries.push(Delivery::Approval {
            approval_id: approval.id,
            reply,
        });
    }
    let questions = ctx
        .store
        .requests()
        .list_questions(Some(QuestionStatus::Pending), Some(conversation_id))
        .await?;
    for q in questions.iter().filter(|q| q.session_id == *session_id) {
        let Some((question, _)) = ctx
            .store
            .requests()
            .resolve_question(&q.id, QuestionStatus::Cancelled, None, None)
            .await?
        else {
            continue;
        };
        let text = left_session_notice(
            RequestKind::Question,
            &question.id,
            &question.prompt,
            "the agent was told there is no answer",
        );
        note(ctx, conversation_id, session_id, &question.turn_id, &text).await;
        deliveries.push(Delivery::Answer {
            question_id: question.id,
            answer: None,
        });
    }
    Ok(deliveries)
}
