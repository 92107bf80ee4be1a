//! The schema check and migration of one backend (see `schema.rs`): read which applied
//! migrations this build does not know, decide, migrate, and record this build's own.

use sqlx::migrate::Migrator;

use super::SqlConnection;
use crate::Result;
use crate::backend::schema::{self, Unknown};

/// Checks the database's schema against this build's and migrates it.
pub(crate) async fn migrate(conn: &mut SqlConnection, embedded: &Migrator) -> Result<()> {
    let mut migrator = schema::migrator(embedded).await?;
    let known_max = migrator.iter().map(|m| m.version).max().unwrap_or(0);
    let unknown = unknown_applied(conn, known_max).await?;
    if schema::plan(known_max, &unknown)? {
        tracing::warn!(
            newest = unknown.iter().map(|u| u.migration).max().unwrap_or(0),
            known = known_max,
            "the database has newer expand-only migrations; running on it"
        );
        migrator.set_ignore_missing(true);
    }
    migrator.run(&mut *conn).await?;
    let version = schema::tether_version();
    for m in migrator.iter() {
        sqlx::query(
            "INSERT INTO schema_info (migration, tether_version, breaks_older) \
             VALUES ($1, $2, $3) ON CONFLICT (migration) DO NOTHING",
        )
        .bind(m.version)
        .bind(&version)
        .bind(i64::from(schema::breaks_older(m)))
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// The applied migrations newer than `known_max`, with what `schema_info` says of them
/// (none on a new database).
async fn unknown_applied(conn: &mut SqlConnection, known_max: i64) -> Result<Vec<Unknown>> {
    let applied: Vec<i64> =
        match sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE version > $1")
            .bind(known_max)
            .fetch_all(&mut *conn)
            .await
        {
            Ok(v) => v,
            // A new database: no migrations table yet.
            Err(_) => return Ok(Vec::new()),
        };
    let mut out = Vec::with_capacity(applied.len());
    for migration in applied {
        let row: Option<(String, i64)> = sqlx::query_as(
            "SELECT tether_version, breaks_older FROM schema_info WHERE migration = $1",
        )
        .bind(migration)
        .fetch_optional(&mut *conn)
        .await
        .unwrap_or(None);
        out.push(Unknown {
            migration,
            tether_version: row.as_ref().map(|r| r.0.clone()),
            breaks_older: row.is_some_and(|r| r.1 != 0),
        });
    }
    Ok(out)
}
