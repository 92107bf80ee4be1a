//! Attachment rows (migration 0007). The bytes are not here: the runtime keeps them in
//! the data dir under their SHA-256 and asks this module which blobs are still named.

use super::{Sql, SqlRow};
use sqlx::Row;

use tether_proto::{Attachment, AttachmentId, AttachmentKind, ConversationId, TurnId};

use super::rows::{id, opt_id};

use super::Db;
use crate::{Result, StoreError};

fn kind_str(kind: AttachmentKind) -> &'static str {
    match kind {
        AttachmentKind::Image => "image",
        AttachmentKind::File => "file",
    }
}

fn attachment(row: &SqlRow) -> Result<Attachment> {
    let kind: String = row.try_get("kind")?;
    let kind = match kind.as_str() {
        "image" => AttachmentKind::Image,
        "file" => AttachmentKind::File,
        other => {
            return Err(StoreError::Corrupt {
                table: "attachments",
                detail: format!("unknown kind {other:?}"),
            });
        }
    };
    let size: i64 = row.try_get("size")?;
    Ok(Attachment {
        id: id(row, "id")?,
        conversation_id: id(row, "conversation_id")?,
        name: row.try_get("name")?,
        mime: row.try_get("mime")?,
        kind,
        size: u64::try_from(size).unwrap_or(0),
        sha256: row.try_get("sha256")?,
        turn_id: opt_id(row, "turn_id")?,
        created_at_ms: row.try_get("created_at")?,
    })
}

/// A turn a file claimed for it is sent with: it ran (`started_at` is set) or is queued
/// to run. A subquery to finish with `AND t.id = …`.
const SENDING_TURN: &str =
    "SELECT 1 FROM turns t WHERE (t.started_at IS NOT NULL OR t.status = 'queued')";

impl Db {
    /// Records attachments whose bytes are stored already, all or none, in one
    /// transaction; `created_at_ms` is set here.
    pub async fn insert_attachments(&self, rows: &[Attachment]) -> Result<Vec<Attachment>> {
        let mut tx = self.writer.begin().await?;
        let now = self.now_ms();
        let mut out = Vec::with_capacity(rows.len());
        for a in rows {
            let row = sqlx::query(
                "INSERT INTO attachments \
                 (id, conversation_id, name, mime, kind, size, sha256, turn_id, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING *",
            )
            .bind(a.id.as_str())
            .bind(a.conversation_id.as_str())
            .bind(&a.name)
            .bind(&a.mime)
            .bind(kind_str(a.kind))
            .bind(i64::try_from(a.size).unwrap_or(i64::MAX))
            .bind(&a.sha256)
            .bind(a.turn_id.as_deref())
            .bind(now)
            .fetch_one(&mut *tx)
            .await?;
            out.push(attachment(&row)?);
        }
        tx.commit().await?;
        Ok(out)
    }

    pub async fn get_attachment(&self, attachment_id: &AttachmentId) -> Result<Option<Attachment>> {
        let row = sqlx::query("SELECT * FROM attachments WHERE id = $1")
            .bind(attachment_id.as_str())
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(attachment).transpose()
    }

    /// Whether a file claimed for `turn_id` is sent with it ([`SENDING_TURN`]): that turn
    /// ran or is queued to. A file of any other claim is free.
    pub async fn sent_with(&self, turn_id: &TurnId) -> Result<bool> {
        let sql = format!("SELECT EXISTS ({SENDING_TURN} AND t.id = $1)");
        let sent: bool = sqlx::query_scalar(&sql)
            .bind(turn_id.as_str())
            .fetch_one(&self.reader)
            .await?;
        Ok(sent)
    }

    /// Gives not yet sent attachments to a turn; the number of rows claimed (an id of
    /// another conversation, unknown or sent already is not claimed). A file is sent
    /// with a turn that ran or is queued to ([`SENDING_TURN`]); one claimed for a turn
    /// that was never stored (a crash between the claim and the turn) or that ended
    /// without running (refused: a full queue) is free, and claimed again. Files an
    /// earlier try of this same turn id claimed (a channel's message replayed after a
    /// crash, its files fetched again) are let go first, so the turn gets each file
    /// once. The caller holds the conversation's routing lock, so no message of it is
    /// between a claim and its turn.
    pub async fn claim_attachments(
        &self,
        conversation_id: &ConversationId,
        ids: &[&AttachmentId],
        turn_id: &TurnId,
    ) -> Result<u64> {
        let mut tx = self.writer.begin().await?;
        sqlx::query(&format!(
            "UPDATE attachments SET turn_id = NULL WHERE turn_id = $1 AND conversation_id = $2 \
             AND NOT EXISTS ({SENDING_TURN} AND t.id = $1)"
        ))
        .bind(turn_id.as_str())
        .bind(conversation_id.as_str())
        .execute(&mut *tx)
        .await?;
        let mut claimed = 0;
        for a in ids {
            claimed += sqlx::query(&format!(
                "UPDATE attachments SET turn_id = $1 \
                 WHERE id = $2 AND conversation_id = $3 AND (turn_id IS NULL \
                 OR NOT EXISTS ({SENDING_TURN} AND t.id = attachments.turn_id))"
            ))
            .bind(turn_id.as_str())
            .bind(a.as_str())
            .bind(conversation_id.as_str())
            .execute(&mut *tx)
            .await?
            .rows_affected();
        }
        tx.commit().await?;
        Ok(claimed)
    }

