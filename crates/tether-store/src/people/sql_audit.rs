//! The audit log in SQL (see `people/mod.rs`): appended, never changed, read newest
//! first by id in pages.

use super::SqlRow;
use sqlx::Row;

use tether_proto::{AuditAction, AuditEntry, PersonId};

use super::Db;
use crate::Result;
use crate::people::NewAudit;

fn entry(row: &SqlRow) -> Result<AuditEntry> {
    let action: String = row.try_get("action")?;
    let person: Option<String> = row.try_get("person_id")?;
    Ok(AuditEntry {
        id: row.try_get("id")?,
        at_ms: row.try_get("at")?,
        action: AuditAction::parse(&action),
        person_id: person.map(PersonId::from),
        by: row.try_get("by_name")?,
        target: row.try_get("target")?,
        detail: row.try_get("detail")?,
    })
}

impl Db {
    /// Appends `e` to the audit log at the store's now.
    pub async fn record_audit(&self, e: &NewAudit) -> Result<()> {
        sqlx::query(
            "INSERT INTO audit (at, action, person_id, by_name, target, detail) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(self.now_ms())
        .bind(e.action.as_str())
        .bind(e.person_id.as_ref().map(PersonId::as_str))
        .bind(&e.by)
        .bind(&e.target)
        .bind(&e.detail)
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    /// Up to `limit` entries older than entry `before` (from the newest: `None`), newest
    /// first.
    pub async fn audit_page(&self, before: Option<i64>, limit: u32) -> Result<Vec<AuditEntry>> {
        // A page after the first seeks to its place (`$1 IS NULL OR id < $1` would read
        // every newer entry first, on both backends: D273).
        let q = match before {
            Some(id) => sqlx::query("SELECT * FROM audit WHERE id < $1 ORDER BY id DESC LIMIT $2")
                .bind(id),
            None => sqlx::query("SELECT * FROM audit ORDER BY id DESC LIMIT $1"),
        };
        let rows = q.bind(i64::from(limit)).fetch_all(&self.reader).await?;
        rows.iter().map(entry).collect()
    }
}
