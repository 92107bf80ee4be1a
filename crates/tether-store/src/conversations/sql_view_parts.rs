//! What the conversation views are built from, read for many conversations at once: a
//! page of the conversation list costs four queries, not four per conversation.

use tether_proto::{ConversationId, SessionId};

use super::{Db, rows};
use crate::{Result, ViewParts};

/// `?, ?, …` for `n` values (`n ≥ 1`; SQLite allows 32 766 parameters).
/// `$1, …, $n`.
fn placeholders(n: usize) -> String {
    (1..=n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Db {
    /// The [`ViewParts`] of these conversations and sessions (in no particular order).
    pub async fn view_parts(
        &self,
        conversation_ids: &[&ConversationId],
        session_ids: &[&SessionId],
    ) -> Result<ViewParts> {
        let mut parts = ViewParts::default();
        if !session_ids.is_empty() {
            let sql = format!(
                "SELECT * FROM sessions WHERE id IN ({})",
                placeholders(session_ids.len())
            );
            let mut q = sqlx::query(&sql);
            for id in session_ids {
                q = q.bind(id.as_str());
            }
            let found = q.fetch_all(&self.reader).await?;
            parts.sessions = found.iter().map(rows::session).collect::<Result<_>>()?;
        }
        if conversation_ids.is_empty() {
            return Ok(parts);
        }
        let ids = placeholders(conversation_ids.len());
        // The partial indexes on open turns and pending requests keep these small scans.
        let turns = format!(
            "SELECT * FROM turns WHERE status IN \
             ('queued', 'running', 'waiting_approval', 'waiting_user') \
             AND conversation_id IN ({ids}) ORDER BY created_at, rowid"
        );
        let approvals = format!(
            "SELECT * FROM approvals WHERE status = 'pending' AND conversation_id IN ({ids}) \
             ORDER BY created_at DESC, id"
        );
        let questions = format!(
            "SELECT * FROM questions WHERE status = 'pending' AND conversation_id IN ({ids}) \
             ORDER BY created_at DESC, id"
        );
        let mut tq = sqlx::query(&turns);
        let mut aq = sqlx::query(&approvals);
        let mut qq = sqlx::query(&questions);
        for id in conversation_ids {
            tq = tq.bind(id.as_str());
            aq = aq.bind(id.as_str());
            qq = qq.bind(id.as_str());
        }
        let (t, a, q) = futures::try_join!(
            tq.fetch_all(&self.reader),
            aq.fetch_all(&self.reader),
            qq.fetch_all(&self.reader)
        )?;
        parts.open_turns = t.iter().map(rows::turn).collect::<Result<_>>()?;
        parts.pending_approvals = a.iter().map(rows::approval).collect::<Result<_>>()?;
        parts.pending_questions = q.iter().map(rows::question).collect::<Result<_>>()?;
        Ok(parts)
    }
}
