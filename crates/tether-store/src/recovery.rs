//! Start-up recovery (DESIGN §6), in one transaction: open turns → `interrupted`, pending
//! approvals and questions → `expired` (fail closed), live sessions → dormant, bindings
//! kept, and one status message per affected conversation.

use std::collections::BTreeMap;

use tether_proto::{ApprovalStatus, EventEnvelope, EventPayload, MessageRole, QuestionStatus};

use crate::events::{add_message, append};
use crate::{Result, Store};

/// What recovery did to one conversation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveredConversation {
    pub conversation_id: String,
    /// The session the notice was attached to.
    pub session_id: String,
    pub interrupted_turns: usize,
    pub expired_approvals: usize,
    pub expired_questions: usize,
}

#[derive(Debug, Clone, Default)]
pub struct RecoveryReport {
    pub conversations: Vec<RecoveredConversation>,
    pub sessions_made_dormant: usize,
    pub events: Vec<EventEnvelope>,
}

impl Store {
    /// Runs recovery; `notice` writes the status message for one conversation.
    pub async fn recover(
        &self,
        notice: impl Fn(&RecoveredConversation) -> String,
    ) -> Result<RecoveryReport> {
        let mut tx = self.writer.begin().await?;
        let mut report = RecoveryReport::default();
        let mut per: BTreeMap<String, RecoveredConversation> = BTreeMap::new();

        let turns: Vec<(String, String, String)> = sqlx::query_as(
            "UPDATE turns SET status = 'interrupted', ended_at = ?, error_code = 'interrupted', \
             error_message = 'tether restarted while the turn was running' \
             WHERE status IN ('queued', 'running', 'waiting_approval', 'waiting_user') \
             RETURNING id, session_id, conversation_id",
        )
        .bind(crate::now_ms())
        .fetch_all(&mut *tx)
        .await?;
        for (turn_id, session_id, conversation_id) in turns {
            let ev = EventPayload::TurnInterrupted {
                reason: "tether restarted".to_string(),
            };
            report
                .events
                .push(append(&mut tx, &session_id, Some(&turn_id), &ev).await?);
            let e = per
                .entry(conversation_id.clone())
                .or_insert_with(|| RecoveredConversation {
                    conversation_id,
                    session_id,
                    ..Default::default()
                });
            e.interrupted_turns += 1;
        }

        let approvals: Vec<(String, String, String, String)> = sqlx::query_as(
            "UPDATE approvals SET status = 'expired', resolved_at = ? WHERE status = 'pending' \
             RETURNING id, session_id, conversation_id, turn_id",
        )
        .bind(crate::now_ms())
        .fetch_all(&mut *tx)
        .await?;
        for (id, session_id, conversation_id, turn_id) in approvals {
            let ev = EventPayload::ApprovalResolved {
                approval_id: id,
                status: ApprovalStatus::Expired,
                decided_by: None,
            };
            report
                .events
                .push(append(&mut tx, &session_id, Some(&turn_id), &ev).await?);
            let e = per
                .entry(conversation_id.clone())
                .or_insert_with(|| RecoveredConversation {
                    conversation_id,
                    session_id,
                    ..Default::default()
                });
            e.expired_approvals += 1;
        }

        let questions: Vec<(String, String, String, String)> = sqlx::query_as(
            "UPDATE questions SET status = 'expired', resolved_at = ? WHERE status = 'pending' \
             RETURNING id, session_id, conversation_id, turn_id",
        )
        .bind(crate::now_ms())
        .fetch_all(&mut *tx)
        .await?;
        for (id, session_id, conversation_id, turn_id) in questions {
            let ev = EventPayload::QuestionResolved {
                question_id: id,
                status: QuestionStatus::Expired,
                answer: None,
            };
            report
                .events
                .push(append(&mut tx, &session_id, Some(&turn_id), &ev).await?);
            let e = per
                .entry(conversation_id.clone())
                .or_insert_with(|| RecoveredConversation {
                    conversation_id,
                    session_id,
                    ..Default::default()
                });
            e.expired_questions += 1;
        }

        let res = sqlx::query(
            "UPDATE sessions SET status = 'dormant' WHERE status IN ('live', 'starting')",
        )
        .execute(&mut *tx)
        .await?;
        report.sessions_made_dormant = res.rows_affected() as usize;

        for rc in per.into_values() {
            // Attach the notice to the bound session when there is one.
            let bound: Option<(Option<String>,)> =
                sqlx::query_as("SELECT bound_session_id FROM conversations WHERE id = ?")
                    .bind(&rc.conversation_id)
                    .fetch_optional(&mut *tx)
                    .await?;
            let session_id = bound
                .and_then(|b| b.0)
                .unwrap_or_else(|| rc.session_id.clone());
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
                .push(append(&mut tx, &session_id, None, &EventPayload::Status { text }).await?);
            report
                .conversations
                .push(RecoveredConversation { session_id, ..rc });
        }
        tx.commit().await?;
        Ok(report)
    }
}
