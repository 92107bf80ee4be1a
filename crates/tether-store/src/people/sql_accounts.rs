//! Channel accounts linked to people, and the one-time codes that confirm a link, in SQL
//! (see `people/mod.rs`). An account belongs to at most one person (its primary key); a
//! code is taken once: the check and the write are one statement, so two tries of one
//! code cannot both win.

use super::SqlRow;
use sqlx::Row;

use tether_proto::PersonId;

use super::Db;
use crate::people::{AccountRow, LinkCodeRow};
use crate::{Result, StoreError};

fn account(row: &SqlRow) -> Result<AccountRow> {
    Ok(AccountRow {
        channel: row.try_get("channel")?,
        user_id: row.try_get("user_id")?,
        user_name: row.try_get("user_name")?,
        person_id: super::rows::id(row, "person_id")?,
        linked_at_ms: row.try_get("linked_at")?,
        linked_by: row.try_get("linked_by")?,
    })
}

fn code(row: &SqlRow) -> Result<LinkCodeRow> {
    let channel: Option<String> = row.try_get("channel")?;
    let user_id: Option<String> = row.try_get("user_id")?;
    let user_name: Option<String> = row.try_get("user_name")?;
    let person: Option<String> = row.try_get("person_id")?;
    Ok(LinkCodeRow {
        hash: row.try_get("hash")?,
        account: match (channel, user_id) {
            (Some(c), Some(u)) => Some((c, u.clone(), user_name.unwrap_or(u))),
            _ => None,
        },
        person_id: person.map(PersonId::from),
        created_at_ms: row.try_get("created_at")?,
        expires_at_ms: row.try_get("expires_at")?,
    })
}

impl Db {
    /// Links a channel account to a person (`linked_at` set here). An account linked
    /// already (to anyone) is [`StoreError::Duplicate`]: unlink it first.
    pub async fn link_account(
        &self,
        channel: &str,
        user_id: &str,
        user_name: &str,
        person: &PersonId,
        by: &str,
    ) -> Result<AccountRow> {
        let row = sqlx::query(
            "INSERT INTO channel_accounts (channel, user_id, user_name, person_id, linked_at, \
             linked_by) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING RETURNING *",
        )
        .bind(channel)
        .bind(user_id)
        .bind(user_name)
        .bind(person.as_str())
        .bind(self.now_ms())
        .bind(by)
        .fetch_optional(&self.writer)
        .await?;
        match row {
            Some(row) => account(&row),
            None => Err(StoreError::Duplicate {
                what: "channel account (linked already)",
            }),
        }
    }

    /// Unlinks an account; `None` when it was not linked.
    pub async fn unlink_account(&self, channel: &str, user_id: &str) -> Result<Option<AccountRow>> {
        let row = sqlx::query(
            "DELETE FROM channel_accounts WHERE channel = $1 AND user_id = $2 RETURNING *",
        )
        .bind(channel)
        .bind(user_id)
        .fetch_optional(&self.writer)
        .await?;
        row.as_ref().map(account).transpose()
    }

    /// The person an account is linked to, if any.
    pub async fn channel_account(&self, channel: &str, user_id: &str) -> Result<Option<AccountRow>> {
        let row =
            sqlx::query("SELECT * FROM channel_accounts WHERE channel = $1 AND user_id = $2")
                .bind(channel)
                .bind(user_id)
                .fetch_optional(&self.reader)
                .await?;
        row.as_ref().map(account).transpose()
    }

    /// The accounts of `person` (everyone's: `None`), oldest link first.
    pub async fn list_accounts(&self, person: Option<&PersonId>) -> Result<Vec<AccountRow>> {
        let rows = sqlx::query(
            "SELECT * FROM channel_accounts WHERE ($1 IS NULL OR person_id = $1) \
             ORDER BY linked_at, channel, user_id",
        )
        .bind(person.map(PersonId::as_str))
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(account).collect()
    }

    /// Stores a code (its hash) that expires `ttl_ms` from the store's now, for an account
    /// (made on the channel) or for a person (made on the page); returns when it expires.
    /// Codes expired over a day ago are deleted here.
    pub async fn add_link_code(
        &self,
        hash: &str,
        account: Option<(&str, &str, &str)>,
        person: Option<&PersonId>,
        ttl_ms: i64,
    ) -> Result<i64> {
        let now = self.now_ms();
        let expires_at_ms = now + ttl_ms;
        let mut tx = self.writer.begin().await?;
        sqlx::query("DELETE FROM link_codes WHERE expires_at < $1")
            .bind(now - 24 * 3600 * 1000)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO link_codes (hash, channel, user_id, user_name, person_id, created_at, \
             expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(hash)
        .bind(account.map(|a| a.0))
        .bind(account.map(|a| a.1))
        .bind(account.map(|a| a.2))
        .bind(person.map(PersonId::as_str))
        .bind(now)
        .bind(expires_at_ms)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(expires_at_ms)
    }

    /// Takes the code with `hash`: once, and only before it expires. `None`: unknown,
    /// used or expired (one answer for all three, so a guess learns nothing).
    pub async fn take_link_code(&self, hash: &str) -> Result<Option<LinkCodeRow>> {
        let now = self.now_ms();
        let row = sqlx::query(
            "UPDATE link_codes SET used_at = $2 WHERE hash = $1 AND used_at IS NULL \
             AND expires_at > $2 RETURNING *",
        )
        .bind(hash)
        .bind(now)
        .fetch_optional(&self.writer)
        .await?;
        row.as_ref().map(code).transpose()
    }

    /// Hands the conversation `id` to `person` (a channel account's own chat, once the
    /// account is linked to them). Returns whether it changed.
    pub async fn set_conversation_owner(
        &self,
        id: &tether_proto::ConversationId,
        person: &PersonId,
        visibility: tether_proto::Visibility,
    ) -> Result<bool> {
        let res = sqlx::query(
            "UPDATE conversations SET owner_id = $2, visibility = $3 WHERE id = $1 \
             AND (owner_id IS NULL OR owner_id <> $2 OR visibility <> $3)",
        )
        .bind(id.as_str())
        .bind(person.as_str())
        .bind(visibility.as_str())
        .execute(&self.writer)
        .await?;
        Ok(res.rows_affected() > 0)
    }
}
