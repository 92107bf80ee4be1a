//! The two backends' schemas agree (issue 27 item 4): the schema is written twice, in two
//! migration sequences, so after migrating a fresh store of each, every table has the
//! same columns and the same named indexes on both. Types are not compared (SQLite's
//! `INTEGER` is PostgreSQL's `BIGINT`), nor constraints' spelling.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use sqlx::{Connection, Row};

#[allow(unused_macros)]
mod support;
use support::{Backend, Guard};

/// Tables of a schema: table → columns, and the index names.
#[derive(Debug, PartialEq)]
struct Schema {
    tables: BTreeMap<String, BTreeSet<String>>,
    indexes: BTreeSet<String>,
}

/// sqlx's own bookkeeping.
const IGNORED_TABLES: &[&str] = &["_sqlx_migrations"];

/// What only PostgreSQL has, by design, and why.
const POSTGRES_ONLY: &[(&str, &str)] = &[
    // Every streamed event would pay an index write on SQLite; its one query by turn
    // goes through `events_by_conversation` there.
    ("index events_by_turn", "the hot path on SQLite"),
];

async fn sqlite_schema(dir: &std::path::Path) -> Schema {
    let url = format!("sqlite://{}", dir.join("tether.db").display());
    let mut c = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let names: Vec<(String,)> = sqlx::query_as(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
    )
    .fetch_all(&mut c)
    .await
    .unwrap();
    let mut tables = BTreeMap::new();
    for (t,) in names {
        if IGNORED_TABLES.contains(&t.as_str()) {
            continue;
        }
        let cols = sqlx::query(&format!("PRAGMA table_info({t})"))
            .fetch_all(&mut c)
            .await
            .unwrap()
            .iter()
            .map(|r| r.get::<String, _>("name"))
            .collect();
        tables.insert(t, cols);
    }
    let indexes: Vec<(String,)> = sqlx::query_as(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND name NOT LIKE 'sqlite_%'",
    )
    .fetch_all(&mut c)
    .await
    .unwrap();
    Schema {
        tables,
        indexes: indexes.into_iter().map(|(n,)| n).collect(),
    }
}

async fn postgres_schema(url: &str) -> Schema {
    let mut c = sqlx::PgConnection::connect(url).await.unwrap();
    let cols: Vec<(String, String)> = sqlx::query_as(
        "SELECT table_name::text, column_name::text FROM information_schema.columns \
         WHERE table_schema = current_schema()",
    )
    .fetch_all(&mut c)
    .await
    .unwrap();
    let mut tables: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (t, col) in cols {
        if IGNORED_TABLES.contains(&t.as_str()) {
            continue;
        }
        // SQLite's tables have an implicit `rowid`; PostgreSQL's spell it out where the
        // SQL orders by it.
        if col == "rowid" {
            continue;
        }
        tables.entry(t).or_default().insert(col);
    }
    // Primary keys and unique constraints are indexes on PostgreSQL, not on SQLite
    // (there they are `sqlite_autoindex_…`, left out above): only named indexes count.
    let indexes: Vec<(String,)> = sqlx::query_as(
        "SELECT i.indexname::text FROM pg_indexes i WHERE i.schemaname = current_schema() \
         AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conname = i.indexname)",
    )
    .fetch_all(&mut c)
    .await
    .unwrap();
    Schema {
        tables,
        indexes: indexes.into_iter().map(|(n,)| n).collect(),
    }
}

#[tokio::test]
async fn both_backends_migrate_to_the_same_tables_columns_and_indexes() {
    let (sqlite_guard, _s) = support::open(Backend::Sqlite).await;
    let (pg_guard, _p) = support::open(Backend::Postgres).await;
    let (Guard::Dir(dir), Guard::Database(db)) = (&sqlite_guard, &pg_guard) else {
        panic!("a SQLite directory and a PostgreSQL database");
    };
    let (lite, pg) = (
        sqlite_schema(dir.path()).await,
        postgres_schema(&db.url).await,
    );
    let only = |a: &Schema, b: &Schema| -> Vec<String> {
        let mut out = Vec::new();
        for (t, cols) in &a.tables {
            match b.tables.get(t) {
                None => out.push(format!("table {t}")),
                Some(other) => out.extend(cols.difference(other).map(|c| format!("{t}.{c}"))),
            }
        }
        out.extend(
            a.indexes
                .difference(&b.indexes)
                .map(|i| format!("index {i}")),
        );
        out
    };
    let pg_only: Vec<String> = only(&pg, &lite)
        .into_iter()
        .filter(|d| !POSTGRES_ONLY.iter().any(|(known, _)| known == d))
        .collect();
    assert_eq!(
        (only(&lite, &pg), pg_only),
        (Vec::<String>::new(), Vec::<String>::new()),
        "(only on SQLite, only on PostgreSQL)"
    );
    assert!(lite.tables.len() > 10, "{:?}", lite.tables.keys());
}
