//! Delegation rows: tasks (a `delegate` conversation with one session for life), their
//! versioned turns, the outcome reports sent to the parent's session, and the
//! continuation ledger (idempotent continue/close, per parent conversation).

use super::SqlRow;
use sqlx::Row;

use tether_proto::{
    ConversationId, ConversationKind, EventEnvelope, EventPayload, NewSessionReason,
    Session, SessionStatus, TaskId, TurnId, TurnOrigin, TurnStatus,
};

use super::delegation_ledger::put_ledger;


use super::rows::{id, opt_id};

use super::Db;
use super::turns::add_turn;
use crate::{
    DelegationRow, DelegationTurnRow, LedgerEntry, NewDelegation, NewDelegationTurn, NewTurn, Result,
    StoreError,
};

fn delegation(row: &SqlRow) -> Result<DelegationRow> {
    Ok(DelegationRow {
        task_id: id(row, "task_id")?,
        parent_conversation_id: opt_id(row, "parent_conversation_id")?,
        parent_session_id: opt_id(row, "parent_session_id")?,
        parent_turn_id: opt_id(row, "parent_turn_id")?,
        parent_tool_call_id: row.try_get("parent_tool_call_id")?,
        depth: row.try_get::<i64, _>("depth")?.max(0) as u32,
        agent: row.try_get("agent")?,
        cwd: row.try_get("cwd")?,
        task: row.try_get("task")?,
        session_id: id(row, "session_id")?,
        released_at_ms: row.try_get("released_at")?,
        created_at_ms: row.try_get("created_at")?,
    })
}

pub(crate) fn delegation_turn(row: &SqlRow) -> Result<DelegationTurnRow> {
    let origin: String = row.try_get("origin")?;
    Ok(DelegationTurnRow {
        task_id: id(row, "task_id")?,
        turn_version: row.try_get("turn_version")?,
        turn_id: id(row, "turn_id")?,
        origin: TurnOrigin::parse(&origin).ok_or_else(|| StoreError::Corrupt {
            table: "delegation_turns",
            detail: format!("unknown origin {origin:?}"),
        })?,
        parent_turn_id: opt_id(row, "parent_turn_id")?,
        reported: row.try_get::<Option<i64>, _>("reported_at")?.is_some(),
    })
}

/// How many tasks of a parent conversation (`$1`; `NULL`: the external scope) have a turn
/// that has not ended.
const RUNNING_CHILDREN: &str = "SELECT COUNT(DISTINCT d.task_id) FROM delegations d \
     JOIN turns t ON t.conversation_id = d.task_id \
     WHERE (d.parent_conversation_id = $1 \
            OR (d.parent_conversation_id IS NULL AND $1 IS NULL)) \
     AND t.status IN ('queued', 'running', 'waiting_approval', 'waiting_user')";

