//! Row types and their mapping from SQLite rows to wire types.

use super::SqlRow;
use sqlx::Row;

use tether_proto::{
    Approval, ApprovalStatus, ConversationKind, EventEnvelope, EventPayload, HistoryMessage,
    MessageRole, NewSessionReason, Question, QuestionStatus, Session, SessionStatus, Turn,
    TurnStatus, Visibility,
};

use crate::{ConversationRow, Result, StoreError};

fn corrupt(table: &'static str, detail: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        table,
        detail: detail.into(),
    }
}

fn parse_enum<T>(table: &'static str, value: String, parse: fn(&str) -> Option<T>) -> Result<T> {
    parse(&value).ok_or_else(|| corrupt(table, format!("unknown value {value:?}")))
}

fn parse_json<T: serde::de::DeserializeOwned>(table: &'static str, s: &str) -> Result<T> {
    serde_json::from_str(s).map_err(|e| corrupt(table, e.to_string()))
}

pub(crate) fn conversation(row: &SqlRow) -> Result<ConversationRow> {
    Ok(ConversationRow {
        id: id(row, "id")?,
        kind: parse_enum(
            "conversations",
            row.try_get("kind")?,
            ConversationKind::parse,
        )?,
        title: row.try_get("title")?,
        agent: row.try_get("agent")?,
        model: row.try_get("model")?,
        cwd: row.try_get("cwd")?,
        archived: row.try_get::<i64, _>("archived")? != 0,
        bound_session_id: opt_id(row, "bound_session_id")?,
        parent_conversation_id: opt_id(row, "parent_conversation_id")?,
        next_session_reason: row
            .try_get::<Option<String>, _>("next_session_reason")?
            .and_then(|r| NewSessionReason::parse(&r)),
        owner_id: opt_id(row, "owner_id")?,
        visibility: parse_enum(
            "conversations",
            row.try_get("visibility")?,
            Visibility::parse,
        )?,
        isolated: row.try_get::<i64, _>("isolated")? != 0,
        created_at_ms: row.try_get("created_at")?,
        updated_at_ms: row.try_get("updated_at")?,
    })
}

pub(crate) fn session(row: &SqlRow) -> Result<Session> {
    session_as(row, SESSION_PLAIN)
}

/// A session's column names as a query returns them: plain, or prefixed where it is
/// joined to another table's row ([`SESSION_JOINED`]).
pub(crate) struct SessionColumns {
    id: &'static str,
    conversation_id: &'static str,
    agent: &'static str,
    model: &'static str,
    cwd: &'static str,
    status: &'static str,
    external_id: &'static str,
    created_at: &'static str,
    updated_at: &'static str,
}

const SESSION_PLAIN: SessionColumns = SessionColumns {
    id: "id",
    conversation_id: "conversation_id",
    agent: "agent",
    model: "model",
    cwd: "cwd",
    status: "status",
    external_id: "external_id",
    created_at: "created_at",
    updated_at: "updated_at",
};

/// The session's columns as `SESSION_JOINED_SELECT` names them (`s_…`).
pub(crate) const SESSION_JOINED: SessionColumns = SessionColumns {
    id: "s_id",
    conversation_id: "s_conversation_id",
    agent: "s_agent",
    model: "s_model",
    cwd: "s_cwd",
    status: "s_status",
    external_id: "s_external_id",
    created_at: "s_created_at",
    updated_at: "s_updated_at",
};

/// Selects a session `s` joined to another row under the names of [`SESSION_JOINED`].
pub(crate) const SESSION_JOINED_SELECT: &str = "s.id AS s_id, s.conversation_id AS \
     s_conversation_id, s.agent AS s_agent, s.model AS s_model, s.cwd AS s_cwd, s.status AS \
     s_status, s.external_id AS s_external_id, s.created_at AS s_created_at, s.updated_at AS \
     s_updated_at";

/// A session read under the column names `c`.
pub(crate) fn session_as(row: &SqlRow, c: SessionColumns) -> Result<Session> {
    Ok(Session {
        id: id(row, c.id)?,
        conversation_id: id(row, c.conversation_id)?,
        agent: row.try_get(c.agent)?,
        model: row.try_get(c.model)?,
        cwd: row.try_get(c.cwd)?,
        status: parse_enum("sessions", row.try_get(c.status)?, SessionStatus::parse)?,
        external_id: row.try_get(c.external_id)?,
        created_at_ms: row.try_get(c.created_at)?,
        updated_at_ms: row.try_get(c.updated_at)?,
    })
}

