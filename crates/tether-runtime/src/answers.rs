//! Answers to approvals and questions. The store is the arbiter: a conditional update
//! lets exactly one answer (or the expiry) win; the actor is told afterwards.

use tether_agents::PermissionReply;
use tether_core::approval::{resolve_approval, resolve_question};
use tether_proto::{Approval, ApprovalStatus, Decision, Question, QuestionStatus};
use tokio::sync::mpsc;

use crate::RuntimeError;
use crate::actor::{ActorCmd, Pending};
use crate::ctx::Ctx;

/// Resolves an approval with a person's decision; a second answer gets
/// `approval_already_resolved`.
pub(crate) async fn answer_approval(
    ctx: &Ctx,
    actor: Option<&mpsc::UnboundedSender<ActorCmd>>,
    id: &str,
    decision: Decision,
    by: &str,
) -> Result<Approval, RuntimeError> {
    let current = ctx
        .store
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
    let Some((approval, ev)) = ctx.store.resolve_approval(id, status, Some(by)).await? else {
        let now = ctx
            .store
            .get_approval(id)
            .await?
            .map(|a| a.status)
            .unwrap_or(current.status);
        return Err(tether_core::approval::ResolveError::AlreadyResolved { status: now }.into());
    };
    ctx.publish([ev]);
    if let Some(actor) = actor {
        let _ = actor.send(ActorCmd::DeliverApproval {
            approval_id: id.to_string(),
            reply: PermissionReply::Decision(decision),
        });
    }
    Ok(approval)
}

/// Answers a question; a second answer gets `question_already_resolved`.
pub(crate) async fn answer_question(
    ctx: &Ctx,
    actor: Option<&mpsc::UnboundedSender<ActorCmd>>,
    id: &str,
    answer: &str,
    by: &str,
) -> Result<Question, RuntimeError> {
    let current = ctx
        .store
        .get_question(id)
        .await?
        .ok_or_else(|| RuntimeError::NotFound {
            what: "question",
            id: id.to_string(),
        })?;
    resolve_question(current.status)?;
    let resolved = ctx
        .store
        .resolve_question(id, QuestionStatus::Answered, Some(answer), Some(by))
        .await?;
    let Some((question, ev)) = resolved else {
        let now = ctx
            .store
            .get_question(id)
            .await?
            .map(|q| q.status)
            .unwrap_or(current.status);
        return Err(
            tether_core::approval::ResolveError::QuestionAlreadyResolved { status: now }.into(),
        );
    };
    ctx.publish([ev]);
    if let Some(actor) = actor {
        let _ = actor.send(ActorCmd::DeliverAnswer {
            question_id: id.to_string(),
            answer: Some(answer.to_string()),
        });
    }
    Ok(question)
}

/// The deadline passed: expire the request if nobody answered it, and tell the agent.
pub(crate) async fn expire(
    ctx: &Ctx,
    pending: &Pending,
    actor: Option<&mpsc::UnboundedSender<ActorCmd>>,
) {
    match pending {
        Pending::Approval(id) => {
            match ctx
                .store
                .resolve_approval(id, ApprovalStatus::Expired, None)
                .await
            {
                Ok(Some((approval, ev))) => {
                    ctx.publish([ev]);
                    // Fail closed: an expired approval is a denial where the agent offers
                    // one (a bare "cancelled" would read as the person stopping the turn).
                    let reply = if approval.options.contains(&Decision::Deny) {
                        PermissionReply::Decision(Decision::Deny)
                    } else {
                        PermissionReply::Cancelled
                    };
                    if let Some(actor) = actor {
                        let _ = actor.send(ActorCmd::DeliverApproval {
                            approval_id: id.clone(),
                            reply,
                        });
                    }
                }
                Ok(None) => {}
                Err(e) => tracing::error!(error = %e, "cannot expire approval"),
            }
        }
        Pending::Question(id) => {
            match ctx
                .store
                .resolve_question(id, QuestionStatus::Expired, None, None)
                .await
            {
                Ok(Some((_, ev))) => {
                    ctx.publish([ev]);
                    if let Some(actor) = actor {
                        let _ = actor.send(ActorCmd::DeliverAnswer {
                            question_id: id.clone(),
                            answer: None,
                        });
                    }
                }
                Ok(None) => {}
                Err(e) => tracing::error!(error = %e, "cannot expire question"),
            }
        }
    }
}
