//! Approvals and questions: created with their event; resolved at most once (the
//! conditional update makes the first answer win).

use super::SqlConnection;
use tether_proto::{
    Approval, ApprovalId, ApprovalStatus, ConversationId, EventEnvelope, EventPayload, Question,
    QuestionId, QuestionStatus, TurnId,
};

use super::events::append;

use super::{Db, rows};
use crate::{NewApproval, NewQuestion, Result, StoreError, now_ms};

fn to_json(v: &impl serde::Serialize) -> Result<String> {
    serde_json::to_string(v).map_err(|e| StoreError::Corrupt {
        table: "approvals",
        detail: e.to_string(),
    })
}

/// Sets an open turn's status from its pending requests: approvals first, then
/// questions, else running.
pub(crate) async fn recompute_turn_status(
    conn: &mut SqlConnection,
    turn_id: &TurnId,
) -> Result<()> {
    sqlx::query(
        "UPDATE turns SET status = CASE \
           WHEN EXISTS (SELECT 1 FROM approvals WHERE turn_id = $1 AND status = 'pending') \
             THEN 'waiting_approval' \
           WHEN EXISTS (SELECT 1 FROM questions WHERE turn_id = $1 AND status = 'pending') \
             THEN 'waiting_user' \
           ELSE 'running' END \
         WHERE id = $1 AND status IN ('running', 'waiting_approval', 'waiting_user')",
    )
    .bind(turn_id.as_str())
    .execute(&mut *conn)
    .await?;
    Ok(())
}

impl Db {
    /// Inserts a pending approval, marks its turn waiting, records `approval_requested`.
    pub async fn create_approval(&self, a: &NewApproval) -> Result<EventEnvelope> {
        let mut tx = self.writer.begin().await?;
        sqlx::query(
            "INSERT INTO approvals (id, conversation_id, session_id, turn_id, title, kind, detail, \
             options, status, created_at, deadline) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'pending', $9, $10)",
        )
        .bind(a.id.as_str())
        .bind(a.conversation_id.as_str())
        .bind(a.session_id.as_str())
        .bind(a.turn_id.as_str())
        .bind(&a.title)
        .bind(&a.kind)
        .bind(a.detail.as_ref().map(|d| d.to_string()))
        .bind(to_json(&a.options)?)
        .bind(now_ms())
        .bind(a.deadline_ms)
        .execute(&mut *tx)
        .await?;
        recompute_turn_status(&mut tx, &a.turn_id).await?;
        let ev = append(
            &mut tx,
            &a.session_id,
            Some(&a.turn_id),
            &EventPayload::ApprovalRequested {
                approval_id: a.id.clone(),
                title: a.title.clone(),
                kind: a.kind.clone(),
                detail: a.detail.clone(),
                options: a.options.clone(),
                deadline_ms: a.deadline_ms,
            },
        )
        .await?;
        self.commit_events(tx, std::slice::from_ref(&ev)).await?;
        Ok(ev)
    }

