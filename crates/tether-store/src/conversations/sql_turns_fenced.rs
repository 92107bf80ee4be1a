//! A message's turn stored running, and a turn's end, in one statement each with their
//! fence folded in (compiled once per backend; used where the dialect has
//! `ADD_STARTED_TURN_FENCED` and `FINISH_TURN_FENCED`, i.e. PostgreSQL).
//!
//! The general paths (`sql_turns.rs`) cost seven and eight round trips to the server
//! on a node that holds the conversation's epoch: `BEGIN`, each row, the fence's read
//! of the `owners` row, `COMMIT` (issue 33 item 2: most of the PostgreSQL share of a
//! turn). Here one statement locks the `owners` row (shared, as the fence's read does,
//! so a take-over waits for it), writes only while the epoch is still ours, and commits
//! on its own: refused, it stored nothing. The end names only its turn: the epoch to
//! check is the one held for the conversation this node started the turn in
//! (`Held::note_turn`); a turn it did not start ends on the general path.

use tether_proto::{ConversationId, EventEnvelope, EventPayload, MessageRole, SessionId, TurnId};

use super::Db;
use super::conns::Tx;
use super::usage::{ALONE_IF_OK, bind_usage, renumbered};
use crate::{FinishedTurn, NewTurn, Result, StartedTurn, StoreError, rules};

use super::turns_at_once::{EndParts, bind_end};

/// The end's parameters before the usage row's (`FINISH_TURN_FENCED`).
const END_PARAMS: usize = 14;

/// The usage row's step of the end's statement, numbered after the end's parameters.
static LEDGER_STEP: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(", l AS ({})", renumbered(ALONE_IF_OK, END_PARAMS + 1))
});

fn corrupt(detail: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        table: "events",
        detail: detail.into(),
    }
}

fn json<T: serde::Serialize>(v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|e| corrupt(e.to_string()))
}

impl Db {
    /// [`Db::insert_started_turn`] in one statement: `sql` is the dialect's
    /// `ADD_STARTED_TURN_FENCED`.
    pub(super) async fn insert_started_turn_fenced(
        &self,
        sql: &str,
        t: &NewTurn,
        traceparent: Option<&str>,
    ) -> Result<StartedTurn> {
        let payload = EventPayload::TurnStarted {
            input: t.input.clone(),
            traceparent: traceparent.map(str::to_owned),
        };
        let epoch = self.shared.held.get(&t.conversation_id);
        let mut tx = Tx::autocommit_on(self.writer.acquire().await?);
        let now = tx.now_ms();
        type Answer = (bool, Option<i64>, Option<i64>, i64, Option<String>, Option<i64>);
        let ran: std::result::Result<Answer, sqlx::Error> = sqlx::query_as(sql)
            .bind(t.id.as_str())
            .bind(t.session_id.as_str())
            .bind(t.conversation_id.as_str())
            .bind(&t.input)
            .bind(now)
            .bind(MessageRole::User.as_str())
            .bind(json(&payload)?)
            .bind(epoch)
            .fetch_one(&mut *tx)
            .await;
        let (ok, id, seq, files, node, row_epoch) = match ran {
            Ok(answer) => answer,
            Err(e) => {
                tx.statement_failed(&e);
                return Err(e.into());
            }
        };
        if !ok {
            tx.statement_done();
            let held = epoch.unwrap_or_default();
            let now = node.zip(row_epoch);
            return Err(self.refuse(t.conversation_id.clone(), held, now, true));
        }
        let (Some(id), Some(seq)) = (id, seq) else {
            // The session is not the conversation's: nothing was stored.
            tx.statement_done();
            return Err(sqlx::Error::RowNotFound.into());
        };
        self.shared.held.note_turn(&t.id, &t.conversation_id);
        let ev = EventEnvelope {
            id,
            session_id: t.session_id.clone(),
            conversation_id: t.conversation_id.clone(),
            seq,
            turn_id: Some(t.id.clone()),
            at_ms: now,
            payload,
        };
        tx.note_on_behalf(&t.conversation_id);
        tx.note_appended(1);
        self.commit_events(tx, std::slice::from_ref(&ev)).await?;
        Ok(StartedTurn {
            event: ev,
            has_attachments: files > 0,
        })
    }

