//! Conversations, their binding, and runtime sessions.

use tether_proto::{
    ConversationId, EventEnvelope, EventPayload, MessageRole, NewSessionReason, PersonId, Session,
    SessionId, SessionStatus, Visibility,
};

use super::events::add_message;

use super::{Db, rows};
use crate::{ConversationRow, MessageTarget, NewConversation, NewSession, Result};

/// [`Db::conversation_for_message`]'s read: the conversation, whether its bound session
/// has a pending question, and that session (`s_…`, `NULL` when unbound).
static MESSAGE_TARGET: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT c.*, EXISTS (SELECT 1 FROM questions q WHERE q.status = 'pending' AND \
         q.conversation_id = c.id AND q.session_id = c.bound_session_id) AS asking, {} \
         FROM conversations c LEFT JOIN sessions s ON s.id = c.bound_session_id \
         WHERE c.id = $1",
        rows::SESSION_JOINED_SELECT
    )
});

impl Db {
    /// Inserts a conversation.
    pub async fn create_conversation(&self, c: &NewConversation<'_>) -> Result<ConversationRow> {
        let now = self.now_ms();
        sqlx::query(
            "INSERT INTO conversations (id, kind, title, agent, model, cwd, archived, \
             bound_session_id, parent_conversation_id, owner_id, visibility, created_at, \
             updated_at) VALUES ($1, $2, $3, $4, $5, $6, 0, NULL, $7, $8, $9, $10, $11)",
        )
        .bind(c.id.as_str())
        .bind(c.kind.as_str())
        .bind(c.title)
        .bind(c.agent)
        .bind(c.model)
        .bind(c.cwd)
        .bind(c.parent_conversation_id.map(ConversationId::as_str))
        .bind(c.owner_id.map(PersonId::as_str))
        .bind(c.visibility.as_str())
        .bind(now)
        .bind(now)
        .execute(&self.writer)
        .await?;
        self.changed(c.id);
        Ok(ConversationRow {
            id: c.id.clone(),
            kind: c.kind,
            title: c.title.to_string(),
            agent: c.agent.to_string(),
            model: c.model.map(str::to_string),
            cwd: c.cwd.to_string(),
            archived: false,
            bound_session_id: None,
            parent_conversation_id: c.parent_conversation_id.cloned(),
            next_session_reason: None,
            owner_id: c.owner_id.cloned(),
            visibility: c.visibility,
            isolated: false,
            created_at_ms: now,
            updated_at_ms: now,
        })
    }

    /// Gives every conversation without an owner to `owner` (a store upgraded from before
    /// people existed: the install's one token stood for its owner); how many.
    pub async fn adopt_unowned(&self, owner: &PersonId) -> Result<u64> {
        let done = sqlx::query("UPDATE conversations SET owner_id = $1 WHERE owner_id IS NULL")
            .bind(owner.as_str())
            .execute(&self.writer)
            .await?;
        Ok(done.rows_affected())
    }

    /// Sets who else sees a conversation.
    pub async fn set_visibility(&self, id: &ConversationId, visibility: Visibility) -> Result<()> {
        sqlx::query("UPDATE conversations SET visibility = $1, updated_at = $2 WHERE id = $3")
            .bind(visibility.as_str())
            .bind(self.now_ms())
            .bind(id.as_str())
            .execute(&self.writer)
            .await?;
        self.changed(id);
        Ok(())
    }

    pub async fn get_conversation(&self, id: &ConversationId) -> Result<Option<ConversationRow>> {
        let row = sqlx::query("SELECT * FROM conversations WHERE id = $1")
            .bind(id.as_str())
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(rows::conversation).transpose()
    }

    /// The conversations among `ids` that exist, in one read (a page's access filter:
    /// one round trip instead of one per conversation). The list is padded to a power
    /// of two with its last id, so few statement shapes are prepared.
    pub async fn conversations_among(
        &self,
        ids: &[ConversationId],
    ) -> Result<Vec<ConversationRow>> {
        let Some(last) = ids.last() else {
            return Ok(Vec::new());
        };
        let n = ids.len().next_power_of_two();
        let list: Vec<String> = (1..=n).map(|i| format!("${i}")).collect();
        let sql = format!(
            "SELECT * FROM conversations WHERE id IN ({})",
            list.join(", ")
        );
        let mut q = sqlx::query(&sql);
        for i in 0..n {
            q = q.bind(ids.get(i).unwrap_or(last).as_str());
        }
        let rows = q.fetch_all(&self.reader).await?;
        rows.iter().map(rows::conversation).collect()
    }