impl Db {
    /// Creates the task in one transaction: the `delegate` conversation, its bound session
    /// (`session_started`), the first turn (queued, with the task as the user message),
    /// the task row, turn version 1, and `delegation_started` on the parent's session.
    pub async fn create_delegation(
        &self,
        d: &NewDelegation,
    ) -> Result<(Session, Vec<EventEnvelope>)> {
        let now = self.now_ms();
        // The task is its child conversation: the same id.
        let conversation_id = d.task_id.conversation_id();
        let mut tx = self.writer.begin().await?;
        sqlx::query(
            // The child is its parent's owner's, seen as its parent is (issue 28); a
            // task without a parent is its caller's (`$9`).
            "INSERT INTO conversations (id, kind, title, agent, model, cwd, archived, \
             bound_session_id, parent_conversation_id, owner_id, visibility, created_at, \
             updated_at) VALUES ($1, $2, $3, $4, NULL, $5, 0, NULL, $6, \
             COALESCE((SELECT owner_id FROM conversations WHERE id = $6), $9), \
             COALESCE((SELECT visibility FROM conversations WHERE id = $6), 'private'), $7, $8)",
        )
        .bind(conversation_id.as_str())
        .bind(ConversationKind::Delegate.as_str())
        .bind(&d.title)
        .bind(&d.agent)
        .bind(&d.cwd)
        .bind(d.parent_conversation_id.as_deref())
        .bind(now)
        .bind(now)
        .bind(d.owner_id.as_deref())
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO sessions (id, conversation_id, agent, model, cwd, status, external_id, \
             created_at, updated_at) VALUES ($1, $2, $3, NULL, $4, $5, NULL, $6, $7)",
        )
        .bind(d.session_id.as_str())
        .bind(conversation_id.as_str())
        .bind(&d.agent)
        .bind(&d.cwd)
        .bind(SessionStatus::Dormant.as_str())
        .bind(now)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        sqlx::query("UPDATE conversations SET bound_session_id = $1 WHERE id = $2")
            .bind(d.session_id.as_str())
            .bind(conversation_id.as_str())
            .execute(&mut *tx)
            .await?;
        let mut events = vec![
            self.append_in(
                &mut tx,
                &d.session_id,
                None,
                &EventPayload::SessionStarted {
                    agent: d.agent.clone(),
                    model: None,
                    reason: NewSessionReason::Unbound,
                },
            )
            .await?,
        ];
        let turn = NewTurn {
            id: d.turn_id.clone(),
            session_id: d.session_id.clone(),
            conversation_id: conversation_id.clone(),
            input: d.task.clone(),
            status: TurnStatus::Queued,
        };
        add_turn(&mut tx, &turn, true, now).await?;
        sqlx::query(
            "INSERT INTO delegations (task_id, parent_conversation_id, parent_session_id, \
             parent_turn_id, parent_tool_call_id, depth, agent, cwd, task, session_id, \
             released_at, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, NULL, $11)",
        )
        .bind(d.task_id.as_str())
        .bind(d.parent_conversation_id.as_deref())
        .bind(d.parent_session_id.as_deref())
        .bind(d.parent_turn_id.as_deref())
        .bind(&d.parent_tool_call_id)
        .bind(i64::from(d.depth))
        .bind(&d.agent)
        .bind(&d.cwd)
        .bind(&d.task)
        .bind(d.session_id.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO delegation_turns (task_id, turn_version, turn_id, origin, \
             parent_turn_id) VALUES ($1, 1, $2, $3, $4)",
        )
        .bind(d.task_id.as_str())
        .bind(d.turn_id.as_str())
        .bind(TurnOrigin::Parent.as_str())
        .bind(d.parent_turn_id.as_deref())
        .execute(&mut *tx)
        .await?;
        if let Some(parent_session) = &d.parent_session_id {
            let ev = EventPayload::DelegationStarted {
                task_id: d.task_id.clone(),
                agent_type: d.agent.clone(),
                task: d.task.clone(),
                working_dir: d.cwd.clone(),
                parent_turn_id: d.parent_turn_id.clone(),
                tool_call_id: d.parent_tool_call_id.clone(),
            };
            events.push(self.append_in(&mut tx, parent_session, d.parent_turn_id.as_ref(), &ev).await?);
        }
        self.commit_events(tx, &events).await?;
        let session = Session {
            id: d.session_id.clone(),
            conversation_id,
            agent: d.agent.clone(),
            model: None,
            cwd: d.cwd.clone(),
            status: SessionStatus::Dormant,
            external_id: None,
            created_at_ms: now,
            updated_at_ms: now,
        };
        Ok((session, events))
    }

    /// Ids of the tasks not released yet, oldest first.
    pub async fn unreleased_delegation_ids(&self) -> Result<Vec<TaskId>> {
        let rows: Vec<(String,)> = sqlx::query_as(
            "SELECT task_id FROM delegations WHERE released_at IS NULL ORDER BY created_at",
        )
        .fetch_all(&self.reader)
        .await?;
        Ok(rows.into_iter().map(|(id,)| TaskId::from(id)).collect())
    }

    pub async fn get_delegation(&self, task_id: &TaskId) -> Result<Option<DelegationRow>> {
        let row = sqlx::query("SELECT * FROM delegations WHERE task_id = $1")
            .bind(task_id.as_str())
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(delegation).transpose()
    }

    /// The tasks of a parent conversation, oldest first.
    pub async fn children_of(
        &self,
        parent_conversation_id: &ConversationId,
    ) -> Result<Vec<DelegationRow>> {
        let rows = sqlx::query(
            "SELECT * FROM delegations WHERE parent_conversation_id = $1 ORDER BY created_at, rowid",
        )
        .bind(parent_conversation_id.as_str())
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(delegation).collect()
    }

    /// The task's latest turn.
    pub async fn latest_delegation_turn(
        &self,
        task_id: &TaskId,
    ) -> Result<Option<DelegationTurnRow>> {
        let row = sqlx::query(
            "SELECT * FROM delegation_turns WHERE task_id = $1 ORDER BY turn_version DESC LIMIT 1",
        )
        .bind(task_id.as_str())
        .fetch_optional(&self.reader)
        .await?;
        row.as_ref().map(delegation_turn).transpose()
    }

    /// The delegation turn of a runtime turn, if it is one.
    pub async fn delegation_turn(&self, turn_id: &TurnId) -> Result<Option<DelegationTurnRow>> {
        let row = sqlx::query("SELECT * FROM delegation_turns WHERE turn_id = $1")
            .bind(turn_id.as_str())
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(delegation_turn).transpose()
    }

    /// Delegation turns started by a parent's turn that have not ended.
    pub async fn open_turns_started_in(
        &self,
        parent_turn_id: &TurnId,
    ) -> Result<Vec<DelegationTurnRow>> {
        let rows = sqlx::query(
            "SELECT dt.* FROM delegation_turns dt JOIN turns t ON t.id = dt.turn_id \
             WHERE dt.parent_turn_id = $1 \
             AND t.status IN ('queued', 'running', 'waiting_approval', 'waiting_user')",
        )
        .bind(parent_turn_id.as_str())
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(delegation_turn).collect()
    }

    /// How many tasks of the parent conversation (`None`: of the external scope, the
    /// tasks no conversation started) have a turn that has not ended.
    pub async fn running_children(
        &self,
        parent_conversation_id: Option<&ConversationId>,
    ) -> Result<usize> {
        let (n,): (i64,) = sqlx::query_as(RUNNING_CHILDREN)
            .bind(parent_conversation_id.map(|p| p.as_str()))
            .fetch_one(&self.reader)
            .await?;
        Ok(n.max(0) as usize)
    }

    /// Adds the next turn of a task (queued, with the message in the history) and,
    /// when given, the ledger entry, in one transaction. Returns the new turn version.
    pub async fn add_delegation_turn(
        &self,
        t: &NewDelegationTurn,
        ledger_entry: Option<&LedgerEntry>,
    ) -> Result<i64> {
        let now = self.now_ms();
        let conversation_id = t.task_id.conversation_id();
        let mut tx = self.writer.begin().await?;
        if let Some(max) = t.max_running_children {
            let (parent,): (Option<String>,) =
                sqlx::query_as("SELECT parent_conversation_id FROM delegations WHERE task_id = $1")
                    .bind(t.task_id.as_str())
                    .fetch_one(&mut *tx)
                    .await?;
            if let Some(lock) = super::dialect::CHILDREN_LOCK {
                let key = format!("children:{}", parent.as_deref().unwrap_or("external"));
                sqlx::query(lock).bind(key).execute(&mut *tx).await?;
            }
            let (running,): (i64,) = sqlx::query_as(RUNNING_CHILDREN)
                .bind(parent.as_deref())
                .fetch_one(&mut *tx)
                .await?;
            let running = running.max(0) as usize;
            if running >= max {
                return Err(StoreError::ChildrenCap { running, max });
            }
        }
        let (version,): (i64,) = sqlx::query_as(
            "SELECT COALESCE(MAX(turn_version), 0) + 1 FROM delegation_turns WHERE task_id = $1",
        )
        .bind(t.task_id.as_str())
        .fetch_one(&mut *tx)
        .await?;
        let turn = NewTurn {
            id: t.turn_id.clone(),
            session_id: t.session_id.clone(),
            conversation_id: conversation_id.clone(),
            input: t.message.clone(),
            status: TurnStatus::Queued,
        };
        add_turn(&mut tx, &turn, true, now).await?;
        sqlx::query(
            "INSERT INTO delegation_turns (task_id, turn_version, turn_id, origin, \
             parent_turn_id) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(t.task_id.as_str())
        .bind(version)
        .bind(t.turn_id.as_str())
        .bind(t.origin.as_str())
        .bind(t.parent_turn_id.as_deref())
        .execute(&mut *tx)
        .await?;
        if let Some(e) = ledger_entry {
            let mut e = e.clone();
            if let serde_json::Value::Object(m) = &mut e.result {
                m.insert("turn_version".to_string(), version.into());
            }
            put_ledger(&mut tx, &e).await?;
        }
        self.commit_fenced(tx).await?;
        Ok(version)
    }
}
