//! API views assembled from stored rows: the conversation with its binding and derived
//! state, and the `/status` and `/sessions` replies.

use tether_core::{
    BoundSession, Preferences, SessionRow, StateInputs, StatusView, derive_state, pending_switch,
};
use tether_proto::{Binding, Conversation, ConversationId, SessionId, TurnStatus};
use tether_store::{ConversationRow, ViewParts};

use crate::RuntimeError;
use crate::conversations::Conversations;
use crate::error::Result;

/// One conversation's view from the rows read for its page.
fn assemble(row: ConversationRow, parts: &ViewParts) -> Conversation {
    let session = row
        .bound_session_id
        .as_ref()
        .and_then(|sid| parts.sessions.iter().find(|s| s.id == *sid))
        .cloned();
    let open: Vec<_> = parts
        .open_turns
        .iter()
        .filter(|t| t.conversation_id == row.id)
        .collect();
    let bound_id = session.as_ref().map(|s| &s.id);
    let running = open
        .iter()
        .find(|t| t.status != TurnStatus::Queued && Some(&t.session_id) == bound_id);
    let queue_len = open
        .iter()
        .filter(|t| t.status == TurnStatus::Queued && Some(&t.session_id) == bound_id)
        .count();
    // State and pending lists come from the bound session only: a session the
    // conversation left is not what the conversation waits on.
    let approvals: Vec<_> = parts
        .pending_approvals
        .iter()
        .filter(|a| a.conversation_id == row.id && Some(&a.session_id) == bound_id)
        .collect();
    let questions: Vec<_> = parts
        .pending_questions
        .iter()
        .filter(|q| q.conversation_id == row.id && Some(&q.session_id) == bound_id)
        .collect();
    let state = derive_state(&StateInputs {
        bound: session.is_some(),
        running_turn: running.map(|t| t.status),
        pending_approvals: approvals.len(),
        pending_questions: questions.len(),
    });
    Conversation {
        id: row.id,
        kind: row.kind,
        title: row.title,
        agent: row.agent,
        model: row.model,
        cwd: row.cwd,
        archived: row.archived,
        state,
        binding: session.map(|s| Binding {
            session_id: s.id,
            agent: s.agent,
            model: s.model,
            status: s.status,
            external_id: s.external_id,
        }),
        queue_len: queue_len as u32,
        running_turn_id: running.map(|t| t.id.clone()),
        pending_approvals: approvals.into_iter().map(|a| a.id.clone()).collect(),
        pending_questions: questions.into_iter().map(|q| q.id.clone()).collect(),
        owner_id: row.owner_id,
        visibility: row.visibility,
        created_at_ms: row.created_at_ms,
        updated_at_ms: row.updated_at_ms,
    }
}

/// ", N MB resident" for the processes whose memory could be read, else nothing.
fn process_rss(processes: &[tether_proto::PoolProcess]) -> String {
    let known: Vec<u64> = processes.iter().filter_map(|p| p.rss_bytes).collect();
    if known.is_empty() {
        return String::new();
    }
    let mb = known.iter().sum::<u64>() / (1024 * 1024);
    format!(", {mb} MB resident")
}

impl Conversations<'_> {
    pub(crate) async fn view(&self, row: ConversationRow) -> Result<Conversation> {
        let id = row.id.to_string();
        self.views(vec![row])
            .await?
            .pop()
            .ok_or(RuntimeError::NotFound {
                what: "conversation",
                id,
            })
    }

    /// The views of many conversations, from four reads in all (a page of the list).
    pub(crate) async fn views(&self, rows: Vec<ConversationRow>) -> Result<Vec<Conversation>> {
        let conversation_ids: Vec<&ConversationId> = rows.iter().map(|r| &r.id).collect();
        let session_ids: Vec<&SessionId> = rows
            .iter()
            .filter_map(|r| r.bound_session_id.as_ref())
            .collect();
        let parts = self
            .rt
            .ctx()
            .store
            .conversations()
            .view_parts(&conversation_ids, &session_ids)
            .await?;
        Ok(rows.into_iter().map(|row| assemble(row, &parts)).collect())
    }

    pub(crate) async fn status_text(&self, row: &ConversationRow) -> Result<String> {
        let view = self.view(row.clone()).await?;
        let pool = self.rt.pool_status();
        let (agent, model) = match &view.binding {
            Some(b) => (b.agent.clone(), b.model.clone()),
            None => (view.agent.clone(), view.model.clone()),
        };
        let bound = view.binding.as_ref().map(|b| BoundSession {
            session_id: b.session_id.clone(),
            agent: b.agent.clone(),
            model: b.model.clone(),
        });
        let prefs = Preferences {
            agent: view.agent.clone(),
            model: view.model.clone(),
        };
        let text = tether_core::status_text(&StatusView {
            agent,
            model,
            session_id: view.binding.as_ref().map(|b| b.session_id.clone()),
            session_status: view.binding.as_ref().map(|b| b.status),
            state: view.state,
            queue_len: view.queue_len as usize,
            pending_approvals: view.pending_approvals,
            pending_questions: view.pending_questions,
            pending_switch: pending_switch(bound.as_ref(), &prefs),
        });
        Ok(format!(
            "{text}\npool: {} live ({} busy, {} idle) of {}, {} evictions; {} agent processes{}",
            pool.live,
            pool.busy,
            pool.idle,
            if pool.max_live == 0 {
                "no limit".to_string()
            } else {
                pool.max_live.to_string()
            },
            pool.evictions,
            pool.process_count,
            process_rss(&pool.processes),
        ))
    }

    pub(crate) async fn sessions_text(&self, row: &ConversationRow) -> Result<String> {
        let sessions = self
            .rt
            .ctx()
            .store
            .conversations()
            .list_sessions(&row.id)
            .await?;
        let rows: Vec<SessionRow> = sessions
            .into_iter()
            .map(|s| SessionRow {
                bound: row.bound_session_id.as_ref() == Some(&s.id),
                id: s.id,
                agent: s.agent,
                model: s.model,
                status: s.status,
                created_at_ms: s.created_at_ms,
            })
            .collect();
        Ok(tether_core::sessions_text(&rows))
    }
}