    /// Stores a history entry that carries attachments (a `/file` reply): the entry and
    /// the attachments' link to it in one transaction. Only attachments of this
    /// conversation that belong to no turn or message yet are linked. The entry's id.
    pub async fn add_message_with_attachments(
        &self,
        conversation_id: &ConversationId,
        role: tether_proto::MessageRole,
        text: &str,
        ids: &[&AttachmentId],
    ) -> Result<i64> {
        let mut tx = self.writer.begin().await?;
        let message_id =
            super::events::add_message(&mut tx, conversation_id, role, text, None, None).await?;
        for a in ids {
            sqlx::query(
                "UPDATE attachments SET message_id = $1 \
                 WHERE id = $2 AND conversation_id = $3 AND turn_id IS NULL AND message_id IS NULL",
            )
            .bind(message_id)
            .bind(a.as_str())
            .bind(conversation_id.as_str())
            .execute(&mut *tx)
            .await?;
        }
        self.commit_fenced(tx).await?;
        Ok(message_id)
    }

    /// The attachments of these history entries, each with its entry's id, in upload
    /// order.
    pub async fn attachments_of_messages(
        &self,
        message_ids: &[i64],
    ) -> Result<Vec<(i64, Attachment)>> {
        if message_ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut q =
            sqlx::QueryBuilder::<Sql>::new("SELECT * FROM attachments WHERE message_id IN (");
        let mut list = q.separated(", ");
        for id in message_ids {
            list.push_bind(*id);
        }
        q.push(") ORDER BY created_at, rowid");
        let rows = q.build().fetch_all(&self.reader).await?;
        rows.iter()
            .map(|r| Ok((r.try_get("message_id")?, attachment(r)?)))
            .collect()
    }

    /// Frees the attachments given to a turn that was never stored.
    pub async fn release_attachments(&self, turn_id: &TurnId) -> Result<()> {
        sqlx::query("UPDATE attachments SET turn_id = NULL WHERE turn_id = $1")
            .bind(turn_id.as_str())
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// The attachments a turn's message carried, in upload order.
    pub async fn turn_attachments(&self, turn_id: &TurnId) -> Result<Vec<Attachment>> {
        let rows =
            sqlx::query("SELECT * FROM attachments WHERE turn_id = $1 ORDER BY created_at, rowid")
                .bind(turn_id.as_str())
                .fetch_all(&self.reader)
                .await?;
        rows.iter().map(attachment).collect()
    }

    /// The attachments of several turns (a history page), in upload order.
    pub async fn attachments_of_turns(&self, turn_ids: &[TurnId]) -> Result<Vec<Attachment>> {
        if turn_ids.is_empty() {
            return Ok(Vec::new());
        }
        let marks = (1..=turn_ids.len())
            .map(|i| format!("${i}"))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "SELECT * FROM attachments WHERE turn_id IN ({marks}) ORDER BY created_at, rowid"
        );
        let mut q = sqlx::query(&sql);
        for t in turn_ids {
            q = q.bind(t.as_str());
        }
        let rows = q.fetch_all(&self.reader).await?;
        rows.iter().map(attachment).collect()
    }

    /// Deletes a conversation's attachment rows; the content hashes no row names any
    /// more (their blobs may be deleted).
    pub async fn delete_conversation_attachments(
        &self,
        conversation_id: &ConversationId,
    ) -> Result<Vec<String>> {
        let mut tx = self.writer.begin().await?;
        let hashes: Vec<(String,)> =
            sqlx::query_as("DELETE FROM attachments WHERE conversation_id = $1 RETURNING sha256")
                .bind(conversation_id.as_str())
                .fetch_all(&mut *tx)
                .await?;
        let mut unused = Vec::new();
        for (sha,) in hashes {
            let (left,): (i64,) =
                sqlx::query_as("SELECT COUNT(*) FROM attachments WHERE sha256 = $1")
                    .bind(&sha)
                    .fetch_one(&mut *tx)
                    .await?;
            if left == 0 && !unused.contains(&sha) {
                unused.push(sha);
            }
        }
        tx.commit().await?;
        Ok(unused)
    }

    /// The `detail` of a turn's edit tool calls (`kind = "edit"`), oldest first: where the
    /// files an agent changed are named.
    pub async fn turn_edit_details(
        &self,
        conversation_id: &ConversationId,
        turn_id: &TurnId,
    ) -> Result<Vec<serde_json::Value>> {
        let rows: Vec<(String,)> = sqlx::query_as(
            "SELECT payload FROM events \
             WHERE conversation_num = (SELECT num FROM conversations WHERE id = $1) \
             AND turn_id = $2 AND kind = 'tool_call' ORDER BY id",
        )
        .bind(conversation_id.as_str())
        .bind(turn_id.as_str())
        .fetch_all(&self.reader)
        .await?;
        let mut out = Vec::new();
        for (payload,) in rows {
            let v: serde_json::Value =
                serde_json::from_str(&payload).map_err(|e| StoreError::Corrupt {
                    table: "events",
                    detail: e.to_string(),
                })?;
            if v["kind"] == "edit" {
                out.push(v["detail"].clone());
            }
        }
        Ok(out)
    }

    /// Whether any row names this content (a blob without one may be deleted).
    pub async fn attachment_blob_used(&self, sha256: &str) -> Result<bool> {
        let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM attachments WHERE sha256 = $1")
            .bind(sha256)
            .fetch_one(&self.writer)
            .await?;
        Ok(n > 0)
    }
}