    /// A conversation a message goes to, with its bound session and whether that
    /// session waits for an answer to a question (the message may be that answer): one
    /// read where the router made three, the questions themselves read only when one is
    /// pending.
    pub async fn conversation_for_message(
        &self,
        id: &ConversationId,
    ) -> Result<Option<MessageTarget>> {
        let row = sqlx::query(&MESSAGE_TARGET)
            .bind(id.as_str())
            .fetch_optional(&self.reader)
            .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let bound = match sqlx::Row::try_get::<Option<String>, _>(&row, "s_id")? {
            Some(_) => Some(rows::session_as(&row, rows::SESSION_JOINED)?),
            None => None,
        };
        Ok(Some(MessageTarget {
            conversation: rows::conversation(&row)?,
            bound,
            asking: sqlx::Row::try_get::<bool, _>(&row, "asking")?,
        }))
    }

    /// Conversations, most recently active first: all, or (`viewer`) a member's own and
    /// the team's.
    pub async fn list_conversations(
        &self,
        include_archived: bool,
        viewer: Option<&PersonId>,
    ) -> Result<Vec<ConversationRow>> {
        let rows = sqlx::query(
            "SELECT * FROM conversations WHERE ($1 OR archived = 0) \
             AND ($2 IS NULL OR owner_id = $2 OR visibility = 'team') \
             ORDER BY updated_at DESC, id",
        )
        .bind(include_archived)
        .bind(viewer.map(PersonId::as_str))
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(rows::conversation).collect()
    }

    /// Updates title and/or archived flag.
    pub async fn update_conversation(
        &self,
        id: &ConversationId,
        title: Option<&str>,
        archived: Option<bool>,
    ) -> Result<()> {
        sqlx::query(
            "UPDATE conversations SET title = COALESCE($1, title), \
             archived = COALESCE($2, archived), updated_at = $3 WHERE id = $4",
        )
        .bind(title)
        .bind(archived.map(i64::from))
        .bind(self.now_ms())
        .bind(id.as_str())
        .execute(&self.writer)
        .await?;
        self.changed(id);
        Ok(())
    }

    /// Names a conversation still titled `untitled` (nobody named it yet); `false` when
    /// it has a title already.
    pub async fn name_untitled(
        &self,
        id: &ConversationId,
        untitled: &str,
        title: &str,
    ) -> Result<bool> {
        let res = sqlx::query(
            "UPDATE conversations SET title = $1, updated_at = $2 WHERE id = $3 AND title = $4",
        )
        .bind(title)
        .bind(self.now_ms())
        .bind(id.as_str())
        .bind(untitled)
        .execute(&self.writer)
        .await?;
        let named = res.rows_affected() == 1;
        if named {
            self.changed(id);
        }
        Ok(named)
    }

    /// Sets the agent and model the next new session will use.
    pub async fn set_preferences(
        &self,
        id: &ConversationId,
        agent: &str,
        model: Option<&str>,
    ) -> Result<()> {
        sqlx::query(
            "UPDATE conversations SET agent = $1, model = $2, updated_at = $3 WHERE id = $4",
        )
        .bind(agent)
        .bind(model)
        .bind(self.now_ms())
        .bind(id.as_str())
        .execute(&self.writer)
        .await?;
        self.changed(id);
        Ok(())
    }

    /// Unbinds the conversation and records the command reply, in one transaction.
    /// `next_reason` is remembered for the next session (`explicit` after `/new`).
    /// Returns the session that was bound, if any.
    pub async fn unbind(
        &self,
        id: &ConversationId,
        status_text: &str,
        next_reason: Option<NewSessionReason>,
    ) -> Result<Option<SessionId>> {
        let mut tx = self.writer.begin().await?;
        let (prev,): (Option<String>,) =
            sqlx::query_as("SELECT bound_session_id FROM conversations WHERE id = $1")
                .bind(id.as_str())
                .fetch_one(&mut *tx)
                .await?;
        sqlx::query(
            "UPDATE conversations SET bound_session_id = NULL, next_session_reason = $1, \
             updated_at = $2 WHERE id = $3",
        )
        .bind(next_reason.map(|r| r.as_str()))
        .bind(self.now_ms())
        .bind(id.as_str())
        .execute(&mut *tx)
        .await?;
        add_message(&mut tx, id, MessageRole::Command, status_text, None, None).await?;
        self.commit_fenced(tx).await?;
        self.changed(id);
        Ok(prev.map(SessionId::from))
    }

