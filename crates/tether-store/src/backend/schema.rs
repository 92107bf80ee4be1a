//! Schema versions across tether versions (issue 31, rolling upgrades). Migrations are
//! *expand* steps by default: a node of the version before keeps working on a database a
//! newer node migrated (it ignores the new tables and columns). A migration whose SQL
//! carries the line [`BREAKS_OLDER`] is a *contract* step (a column dropped, renamed or
//! made required): once it is applied, an older node refuses to start, naming both
//! versions, instead of writing what the newer schema no longer means.
//!
//! Each node records, after migrating, the migrations it knows in `schema_info` (which
//! tether version applied them first, whether they break older versions); a node that
//! finds migrations it does not know reads that table to decide (`plan`). The SQL side
//! is `sql_schema.rs`, compiled per backend.

use std::borrow::Cow;

use sqlx::migrate::{Migration, Migrator};

use crate::{Result, StoreError};

/// The line that marks a migration as a contract step (see the module's header).
pub const BREAKS_OLDER: &str = "-- tether: breaks-older";

/// This build's tether version, as `schema_info` and the node registry record it.
pub fn tether_version() -> String {
    next_schema()
        .and_then(|dir| std::fs::read_to_string(dir.join("version")).ok())
        .map(|v| v.trim().to_owned())
        .unwrap_or_else(|| env!("CARGO_PKG_VERSION").to_owned())
}

/// Test builds only: a directory of extra migrations (and a `version` file) that make
/// this binary act as the next tether version, so the upgrade tests run two "builds"
/// from one (`TETHER_TEST_SCHEMA_NEXT`). Ignored in release builds.
fn next_schema() -> Option<std::path::PathBuf> {
    if !cfg!(debug_assertions) {
        return None;
    }
    std::env::var_os("TETHER_TEST_SCHEMA_NEXT").map(std::path::PathBuf::from)
}

/// The migrator of this build: the embedded migrations, plus the test's extra ones.
pub(crate) async fn migrator(embedded: &Migrator) -> Result<Migrator> {
    let mut migrations: Vec<Migration> = embedded.iter().cloned().collect();
    if let Some(dir) = next_schema() {
        let extra = Migrator::new(dir.as_path()).await?;
        migrations.extend(extra.iter().cloned());
    }
    Ok(Migrator {
        migrations: Cow::Owned(migrations),
        ..Migrator::DEFAULT
    })
}

/// A migration another tether version applied and this one does not know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unknown {
    pub migration: i64,
    /// Who applied it (`None`: a version from before `schema_info`).
    pub tether_version: Option<String>,
    pub breaks_older: bool,
}

/// What to do with the database's schema: migrate it (`ignore_unknown`: newer
/// migrations are applied already and are all expand steps), or refuse.
pub(crate) fn plan(known_max: i64, unknown: &[Unknown]) -> Result<bool> {
    let Some(newest) = unknown.iter().max_by_key(|u| u.migration) else {
        return Ok(false);
    };
    let breaking = unknown
        .iter()
        .find(|u| u.breaks_older || u.tether_version.is_none());
    match breaking {
        None => Ok(true),
        Some(b) => Err(StoreError::SchemaNewer {
            own_version: tether_version(),
            own_migration: known_max,
            db_version: newest
                .tether_version
                .clone()
                .unwrap_or_else(|| "an unknown newer version".to_owned()),
            db_migration: newest.migration,
            breaking: b.migration,
        }),
    }
}

/// Whether migration `m` is a contract step.
pub(crate) fn breaks_older(m: &Migration) -> bool {
    m.sql.lines().any(|l| l.trim() == BREAKS_OLDER)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unknown(migration: i64, v: Option<&str>, breaks: bool) -> Unknown {
        Unknown {
            migration,
            tether_version: v.map(str::to_owned),
            breaks_older: breaks,
        }
    }

    #[test]
    fn nothing_unknown_migrates_as_usual() {
        assert!(!plan(28, &[]).unwrap());
    }

    #[test]
    fn expand_steps_of_a_newer_version_are_ignored() {
        assert!(plan(28, &[unknown(29, Some("0.2.0"), false)]).unwrap());
    }

    #[test]
    fn a_contract_step_refuses_naming_both_versions() {
        let e = plan(
            28,
            &[
                unknown(29, Some("0.2.0"), false),
                unknown(30, Some("0.3.0"), true),
            ],
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("0.3.0") && e.contains(env!("CARGO_PKG_VERSION")),
            "{e}"
        );
        assert!(e.contains("migration 30"), "{e}");
    }

    #[test]
    fn a_step_of_unknown_origin_is_not_trusted() {
        assert!(plan(28, &[unknown(29, None, false)]).is_err());
    }

    #[test]
    fn embedded_migrations_are_marked_only_where_they_contract() {
        // Every embedded migration adds, but the event table's redesign (issue 33): a
        // marker stops older nodes, so it goes only where they would write wrong rows.
        const CONTRACTS: &[i64] = &[30];
        for m in sqlx::migrate!("./migrations").iter() {
            let expected = CONTRACTS.contains(&m.version);
            assert_eq!(breaks_older(m), expected, "migration {}", m.version);
        }
        for m in sqlx::migrate!("./migrations/postgres").iter() {
            let expected = m.version == 22;
            assert_eq!(
                breaks_older(m),
                expected,
                "postgres migration {}",
                m.version
            );
        }
    }
}
