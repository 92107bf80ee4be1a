//! People and tokens in SQL (see `people/mod.rs`). Role changes and disabling keep at
//! least one enabled owner: the check and the write are one statement, so two admins
//! demoting the last two owners at once cannot both win.

use super::SqlRow;
use sqlx::Row;

use tether_proto::{PersonId, Role, TokenScope};

use super::Db;
use super::rows::id;
use crate::people::{NewPerson, NewToken, PersonRow, TokenRow, scopes_text};
use crate::{Result, StoreError};

fn person(row: &SqlRow) -> Result<PersonRow> {
    person_as(row, "")
}

/// A person's row whose columns are named with `prefix` (a join's).
fn person_as(row: &SqlRow, prefix: &str) -> Result<PersonRow> {
    let col = |name: &str| format!("{prefix}{name}");
    let role: String = row.try_get(col("role").as_str())?;
    Ok(PersonRow {
        id: id(row, &col("id"))?,
        name: row.try_get(col("name").as_str())?,
        email: row.try_get(col("email").as_str())?,
        role: Role::parse(&role).ok_or_else(|| StoreError::Corrupt {
            table: "people",
            detail: format!("unknown role {role:?}"),
        })?,
        disabled: row.try_get::<i64, _>(col("disabled").as_str())? != 0,
        created_at_ms: row.try_get(col("created_at").as_str())?,
        last_seen_at_ms: row.try_get(col("last_seen_at").as_str())?,
    })
}