    /// Creates a session, binds it to its conversation, and records `session_started`
    /// (plus the status message explaining why, if any), all in one transaction.
    pub async fn start_session(
        &self,
        s: &NewSession,
        reason: NewSessionReason,
        status_message: Option<&str>,
    ) -> Result<(Session, Vec<EventEnvelope>)> {
        let now = self.now_ms();
        let mut tx = self.writer.begin().await?;
        sqlx::query(
            "INSERT INTO sessions (id, conversation_id, agent, model, cwd, status, external_id, \
             created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, NULL, $7, $8)",
        )
        .bind(s.id.as_str())
        .bind(s.conversation_id.as_str())
        .bind(&s.agent)
        .bind(&s.model)
        .bind(&s.cwd)
        .bind(SessionStatus::Dormant.as_str())
        .bind(now)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "UPDATE conversations SET bound_session_id = $1, next_session_reason = NULL, \
             updated_at = $2 WHERE id = $3",
        )
        .bind(s.id.as_str())
        .bind(now)
        .bind(s.conversation_id.as_str())
        .execute(&mut *tx)
        .await?;
        let mut events = vec![
            self.append_in(
                &mut tx,
                &s.id,
                None,
                &EventPayload::SessionStarted {
                    agent: s.agent.clone(),
                    model: s.model.clone(),
                    reason,
                },
            )
            .await?,
        ];
        if let Some(text) = status_message {
            add_message(
                &mut tx,
                &s.conversation_id,
                MessageRole::Status,
                text,
                Some(&s.id),
                None,
            )
            .await?;
            events.push(
                self.append_in(
                    &mut tx,
                    &s.id,
                    None,
                    &EventPayload::Status {
                        text: text.to_string(),
                    },
                )
                .await?,
            );
        }
        self.commit_events(tx, &events).await?;
        let session = Session {
            id: s.id.clone(),
            conversation_id: s.conversation_id.clone(),
            agent: s.agent.clone(),
            model: s.model.clone(),
            cwd: s.cwd.clone(),
            status: SessionStatus::Dormant,
            external_id: None,
            created_at_ms: now,
            updated_at_ms: now,
        };
        Ok((session, events))
    }

    pub async fn get_session(&self, id: &SessionId) -> Result<Option<Session>> {
        let row = sqlx::query("SELECT * FROM sessions WHERE id = $1")
            .bind(id.as_str())
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(rows::session).transpose()
    }

    /// The session of `agent` that carries the agent session id `external_id`, if any.
    pub async fn session_with_external_id(
        &self,
        agent: &str,
        external_id: &str,
    ) -> Result<Option<SessionId>> {
        let row: Option<(String,)> =
            sqlx::query_as("SELECT id FROM sessions WHERE agent = $1 AND external_id = $2")
                .bind(agent)
                .bind(external_id)
                .fetch_optional(&self.reader)
                .await?;
        Ok(row.map(|(id,)| SessionId::from(id)))
    }

    /// A conversation's sessions, oldest first.
    pub async fn list_sessions(&self, conversation_id: &ConversationId) -> Result<Vec<Session>> {
        let rows = sqlx::query(
            "SELECT * FROM sessions WHERE conversation_id = $1 ORDER BY created_at, id",
        )
        .bind(conversation_id.as_str())
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(rows::session).collect()
    }

    /// Sets a session's status (and external id when given) with an event, together.
    pub async fn set_session_status(
        &self,
        id: &SessionId,
        status: SessionStatus,
        external_id: Option<&str>,
        event: Option<&EventPayload>,
    ) -> Result<Option<EventEnvelope>> {
        let mut tx = self.writer.begin().await?;
        let conversation: Option<(String,)> = sqlx::query_as(
            "UPDATE sessions SET status = $1, external_id = COALESCE($2, external_id), \
             updated_at = $3 WHERE id = $4 RETURNING conversation_id",
        )
        .bind(status.as_str())
        .bind(external_id)
        .bind(self.now_ms())
        .bind(id.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        if let Some((c,)) = conversation {
            tx.note_on_behalf(&ConversationId::from(c));
        }
        let ev = match event {
            Some(p) => Some(self.append_in(&mut tx, id, None, p).await?),
            None => None,
        };
        self.commit_events(tx, ev.as_slice()).await?;
        Ok(ev)
    }
}
