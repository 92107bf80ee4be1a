//! Start-up recovery (architecture.md §6), in one transaction: open turns → `interrupted`, pending
//! approvals and questions → `expired` (fail closed), live sessions → dormant, bindings
//! kept, and one status message per affected conversation.

use std::collections::BTreeMap;

use tether_proto::{
    ApprovalStatus, ConversationId, EventPayload, MessageRole, QuestionStatus, SessionId, TurnId,
};

use super::events::add_message;

use super::Db;
use crate::{RecoveredConversation, RecoveryReport, Result, rules};

impl Db {
    /// Runs recovery over the whole store (one node: a restart); `notice` writes the
    /// status message for one conversation.
    pub async fn recover(
        &self,
        notice: impl Fn(&RecoveredConversation) -> String,
    ) -> Result<RecoveryReport> {
        self.recover_scoped(None, &notice).await
    }

    /// Runs recovery for conversation `id` only (a cluster: a conversation whose owner
    /// died or restarted, taken over by this node, whose epoch fences the transaction).
    pub async fn recover_conversation(
        &self,
        id: &ConversationId,
        notice: impl Fn(&RecoveredConversation) -> String,
    ) -> Result<RecoveryReport> {
        self.recover_scoped(Some(id), &notice).await
    }

    async fn recover_scoped(
        &self,
        scope: Option<&ConversationId>,
        notice: &impl Fn(&RecoveredConversation) -> String,
    ) -> Result<RecoveryReport> {
        // One conversation: every step is limited to it (`$2`).
        let only = if scope.is_some() {
            " AND conversation_id = $2"
        } else {
            ""
        };
        let mut tx = self.writer.begin().await?;
        if let Some(id) = scope {
            // Fenced even if nothing needs recovering: a stale take-over writes nothing.
            tx.note_on_behalf(id);
            if let Some(set) = super::dialect::RECOVERY_LOCK_TIMEOUT {
                sqlx::query(set).execute(&mut *tx).await?;
            }
        }
        let mut report = RecoveryReport::default();
        let mut per: BTreeMap<ConversationId, RecoveredConversation> = BTreeMap::new();

        // Each step: one conditional UPDATE … RETURNING (id, session, conversation, turn),
        // one event per row, one count per conversation.
        // Which rows each step changes is the core's recovery rule (see `rules`).
        let steps: [(String, Kind); 3] = [
            (
                format!(
                    "UPDATE turns SET status = 'interrupted', ended_at = $1, \
                     error_code = 'interrupted', \
                     error_message = 'tether restarted while the turn was running' \
                     WHERE status IN {}{only} RETURNING id, session_id, conversation_id, id",
                    rules::turns_recovery_interrupts()
                ),
                Kind::Turn,
            ),
            (
                format!(
                    "UPDATE approvals SET status = 'expired', resolved_at = $1 WHERE status IN {}{only} \
                     RETURNING id, session_id, conversation_id, turn_id",
                    rules::approvals_recovery_expires()
                ),
                Kind::Approval,
            ),
            (
                format!(
                    "UPDATE questions SET status = 'expired', resolved_at = $1 WHERE status IN {}{only} \
                     RETURNING id, session_id, conversation_id, turn_id",
                    rules::questions_recovery_expires()
                ),
                Kind::Question,
            ),
        ];
        for (sql, kind) in steps {
            let mut q = sqlx::query_as(&sql).bind(self.now_ms());
            if let Some(id) = scope {
                q = q.bind(id.as_str());
            }
            let rows: Vec<(String, String, String, String)> = q.fetch_all(&mut *tx).await?;
            for (id, session_id, conversation_id, turn_id) in rows {
                let (session_id, conversation_id, turn_id) = (
                    SessionId::from(session_id),
                    ConversationId::from(conversation_id),
                    TurnId::from(turn_id),
                );
                let ev = kind.event(id);
                report
                    .events
                    .push(self.append_in(&mut tx, &session_id, Some(&turn_id), &ev).await?);
                let e =
                    per.entry(conversation_id.clone())
                        .or_insert_with(|| RecoveredConversation {
                            conversation_id,
                            session_id,
                            ..Default::default()
                        });
                match kind {
                    Kind::Turn => e.interrupted_turns += 1,
                    Kind::Approval => e.expired_approvals += 1,
                    Kind::Question => e.expired_questions += 1,
                }
            }
        }

        let only = if scope.is_some() {
            " AND conversation_id = $1"
        } else {
            ""
        };
        let sql = format!(
            "UPDATE sessions SET status = 'dormant' WHERE status IN {}{only}",
            rules::sessions_recovery_makes_dormant()
        );
        let mut q = sqlx::query(&sql);
        if let Some(id) = scope {
            q = q.bind(id.as_str());
        }
        let res = q.execute(&mut *tx).await?;
        report.sessions_made_dormant = res.rows_affected() as usize;

        for rc in per.into_values() {
            // Attach the notice to the bound session when there is one.
            let bound: Option<(Option<String>,)> =
                sqlx::query_as("SELECT bound_session_id FROM conversations WHERE id = $1")
                    .bind(rc.conversation_id.as_str())
                    .fetch_optional(&mut *tx)
                    .await?;
            let session_id = bound
                .and_then(|b| b.0)
                .map_or_else(|| rc.session_id.clone(), SessionId::from);
            let text = notice(&rc);
            add_message(
                &mut tx,
                &rc.conversation_id,
                MessageRole::Status,
                &text,
                Some(&session_id),
                None,
            )
            .await?;
            report
                .events
                .push(self.append_in(&mut tx, &session_id, None, &EventPayload::Status { text }).await?);
            report
                .conversations
                .push(RecoveredConversation { session_id, ..rc });
        }
        self.commit_events(tx, &report.events).await?;
        Ok(report)
    }
}

/// What a recovery step resolves.
#[derive(Clone, Copy)]
enum Kind {
    Turn,
    Approval,
    Question,
}

impl Kind {
    fn event(self, id: String) -> EventPayload {
        match self {
            Kind::Turn => EventPayload::TurnInterrupted {
                reason: "tether restarted".to_string(),
            },
            Kind::Approval => EventPayload::ApprovalResolved {
                approval_id: id.into(),
                status: ApprovalStatus::Expired,
                decided_by: None,
            },
            Kind::Question => EventPayload::QuestionResolved {
                question_id: id.into(),
                status: QuestionStatus::Expired,
                answer: None,
            },
        }
    }
}
