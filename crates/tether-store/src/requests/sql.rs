//! Pending requests, approvals and questions, as one family: a request is created with
//! its event and marks its turn waiting; it is resolved at most once (the conditional
//! update makes the first answer win), which sets the turn's status again. What differs
//! between the kinds is named once ([`Kind`]): the table, the columns of its own, its
//! row and its events. The `Store` methods are thin wrappers naming the kind.

use super::SqlConnection;
use tether_proto::{
    Approval, ApprovalId, ApprovalStatus, ConversationId, EventEnvelope, EventPayload, Question,
    QuestionId, QuestionStatus, SessionId, TurnId,
};


use super::{Db, SqlRow, rows};
use crate::requests::page_sql;
use crate::{NewApproval, NewQuestion, RequestPlace, Result, StoreError};

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

/// What one kind of pending request has of its own.
trait Kind {
    /// Its table (the columns every kind has: `id`, `conversation_id`, `session_id`,
    /// `turn_id`, `status`, `created_at`, `deadline`, `resolved_at`).
    const TABLE: &'static str;
    /// Its stored row.
    type Row;
    fn decode(row: &SqlRow) -> Result<Self::Row>;
    /// The session and turn a request belongs to.
    fn turn(row: &Self::Row) -> (&SessionId, &TurnId);
}

struct Approvals;

impl Kind for Approvals {
    const TABLE: &'static str = "approvals";
    type Row = Approval;
    fn decode(row: &SqlRow) -> Result<Approval> {
        rows::approval(row)
    }
    fn turn(a: &Approval) -> (&SessionId, &TurnId) {
        (&a.session_id, &a.turn_id)
    }
}

struct Questions;

impl Kind for Questions {
    const TABLE: &'static str = "questions";
    type Row = Question;
    fn decode(row: &SqlRow) -> Result<Question> {
        rows::question(row)
    }
    fn turn(q: &Question) -> (&SessionId, &TurnId) {
        (&q.session_id, &q.turn_id)
    }
}

/// A request to store: the columns every kind has, those of its kind, and its event.
struct Ask<'a> {
    id: &'a str,
    conversation_id: &'a ConversationId,
    session_id: &'a SessionId,
    turn_id: &'a TurnId,
    deadline_ms: i64,
    /// The kind's own columns and their values.
    columns: Vec<(&'static str, Option<String>)>,
    event: EventPayload,
}

/// `$from, $from + 1, …` for `n` parameters.
fn params(from: usize, n: usize) -> String {
    (from..from + n)
        .map(|i| format!(", ${i}"))
        .collect::<String>()
}

impl Db {
    /// Inserts a pending request of kind `K`, marks its turn waiting and records its
    /// event, in one transaction.
    async fn ask<K: Kind>(&self, ask: Ask<'_>) -> Result<EventEnvelope> {
        let names: String = ask.columns.iter().map(|(c, _)| format!(", {c}")).collect();
        let sql = format!(
            "INSERT INTO {} (id, conversation_id, session_id, turn_id, status, created_at, \
             deadline{names}) VALUES ($1, $2, $3, $4, 'pending', $5, $6{})",
            K::TABLE,
            params(7, ask.columns.len())
        );
        let mut tx = self.writer.begin().await?;
        let mut q = sqlx::query(&sql)
            .bind(ask.id)
            .bind(ask.conversation_id.as_str())
            .bind(ask.session_id.as_str())
            .bind(ask.turn_id.as_str())
            .bind(self.now_ms())
            .bind(ask.deadline_ms);
        for (_, value) in ask.columns {
            q = q.bind(value);
        }
        q.execute(&mut *tx).await?;
        recompute_turn_status(&mut tx, ask.turn_id).await?;
        let ev = self.append_in(&mut tx, ask.session_id, Some(ask.turn_id), &ask.event).await?;
        self.commit_events(tx, std::slice::from_ref(&ev)).await?;
        Ok(ev)
    }

