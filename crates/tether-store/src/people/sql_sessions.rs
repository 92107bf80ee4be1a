//! Sign-in sessions of the page and OpenID Connect sign-ins in flight, in SQL (see
//! `people/mod.rs`). Both are found by a hash, never by their secret; both are taken or
//! checked against the store's clock, so every node agrees on what has expired.

use super::SqlRow;
use sqlx::Row;

use tether_proto::PersonId;

use super::Db;
use crate::Result;
use crate::people::{OidcLoginRow, WebSessionRow};

fn session(row: &SqlRow) -> Result<WebSessionRow> {
    Ok(WebSessionRow {
        person_id: super::rows::id(row, "person_id")?,
        csrf: row.try_get("csrf")?,
        created_at_ms: row.try_get("created_at")?,
        expires_at_ms: row.try_get("expires_at")?,
    })
}

impl Db {
    /// The person with `email` (stored lower case), if any: who an OpenID Connect
    /// sign-in is.
    pub async fn person_by_email(&self, email: &str) -> Result<Option<crate::PersonRow>> {
        let row = sqlx::query("SELECT id FROM people WHERE email = $1")
            .bind(email)
            .fetch_optional(&self.reader)
            .await?;
        match row {
            Some(r) => {
                let id: String = r.try_get("id")?;
                self.get_person(&PersonId::from(id)).await
            }
            None => Ok(None),
        }
    }

    /// Stores a session for `person` that lasts `ttl_ms` (expired ones are deleted here).
    pub async fn add_web_session(
        &self,
        hash: &str,
        person: &PersonId,
        csrf: &str,
        ttl_ms: i64,
    ) -> Result<WebSessionRow> {
        let now = self.now_ms();
        let mut tx = self.writer.begin().await?;
        sqlx::query("DELETE FROM web_sessions WHERE expires_at < $1")
            .bind(now)
            .execute(&mut *tx)
            .await?;
        let row = sqlx::query(
            "INSERT INTO web_sessions (hash, person_id, csrf, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5) RETURNING *",
        )
        .bind(hash)
        .bind(person.as_str())
        .bind(csrf)
        .bind(now)
        .bind(now + ttl_ms)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        session(&row)
    }

    /// The live session with `hash`; `None` when unknown, ended or expired.
    pub async fn web_session(&self, hash: &str) -> Result<Option<WebSessionRow>> {
        let row = sqlx::query("SELECT * FROM web_sessions WHERE hash = $1 AND expires_at > $2")
            .bind(hash)
            .bind(self.now_ms())
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(session).transpose()
    }

    /// Ends a session (signing out); whether there was one.
    pub async fn end_web_session(&self, hash: &str) -> Result<bool> {
        let res = sqlx::query("DELETE FROM web_sessions WHERE hash = $1")
            .bind(hash)
            .execute(&self.writer)
            .await?;
        Ok(res.rows_affected() > 0)
    }

    /// Ends every session of `person` (disabled, or signing out everywhere); how many.
    pub async fn end_web_sessions_of(&self, person: &PersonId) -> Result<u64> {
        let res = sqlx::query("DELETE FROM web_sessions WHERE person_id = $1")
            .bind(person.as_str())
            .execute(&self.writer)
            .await?;
        Ok(res.rows_affected())
    }

    /// Keeps a sign-in in flight for `ttl_ms` (stale ones are deleted here).
    pub async fn add_oidc_login(
        &self,
        state_hash: &str,
        nonce: &str,
        verifier: &str,
        ttl_ms: i64,
    ) -> Result<()> {
        let now = self.now_ms();
        let mut tx = self.writer.begin().await?;
        sqlx::query("DELETE FROM oidc_logins WHERE expires_at < $1")
            .bind(now)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO oidc_logins (state_hash, nonce, verifier, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(state_hash)
        .bind(nonce)
        .bind(verifier)
        .bind(now)
        .bind(now + ttl_ms)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Takes the sign-in in flight with `state_hash`, once and before it expires: a
    /// replayed `state` finds nothing.
    pub async fn take_oidc_login(&self, state_hash: &str) -> Result<Option<OidcLoginRow>> {
        let row = sqlx::query(
            "DELETE FROM oidc_logins WHERE state_hash = $1 AND expires_at > $2 \
             RETURNING nonce, verifier",
        )
        .bind(state_hash)
        .bind(self.now_ms())
        .fetch_optional(&self.writer)
        .await?;
        row.map(|r| {
            Ok(OidcLoginRow {
                nonce: r.try_get("nonce")?,
                verifier: r.try_get("verifier")?,
            })
        })
        .transpose()
    }
}