    /// Resolves a pending approval. `Ok(None)` when it was not pending any more (the
    /// caller reports `approval_already_resolved`); `Err` only for storage failures.
    pub async fn resolve_approval(
        &self,
        id: &ApprovalId,
        status: ApprovalStatus,
        decided_by: Option<&str>,
    ) -> Result<Option<(Approval, EventEnvelope)>> {
        let mut tx = self.writer.begin().await?;
        let row = sqlx::query(
            "UPDATE approvals SET status = $1, decided_by = $2, resolved_at = $3 \
             WHERE id = $4 AND status = 'pending' RETURNING *",
        )
        .bind(status.as_str())
        .bind(decided_by)
        .bind(now_ms())
        .bind(id.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let approval = rows::approval(&row)?;
        recompute_turn_status(&mut tx, &approval.turn_id).await?;
        let ev = append(
            &mut tx,
            &approval.session_id,
            Some(&approval.turn_id),
            &EventPayload::ApprovalResolved {
                approval_id: approval.id.clone(),
                status,
                decided_by: decided_by.map(str::to_string),
            },
        )
        .await?;
        self.commit_events(tx, std::slice::from_ref(&ev)).await?;
        Ok(Some((approval, ev)))
    }

    pub async fn get_approval(&self, id: &ApprovalId) -> Result<Option<Approval>> {
        let row = sqlx::query("SELECT * FROM approvals WHERE id = $1")
            .bind(id.as_str())
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(rows::approval).transpose()
    }

    /// Approvals, newest first, optionally filtered by status and/or conversation.
    pub async fn list_approvals(
        &self,
        status: Option<ApprovalStatus>,
        conversation_id: Option<&ConversationId>,
    ) -> Result<Vec<Approval>> {
        let rows = sqlx::query(
            "SELECT * FROM approvals WHERE ($1 IS NULL OR status = $2) \
             AND ($3 IS NULL OR conversation_id = $4) ORDER BY created_at DESC, id LIMIT 500",
        )
        .bind(status.map(|s| s.as_str()))
        .bind(status.map(|s| s.as_str()))
        .bind(conversation_id.map(ConversationId::as_str))
        .bind(conversation_id.map(ConversationId::as_str))
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(rows::approval).collect()
    }

    /// Inserts a pending question, marks its turn waiting, records `question_asked`.
    pub async fn create_question(&self, q: &NewQuestion) -> Result<EventEnvelope> {
        let mut tx = self.writer.begin().await?;
        sqlx::query(
            "INSERT INTO questions (id, conversation_id, session_id, turn_id, prompt, status, \
             created_at, deadline) VALUES ($1, $2, $3, $4, $5, 'pending', $6, $7)",
        )
        .bind(q.id.as_str())
        .bind(q.conversation_id.as_str())
        .bind(q.session_id.as_str())
        .bind(q.turn_id.as_str())
        .bind(&q.prompt)
        .bind(now_ms())
        .bind(q.deadline_ms)
        .execute(&mut *tx)
        .await?;
        recompute_turn_status(&mut tx, &q.turn_id).await?;
        let ev = append(
            &mut tx,
            &q.session_id,
            Some(&q.turn_id),
            &EventPayload::QuestionAsked {
                question_id: q.id.clone(),
                prompt: q.prompt.clone(),
                deadline_ms: q.deadline_ms,
            },
        )
        .await?;
        self.commit_events(tx, std::slice::from_ref(&ev)).await?;
        Ok(ev)
    }

    /// Resolves a pending question; `Ok(None)` when it was not pending any more.
    pub async fn resolve_question(
        &self,
        id: &QuestionId,
        status: QuestionStatus,
        answer: Option<&str>,
        answered_by: Option<&str>,
    ) -> Result<Option<(Question, EventEnvelope)>> {
        let mut tx = self.writer.begin().await?;
        let row = sqlx::query(
            "UPDATE questions SET status = $1, answer = $2, answered_by = $3, resolved_at = $4 \
             WHERE id = $5 AND status = 'pending' RETURNING *",
        )
        .bind(status.as_str())
        .bind(answer)
        .bind(answered_by)
        .bind(now_ms())
        .bind(id.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let question = rows::question(&row)?;
        recompute_turn_status(&mut tx, &question.turn_id).await?;
        let ev = append(
            &mut tx,
            &question.session_id,
            Some(&question.turn_id),
            &EventPayload::QuestionResolved {
                question_id: question.id.clone(),
                status,
                answer: answer.map(str::to_string),
            },
        )
        .await?;
        self.commit_events(tx, std::slice::from_ref(&ev)).await?;
        Ok(Some((question, ev)))
    }

    pub async fn get_question(&self, id: &QuestionId) -> Result<Option<Question>> {
        let row = sqlx::query("SELECT * FROM questions WHERE id = $1")
            .bind(id.as_str())
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(rows::question).transpose()
    }

    /// Questions, newest first, optionally filtered.
    pub async fn list_questions(
        &self,
        status: Option<QuestionStatus>,
        conversation_id: Option<&ConversationId>,
    ) -> Result<Vec<Question>> {
        let rows = sqlx::query(
            "SELECT * FROM questions WHERE ($1 IS NULL OR status = $2) \
             AND ($3 IS NULL OR conversation_id = $4) ORDER BY created_at DESC, id LIMIT 500",
        )
        .bind(status.map(|s| s.as_str()))
        .bind(status.map(|s| s.as_str()))
        .bind(conversation_id.map(ConversationId::as_str))
        .bind(conversation_id.map(ConversationId::as_str))
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(rows::question).collect()
    }
}
