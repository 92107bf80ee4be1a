//! Forwarded commands (issue 12): a sender stores a command for a node, the node takes it
//! (only a pending one: two takers never both win), stores the reply, and the sender
//! reads it and removes the row; a sender whose node died abandons a command not taken
//! yet (again only a pending one). On PostgreSQL a stored command and a stored reply each
//! `NOTIFY` in their transaction, so the wake-up arrives with the commit (`dialect::NOTIFY`;
//! SQLite has none and is one node anyway).

use sqlx::Row;
use tether_proto::ConversationId;

use super::{Db, SqlRow, dialect};
use crate::cluster::commands::{COMMANDS_CHANNEL, CommandRow, CommandStatus, NewCommand, REPLIES_CHANNEL};
use crate::{Result, StoreError};

fn command(row: &SqlRow) -> Result<CommandRow> {
    let status: String = row.try_get("status")?;
    Ok(CommandRow {
        id: tether_proto::CommandId::new(row.try_get::<String, _>("id")?),
        to_node: tether_proto::NodeId::new(row.try_get::<String, _>("to_node")?),
        from_node: tether_proto::NodeId::new(row.try_get::<String, _>("from_node")?),
        conversation_id: row
            .try_get::<Option<String>, _>("conversation_id")?
            .map(ConversationId::from),
        body: row.try_get("body")?,
        status: CommandStatus::parse(&status).ok_or_else(|| StoreError::Corrupt {
            table: "commands",
            detail: format!("status {status:?}"),
        })?,
        reply: row.try_get("reply")?,
        created_at_ms: row.try_get("created_at")?,
        taken_at_ms: row.try_get("taken_at")?,
        answered_at_ms: row.try_get("answered_at")?,
    })
}

impl Db {
    /// Stores command `c` for its node (and wakes the node).
    pub async fn submit_command(&self, c: &NewCommand) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        sqlx::query(
            "INSERT INTO commands (id, to_node, from_node, conversation_id, body, status, \
             created_at) VALUES ($1, $2, $3, $4, $5, 'pending', $6)",
        )
        .bind(c.id.as_str())
        .bind(c.to_node.as_str())
        .bind(c.from_node.as_str())
        .bind(c.conversation_id.as_ref().map(ConversationId::as_str))
        .bind(&c.body)
        .bind(c.created_at_ms)
        .execute(&mut *tx)
        .await?;
        if let Some(notify) = dialect::NOTIFY {
            sqlx::query(notify)
                .bind(COMMANDS_CHANNEL)
                .bind(c.to_node.as_str())
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Node `node_id`'s commands not taken yet, oldest first (at most `limit`).
    pub async fn pending_commands(&self, node_id: &str, limit: u32) -> Result<Vec<CommandRow>> {
        let rows = sqlx::query(
            "SELECT * FROM commands WHERE to_node = $1 AND status = 'pending' \
             ORDER BY created_at, id LIMIT $2",
        )
        .bind(node_id)
        .bind(i64::from(limit))
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(command).collect()
    }

    /// Takes node `node_id`'s pending commands at `now_ms` in one statement, oldest first
    /// (at most `limit`): each is taken once (a command abandoned meanwhile is not).
    pub async fn take_pending_commands(
        &self,
        node_id: &str,
        now_ms: i64,
        limit: u32,
    ) -> Result<Vec<CommandRow>> {
        let rows = sqlx::query(
            "UPDATE commands SET status = 'taken', taken_at = $2 \
             WHERE status = 'pending' AND id IN (SELECT id FROM commands \
             WHERE to_node = $1 AND status = 'pending' ORDER BY created_at, id LIMIT $3) \
             RETURNING *",
        )
        .bind(node_id)
        .bind(now_ms)
        .bind(i64::from(limit))
        .fetch_all(&self.writer)
        .await?;
        let mut taken = rows.iter().map(command).collect::<Result<Vec<_>>>()?;
        // RETURNING keeps no order.
        taken.sort_by(|a, b| (a.created_at_ms, &a.id).cmp(&(b.created_at_ms, &b.id)));
        Ok(taken)
    }

    /// Takes pending command `id` for node `node_id` at `now_ms`: `false` when it is not
    /// pending for that node any more (taken, abandoned, gone).
    pub async fn take_command(&self, id: &str, node_id: &str, now_ms: i64) -> Result<bool> {
        let res = sqlx::query(
            "UPDATE commands SET status = 'taken', taken_at = $3 \
             WHERE id = $1 AND to_node = $2 AND status = 'pending'",
        )
        .bind(id)
        .bind(node_id)
        .bind(now_ms)
        .execute(&self.writer)
        .await?;
        Ok(res.rows_affected() == 1)
    }

    /// Stores the reply of taken command `id` (and wakes its sender): `false` when it was
    /// not taken (its sender gave up and removed it).
    pub async fn reply_command(&self, id: &str, reply: &str, now_ms: i64) -> Result<bool> {
        let mut tx = self.writer.begin().await?;
        let res = sqlx::query(
            "UPDATE commands SET status = 'answered', reply = $2, answered_at = $3 \
             WHERE id = $1 AND status = 'taken'",
        )
        .bind(id)
        .bind(reply)
        .bind(now_ms)
        .execute(&mut *tx)
        .await?;
        let answered = res.rows_affected() == 1;
        if answered && let Some(notify) = dialect::NOTIFY {
            sqlx::query(notify)
                .bind(REPLIES_CHANNEL)
                .bind(id)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(answered)
    }

    /// Gives pending command `id` up (its node died before taking it): `false` when it
    /// was taken meanwhile (or is gone).
    pub async fn abandon_command(&self, id: &str) -> Result<bool> {
        let res = sqlx::query(
            "UPDATE commands SET status = 'abandoned' WHERE id = $1 AND status = 'pending'",
        )
        .bind(id)
        .execute(&self.writer)
        .await?;
        Ok(res.rows_affected() == 1)
    }

    /// Command `id`, if stored.
    pub async fn get_command(&self, id: &str) -> Result<Option<CommandRow>> {
        let row = sqlx::query("SELECT * FROM commands WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(command).transpose()
    }

    /// Removes command `id` (its sender has the reply, or gave it up).
    pub async fn remove_command(&self, id: &str) -> Result<()> {
        sqlx::query("DELETE FROM commands WHERE id = $1")
            .bind(id)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// Removes commands stored before `before_ms` (their senders are gone): how many.
    pub async fn prune_commands(&self, before_ms: i64) -> Result<u64> {
        let res = sqlx::query("DELETE FROM commands WHERE created_at < $1")
            .bind(before_ms)
            .execute(&self.writer)
            .await?;
        Ok(res.rows_affected())
    }
}