    /// Resolves pending request `id` of kind `K` to `status`, setting the kind's own
    /// `columns`, with the event `event` gives for the resolved row. `Ok(None)` when it
    /// was not pending any more.
    async fn resolve<K: Kind>(
        &self,
        id: &str,
        status: &str,
        columns: &[(&'static str, Option<&str>)],
        event: impl FnOnce(&K::Row) -> EventPayload,
    ) -> Result<Option<(K::Row, EventEnvelope)>> {
        let sets: String = columns
            .iter()
            .enumerate()
            .map(|(i, (c, _))| format!(", {c} = ${}", i + 2))
            .collect();
        let n = columns.len();
        let sql = format!(
            "UPDATE {} SET status = $1{sets}, resolved_at = ${} \
             WHERE id = ${} AND status = 'pending' RETURNING *",
            K::TABLE,
            n + 2,
            n + 3
        );
        let mut tx = self.writer.begin().await?;
        let mut q = sqlx::query(&sql).bind(status);
        for (_, value) in columns {
            q = q.bind(*value);
        }
        let row = q
            .bind(self.now_ms())
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let request = K::decode(&row)?;
        let (session_id, turn_id) = K::turn(&request);
        recompute_turn_status(&mut tx, turn_id).await?;
        let ev = self.append_in(&mut tx, session_id, Some(turn_id), &event(&request)).await?;
        self.commit_events(tx, std::slice::from_ref(&ev)).await?;
        Ok(Some((request, ev)))
    }

    async fn get_request<K: Kind>(&self, id: &str) -> Result<Option<K::Row>> {
        let sql = format!("SELECT * FROM {} WHERE id = $1", K::TABLE);
        let row = sqlx::query(&sql)
            .bind(id)
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(K::decode).transpose()
    }

    /// Requests of kind `K`, newest first, optionally filtered by status and/or
    /// conversation (at most 500).
    async fn list_requests<K: Kind>(
        &self,
        status: Option<&'static str>,
        conversation_id: Option<&ConversationId>,
    ) -> Result<Vec<K::Row>> {
        self.requests_page::<K>(status, conversation_id, None, 500)
            .await
    }

    /// Up to `limit` requests, newest first (ties by id), after `after`. Only the filters
    /// given are in the statement, so each is an index range (D273): a status is a
    /// literal of the code's (`pending` reads the partial index of pending requests),
    /// and a page after `after` seeks to it (`created_at <= …` first) instead of
    /// reading every newer request. (`$n IS NULL OR …` would make both backends read
    /// the requests from the newest on, every page.)
    async fn requests_page<K: Kind>(
        &self,
        status: Option<&'static str>,
        conversation_id: Option<&ConversationId>,
        after: Option<&RequestPlace>,
        limit: u32,
    ) -> Result<Vec<K::Row>> {
        let sql = page_sql(K::TABLE, status, conversation_id.is_some(), after.is_some());
        let mut q = sqlx::query(&sql);
        if let Some(c) = conversation_id {
            q = q.bind(c.as_str());
        }
        if let Some(a) = after {
            q = q.bind(a.created_at_ms).bind(a.id.as_str());
        }
        let rows = q.bind(i64::from(limit)).fetch_all(&self.reader).await?;
        rows.iter().map(K::decode).collect()
    }

    /// Inserts a pending approval, marks its turn waiting, records `approval_requested`.
    pub async fn create_approval(&self, a: &NewApproval) -> Result<EventEnvelope> {
        self.ask::<Approvals>(Ask {
            id: a.id.as_str(),
            conversation_id: &a.conversation_id,
            session_id: &a.session_id,
            turn_id: &a.turn_id,
            deadline_ms: a.deadline_ms,
            columns: vec![
                ("title", Some(a.title.clone())),
                ("kind", a.kind.clone()),
                ("detail", a.detail.as_ref().map(|d| d.to_string())),
                ("options", Some(to_json(&a.options)?)),
            ],
            event: EventPayload::ApprovalRequested {
                approval_id: a.id.clone(),
                title: a.title.clone(),
                kind: a.kind.clone(),
                detail: a.detail.clone(),
                options: a.options.clone(),
                deadline_ms: a.deadline_ms,
            },
        })
        .await
    }

    /// Resolves a pending approval. `Ok(None)` when it was not pending any more (the
    /// caller reports `approval_already_resolved`); `Err` only for storage failures.
    pub async fn resolve_approval(
        &self,
        id: &ApprovalId,
        status: ApprovalStatus,
        decided_by: Option<&str>,
    ) -> Result<Option<(Approval, EventEnvelope)>> {
        self.resolve::<Approvals>(
            id.as_str(),
            status.as_str(),
            &[("decided_by", decided_by)],
            |a| EventPayload::ApprovalResolved {
                approval_id: a.id.clone(),
                status,
                decided_by: decided_by.map(str::to_string),
            },
        )
        .await
    }

    pub async fn get_approval(&self, id: &ApprovalId) -> Result<Option<Approval>> {
        self.get_request::<Approvals>(id.as_str()).await
    }

    /// Approvals, newest first, optionally filtered by status and/or conversation.
    pub async fn list_approvals(
        &self,
        status: Option<ApprovalStatus>,
        conversation_id: Option<&ConversationId>,
    ) -> Result<Vec<Approval>> {
        self.list_requests::<Approvals>(status.map(|s| s.as_str()), conversation_id)
            .await
    }

    /// One page of approvals, newest first, optionally of one status: up to `limit`
    /// after `after` (the last of the page before).
    pub async fn approvals_page(
        &self,
        status: Option<ApprovalStatus>,
        after: Option<&RequestPlace>,
        limit: u32,
    ) -> Result<Vec<Approval>> {
        self.requests_page::<Approvals>(status.map(|s| s.as_str()), None, after, limit)
            .await
    }

    /// One page of questions, newest first, optionally of one status: up to `limit`
    /// after `after` (the last of the page before).
    pub async fn questions_page(
        &self,
        status: Option<QuestionStatus>,
        after: Option<&RequestPlace>,
        limit: u32,
    ) -> Result<Vec<Question>> {
        self.requests_page::<Questions>(status.map(|s| s.as_str()), None, after, limit)
            .await
    }

    /// Inserts a pending question, marks its turn waiting, records `question_asked`.
    pub async fn create_question(&self, q: &NewQuestion) -> Result<EventEnvelope> {
        self.ask::<Questions>(Ask {
            id: q.id.as_str(),
            conversation_id: &q.conversation_id,
            session_id: &q.session_id,
            turn_id: &q.turn_id,
            deadline_ms: q.deadline_ms,
            columns: vec![("prompt", Some(q.prompt.clone()))],
            event: EventPayload::QuestionAsked {
                question_id: q.id.clone(),
                prompt: q.prompt.clone(),
                deadline_ms: q.deadline_ms,
            },
        })
        .await
    }

    /// Resolves a pending question; `Ok(None)` when it was not pending any more.
    pub async fn resolve_question(
        &self,
        id: &QuestionId,
        status: QuestionStatus,
        answer: Option<&str>,
        answered_by: Option<&str>,
    ) -> Result<Option<(Question, EventEnvelope)>> {
        self.resolve::<Questions>(
            id.as_str(),
            status.as_str(),
            &[("answer", answer), ("answered_by", answered_by)],
            |q| EventPayload::QuestionResolved {
                question_id: q.id.clone(),
                status,
                answer: answer.map(str::to_string),
            },
        )
        .await
    }

    pub async fn get_question(&self, id: &QuestionId) -> Result<Option<Question>> {
        self.get_request::<Questions>(id.as_str()).await
    }

    /// Questions, newest first, optionally filtered.
    pub async fn list_questions(
        &self,
        status: Option<QuestionStatus>,
        conversation_id: Option<&ConversationId>,
    ) -> Result<Vec<Question>> {
        self.list_requests::<Questions>(status.map(|s| s.as_str()), conversation_id)
            .await
    }
}