pub(crate) fn turn(row: &SqlRow) -> Result<Turn> {
    let error_code: Option<String> = row.try_get("error_code")?;
    let usage: Option<String> = row.try_get("usage")?;
    Ok(Turn {
        id: id(row, "id")?,
        session_id: id(row, "session_id")?,
        conversation_id: id(row, "conversation_id")?,
        input: row.try_get("input")?,
        status: parse_enum("turns", row.try_get("status")?, TurnStatus::parse)?,
        result_text: row.try_get("result_text")?,
        stop_reason: row.try_get("stop_reason")?,
        error_code: match error_code {
            Some(c) => Some(parse_json("turns", &format!("\"{c}\""))?),
            None => None,
        },
        error_message: row.try_get("error_message")?,
        created_at_ms: row.try_get("created_at")?,
        started_at_ms: row.try_get("started_at")?,
        ended_at_ms: row.try_get("ended_at")?,
        usage: match usage {
            Some(u) => Some(parse_json("turns", &u)?),
            None => None,
        },
    })
}

/// Reads a text column as one of the `tether_proto` id newtypes (SQLite knows only text;
/// `tether-proto` must not depend on sqlx, so the newtypes have no `sqlx::Type`).
pub(crate) fn id<T: From<String>>(row: &SqlRow, column: &str) -> Result<T> {
    Ok(T::from(row.try_get::<String, _>(column)?))
}

/// [`id`] for a nullable column.
pub(crate) fn opt_id<T: From<String>>(row: &SqlRow, column: &str) -> Result<Option<T>> {
    Ok(row.try_get::<Option<String>, _>(column)?.map(T::from))
}

/// The columns of an event as [`event`] reads them, from `events e` joined to its
/// session `s` (the row holds the session's and conversation's numbers, migration 0030).
macro_rules! select_events {
    ($rest:literal) => {
        concat!(
            "SELECT e.id, s.id AS session_id, s.conversation_id, e.seq, e.turn_id, e.at, \
             e.kind, e.payload FROM events e JOIN sessions s ON s.num = e.session_num ",
            $rest
        )
    };
}
pub(crate) use select_events;

pub(crate) fn event(row: &SqlRow) -> Result<EventEnvelope> {
    let payload: String = row.try_get("payload")?;
    Ok(EventEnvelope {
        id: row.try_get("id")?,
        session_id: id(row, "session_id")?,
        conversation_id: id(row, "conversation_id")?,
        seq: row.try_get("seq")?,
        turn_id: opt_id(row, "turn_id")?,
        at_ms: row.try_get("at")?,
        payload: parse_json::<EventPayload>("events", &payload)?,
    })
}

pub(crate) fn approval(row: &SqlRow) -> Result<Approval> {
    let detail: Option<String> = row.try_get("detail")?;
    let options: String = row.try_get("options")?;
    Ok(Approval {
        id: id(row, "id")?,
        conversation_id: id(row, "conversation_id")?,
        session_id: id(row, "session_id")?,
        turn_id: id(row, "turn_id")?,
        title: row.try_get("title")?,
        kind: row.try_get("kind")?,
        detail: match detail {
            Some(d) => Some(parse_json("approvals", &d)?),
            None => None,
        },
        options: parse_json("approvals", &options)?,
        status: parse_enum("approvals", row.try_get("status")?, ApprovalStatus::parse)?,
        decided_by: row.try_get("decided_by")?,
        created_at_ms: row.try_get("created_at")?,
        deadline_ms: row.try_get("deadline")?,
        resolved_at_ms: row.try_get("resolved_at")?,
    })
}

pub(crate) fn question(row: &SqlRow) -> Result<Question> {
    Ok(Question {
        id: id(row, "id")?,
        conversation_id: id(row, "conversation_id")?,
        session_id: id(row, "session_id")?,
        turn_id: id(row, "turn_id")?,
        prompt: row.try_get("prompt")?,
        status: parse_enum("questions", row.try_get("status")?, QuestionStatus::parse)?,
        answer: row.try_get("answer")?,
        created_at_ms: row.try_get("created_at")?,
        deadline_ms: row.try_get("deadline")?,
    })
}

pub(crate) fn message(row: &SqlRow) -> Result<HistoryMessage> {
    Ok(HistoryMessage {
        id: row.try_get("id")?,
        role: parse_enum("messages", row.try_get("role")?, MessageRole::parse)?,
        text: row.try_get("text")?,
        session_id: opt_id(row, "session_id")?,
        turn_id: opt_id(row, "turn_id")?,
        at_ms: row.try_get("at")?,
        attachments: Vec::new(),
    })
}
