//! The audit log (issue 28): security-relevant actions appended as they happen (token
//! made or revoked, people added or changed, approvals decided, questions answered,
//! conversations archived or shared, pairings approved, credentials refused), read by
//! admins through [`People::audit`]. Writing an entry never undoes or fails the action
//! it records: a store that cannot take it is logged as an error.

use tether_core::authz::Action;
use tether_proto::{AuditAction, AuditEntry};
use tether_store::NewAudit;

use crate::call::{Command, Identity};
use crate::error::Result;
use crate::people::People;

/// The longest page of the audit log.
pub const MAX_AUDIT_PAGE: u32 = 500;

impl People<'_> {
    /// Appends an entry: `action` by `who` (named `by`, as history names them) on
    /// `target`.
    pub async fn record(
        &self,
        who: Option<&Identity>,
        by: &str,
        action: AuditAction,
        target: Option<&str>,
        detail: Option<String>,
    ) {
        let who = who.or(self.rt.who.as_deref());
        let entry = NewAudit {
            action,
            person_id: who.map(|w| w.person.clone()),
            by: if by.is_empty() {
                who.map_or_else(|| "tether".to_owned(), |w| w.name.clone())
            } else {
                by.to_owned()
            },
            target: target.map(str::to_owned),
            detail,
        };
        if let Err(e) = self.rt.ctx().store.people().record_audit(&entry).await {
            tracing::error!(
                action = action.as_str(),
                "the audit log did not take an entry: {e}"
            );
        }
    }

    /// Up to `limit` entries (at most [`MAX_AUDIT_PAGE`]) older than entry `before`,
    /// newest first (admins).
    pub async fn audit(&self, before: Option<i64>, limit: u32) -> Result<Vec<AuditEntry>> {
        self.may(&self.actor(), Action::ReadAudit)?;
        let limit = limit.clamp(1, MAX_AUDIT_PAGE);
        Ok(self
            .rt
            .ctx()
            .store
            .people()
            .audit_page(before, limit)
            .await?)
    }
}

/// The entry a command makes once it succeeded: (action, target, detail).
pub(crate) fn of_command(cmd: &Command) -> Option<(AuditAction, String, Option<String>)> {
    match cmd {
        Command::AnswerApproval {
            approval_id,
            decision,
        } => Some((
            AuditAction::ApprovalDecided,
            approval_id.to_string(),
            Some(decision.as_str().to_owned()),
        )),
        Command::AnswerQuestion { question_id, .. } => {
            Some((AuditAction::QuestionAnswered, question_id.to_string(), None))
        }
        Command::UpdateConversation {
            conversation_id,
            update,
        } => {
            if let Some(archived) = update.archived {
                let detail = if archived { "archived" } else { "unarchived" };
                Some((
                    AuditAction::ConversationArchived,
                    conversation_id.to_string(),
                    Some(detail.to_owned()),
                ))
            } else {
                update.visibility.map(|v| {
                    (
                        AuditAction::VisibilityChanged,
                        conversation_id.to_string(),
                        Some(v.as_str().to_owned()),
                    )
                })
            }
        }
        Command::CreateConversation { .. }
        | Command::SendMessage { .. }
        | Command::NewSession { .. }
        | Command::Detach { .. }
        | Command::Stop { .. }
        | Command::Delegate { .. }
        | Command::ContinueTask { .. }
        | Command::CloseTask { .. }
        | Command::CancelTask { .. }
        | Command::StartTask { .. }
        | Command::EvictIdle { .. }
        | Command::ReportTurn { .. } => None,
    }
}