fn token(row: &SqlRow) -> Result<TokenRow> {
    let scopes: String = row.try_get("scopes")?;
    let scopes = scopes
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| {
            TokenScope::parse(s).ok_or_else(|| StoreError::Corrupt {
                table: "api_tokens",
                detail: format!("unknown scope {s:?}"),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(TokenRow {
        id: row.try_get("id")?,
        person_id: id(row, "person_id")?,
        name: row.try_get("name")?,
        scopes,
        created_at_ms: row.try_get("created_at")?,
        expires_at_ms: row.try_get("expires_at")?,
        revoked_at_ms: row.try_get("revoked_at")?,
        last_used_at_ms: row.try_get("last_used_at")?,
    })
}

/// An update that would leave no enabled owner changes nothing: it applies only while
/// another enabled owner remains, or when the person stays an enabled owner.
const KEEPS_AN_OWNER: &str = "(SELECT COUNT(*) FROM people o \
     WHERE o.role = 'owner' AND o.disabled = 0 AND o.id <> $1) > 0";

impl Db {
    /// Adds a person (`created_at` set here). An email already taken is
    /// [`StoreError::Duplicate`].
    pub async fn add_person(&self, p: &NewPerson) -> Result<PersonRow> {
        let row = sqlx::query(
            "INSERT INTO people (id, name, email, role, disabled, created_at) \
             VALUES ($1, $2, $3, $4, 0, $5) ON CONFLICT DO NOTHING RETURNING *",
        )
        .bind(p.id.as_str())
        .bind(&p.name)
        .bind(&p.email)
        .bind(p.role.as_str())
        .bind(self.now_ms())
        .fetch_optional(&self.writer)
        .await?;
        match row {
            Some(row) => person(&row),
            None => Err(StoreError::Duplicate {
                what: "person (id or email)",
            }),
        }
    }

    /// The first enabled owner, made with `name` when there is none (the bootstrap owner
    /// an install's first token stands for; an upgraded single-token install gets its
    /// owner here).
    pub async fn ensure_owner(&self, id: &PersonId, name: &str) -> Result<PersonRow> {
        let existing = sqlx::query(
            "SELECT * FROM people WHERE role = 'owner' AND disabled = 0 \
             ORDER BY created_at, id LIMIT 1",
        )
        .fetch_optional(&self.writer)
        .await?;
        if let Some(row) = existing {
            return person(&row);
        }
        sqlx::query(
            "INSERT INTO people (id, name, role, disabled, created_at) \
             VALUES ($1, $2, 'owner', 0, $3) ON CONFLICT (id) DO UPDATE SET \
             role = 'owner', disabled = 0",
        )
        .bind(id.as_str())
        .bind(name)
        .bind(self.now_ms())
        .execute(&self.writer)
        .await?;
        let row = sqlx::query("SELECT * FROM people WHERE id = $1")
            .bind(id.as_str())
            .fetch_one(&self.writer)
            .await?;
        person(&row)
    }

    pub async fn get_person(&self, id: &PersonId) -> Result<Option<PersonRow>> {
        let row = sqlx::query("SELECT * FROM people WHERE id = $1")
            .bind(id.as_str())
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(person).transpose()
    }

    /// Everyone, oldest first.
    pub async fn list_people(&self) -> Result<Vec<PersonRow>> {
        let rows = sqlx::query("SELECT * FROM people ORDER BY created_at, id")
            .fetch_all(&self.reader)
            .await?;
        rows.iter().map(person).collect()
    }

    /// Sets a person's role and whether they are disabled; refused with
    /// [`StoreError::LastOwner`] when no enabled owner would remain. `None`: no such
    /// person.
    pub async fn set_person_access(
        &self,
        id: &PersonId,
        role: Role,
        disabled: bool,
    ) -> Result<Option<PersonRow>> {
        let stays_owner = role == Role::Owner && !disabled;
        let sql = format!(
            "UPDATE people SET role = $2, disabled = $3 WHERE id = $1 AND ($4 = 1 OR {KEEPS_AN_OWNER}) \
             RETURNING *"
        );
        let row = sqlx::query(&sql)
            .bind(id.as_str())
            .bind(role.as_str())
            .bind(i64::from(disabled))
            .bind(i64::from(stays_owner))
            .fetch_optional(&self.writer)
            .await?;
        match row {
            Some(row) => person(&row).map(Some),
            None => match self.get_person(id).await? {
                Some(_) => Err(StoreError::LastOwner),
                None => Ok(None),
            },
        }
    }

    /// Stores a token (its hash only; `created_at` set here).
    pub async fn add_token(&self, t: &NewToken) -> Result<TokenRow> {
        let row = sqlx::query(
            "INSERT INTO api_tokens (id, person_id, name, hash, scopes, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING *",
        )
        .bind(&t.id)
        .bind(t.person_id.as_str())
        .bind(&t.name)
        .bind(&t.hash)
        .bind(scopes_text(&t.scopes))
        .bind(self.now_ms())
        .bind(t.expires_at_ms)
        .fetch_one(&self.writer)
        .await?;
        token(&row)
    }

    /// The token whose secret hashes to `hash` and its person, used or not (the caller
    /// checks [`TokenRow::usable`] and the person's `disabled`).
    pub async fn token_by_hash(&self, hash: &str) -> Result<Option<(TokenRow, PersonRow)>> {
        // One read for both rows (every request of a personal token makes it); the
        // person's columns come under names of their own.
        let row = sqlx::query(
            "SELECT t.*, p.id AS p_id, p.name AS p_name, p.email AS p_email, \
             p.role AS p_role, p.disabled AS p_disabled, p.created_at AS p_created_at, \
             p.last_seen_at AS p_last_seen_at \
             FROM api_tokens t JOIN people p ON p.id = t.person_id WHERE t.hash = $1",
        )
        .bind(hash)
        .fetch_optional(&self.reader)
        .await?;
        let Some(row) = row else { return Ok(None) };
        Ok(Some((token(&row)?, person_as(&row, "p_")?)))
    }

    /// The tokens of `person` (everyone's: `None`), newest first.
    pub async fn list_tokens(&self, person: Option<&PersonId>) -> Result<Vec<TokenRow>> {
        let rows = sqlx::query(
            "SELECT * FROM api_tokens WHERE ($1 IS NULL OR person_id = $1) \
             ORDER BY created_at DESC, id",
        )
        .bind(person.map(PersonId::as_str))
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(token).collect()
    }

    /// Revokes token `id` (of `person`, when given) at the store's now; `false`: no such
    /// token (of theirs), or revoked already.
    pub async fn revoke_token(&self, id: &str, person: Option<&PersonId>) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE api_tokens SET revoked_at = $3 WHERE id = $1 AND revoked_at IS NULL \
             AND ($2 IS NULL OR person_id = $2)",
        )
        .bind(id)
        .bind(person.map(PersonId::as_str))
        .bind(self.now_ms())
        .execute(&self.writer)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    /// Records that token `id` and its person were just used (at most once per `every_ms`
    /// each, so a busy client does not write on every request).
    pub async fn touch_token(&self, id: &str, person: &PersonId, every_ms: i64) -> Result<()> {
        let now = self.now_ms();
        sqlx::query(
            "UPDATE api_tokens SET last_used_at = $2 WHERE id = $1 \
             AND (last_used_at IS NULL OR last_used_at < $3)",
        )
        .bind(id)
        .bind(now)
        .bind(now - every_ms)
        .execute(&self.writer)
        .await?;
        sqlx::query(
            "UPDATE people SET last_seen_at = $2 WHERE id = $1 \
             AND (last_seen_at IS NULL OR last_seen_at < $3)",
        )
        .bind(person.as_str())
        .bind(now)
        .bind(now - every_ms)
        .execute(&self.writer)
        .await?;
        Ok(())
    }
}