    /// [`Db::finish_turn_with_usage`] in one statement: `parts` of the dialect's
    /// `FINISH_TURN_FENCED`; `conversation` the turn's, when this node started it (its
    /// epoch is checked), `None` when no epoch is held at all.
    pub(super) async fn finish_turn_fenced(
        &self,
        (head, mid, select): (&str, &str, &str),
        turn_id: &TurnId,
        conversation: Option<&ConversationId>,
        parts: EndParts<'_>,
    ) -> Result<FinishedTurn> {
        let EndParts {
            end,
            event,
            message,
            usage,
            streamed,
        } = parts;
        let statuses = rules::turns_that_can_become(end.status);
        let sql = match usage {
            Some(_) => format!("{head}{statuses}{mid}{} {select}(SELECT id FROM l)", *LEDGER_STEP),
            None => format!("{head}{statuses}{mid} {select}NULL::bigint"),
        };
        let mut kinds = Vec::with_capacity(streamed.len() + 1);
        let mut payloads = Vec::with_capacity(streamed.len() + 1);
        for p in streamed.iter().chain(std::iter::once(event)) {
            kinds.push(p.kind());
            payloads.push(json(p)?);
        }
        let epoch = conversation.and_then(|c| self.shared.held.get(c));
        let mut tx = Tx::autocommit_on(self.writer.acquire().await?);
        let now = tx.now_ms();
        let q = bind_end(sqlx::query_as(&sql), end, now, turn_id)
            .bind(json(&kinds)?)
            .bind(json(&payloads)?)
            .bind(message.map(|m| m.role.as_str()))
            .bind(message.map(|m| m.text.as_str()))
            .bind(conversation.map(ConversationId::as_str))
            .bind(epoch);
        let q = match usage {
            Some(u) => bind_usage(q, u, now),
            None => q,
        };
        type Answer = (
            bool,
            Option<String>,
            Option<String>,
            Option<String>,
            Option<String>,
            Option<String>,
            Option<i64>,
            Option<i64>,
        );
        let ran: std::result::Result<Answer, sqlx::Error> = q.fetch_one(&mut *tx).await;
        let (ok, session, conv, ids, seqs, node, row_epoch, ledger) = match ran {
            Ok(answer) => answer,
            Err(e) => {
                tx.statement_failed(&e);
                return Err(e.into());
            }
        };
        self.shared.held.forget_turn(turn_id);
        if !ok {
            tx.statement_done();
            let (Some(c), Some(held)) = (conversation, epoch) else {
                return Err(corrupt("a turn's end was refused without a fence"));
            };
            return Err(self.refuse(c.clone(), held, node.zip(row_epoch), true));
        }
        let usage_stored = ledger.is_some();
        let (Some(session), Some(conv), Some(ids), Some(seqs)) = (session, conv, ids, seqs) else {
            // The turn could not end (it had ended already): only the usage row, if any.
            tx.statement_done();
            return Ok(FinishedTurn {
                event: None,
                usage_stored,
                streamed: Vec::new(),
            });
        };
        let ids: Vec<i64> = serde_json::from_str(&ids).map_err(|e| corrupt(e.to_string()))?;
        let seqs: Vec<i64> = serde_json::from_str(&seqs).map_err(|e| corrupt(e.to_string()))?;
        if ids.len() != kinds.len() || seqs.len() != kinds.len() {
            return Err(corrupt(format!(
                "a turn's end stored {} of its {} events",
                ids.len(),
                kinds.len()
            )));
        }
        let session_id = SessionId::from(session);
        let conversation_id = ConversationId::from(conv);
        let mut events: Vec<EventEnvelope> = streamed
            .iter()
            .chain(std::iter::once(event))
            .zip(ids.into_iter().zip(seqs))
            .map(|(payload, (id, seq))| EventEnvelope {
                id,
                session_id: session_id.clone(),
                conversation_id: conversation_id.clone(),
                seq,
                turn_id: Some(turn_id.clone()),
                at_ms: now,
                payload: payload.clone(),
            })
            .collect();
        tx.note_on_behalf(&conversation_id);
        tx.note_appended(events.len());
        self.commit_events(tx, &events).await?;
        let ev = events.pop();
        Ok(FinishedTurn {
            event: ev,
            usage_stored,
            streamed: events,
        })
    }
}
