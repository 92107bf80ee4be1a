//! The ledger's rows of a scope, as SQL both backends run (`sql.rs`, `sql_budgets.rs`):
//! each scope is one index range of the ledger (D272). A condition such as
//! `$1 IS NULL OR column = $1` would read the whole ledger on both: neither plans an
//! index for it, so a conversation's totals read every row of the team.

use super::{Bucket, BudgetScope, UsageScope};

pub(crate) const DAY_MS: i64 = 86_400_000;

/// The sums every totals query selects.
fn sums() -> String {
    let sum = |c: &str| format!("CAST(COALESCE(SUM({c}), 0) AS BIGINT) AS {c}");
    format!(
        "CAST(COUNT(*) AS BIGINT) AS reports, {}, {}, {}, {}, {}, {}, \
         CAST(COALESCE(SUM(CASE WHEN cost_nanos IS NULL AND unreported = 0 THEN 1 ELSE 0 END), 0) \
         AS BIGINT) AS unpriced, CAST(COALESCE(SUM(unreported), 0) AS BIGINT) AS unreported",
        sum("input_tokens"),
        sum("cached_input_tokens"),
        sum("cache_write_tokens"),
        sum("output_tokens"),
        sum("reasoning_tokens"),
        sum("cost_nanos"),
    )
}

/// The rows of `scope` as a condition on `$1`, and the key to bind there (`Everything`
/// binds `NULL`).
fn rows_of(scope: &UsageScope) -> (&'static str, Option<String>) {
    match scope {
        UsageScope::Turn(t) => ("turn_id = $1", Some(t.as_str().to_owned())),
        UsageScope::Session(s) => ("session_id = $1", Some(s.as_str().to_owned())),
        UsageScope::Conversation(c) => ("conversation_id = $1", Some(c.as_str().to_owned())),
        UsageScope::Tree(c) => ("root_conversation_id = $1", Some(c.as_str().to_owned())),
        UsageScope::Person(p) => ("person_id = $1", Some(p.as_str().to_owned())),
        UsageScope::Everything => ("$1 IS NULL", None),
    }
}

/// Totals over `scope` ($1, the key returned) of the rows at or after $2 (`NULL`: all).
pub(crate) fn totals_sql(scope: &UsageScope) -> (String, Option<String>) {
    let (rows_of, key) = rows_of(scope);
    let sql = format!(
        "SELECT {} FROM usage_ledger WHERE {rows_of} AND ($2 IS NULL OR at >= $2)",
        sums()
    );
    (sql, key)
}

/// Totals over `scope` ($1, the key returned) per bucket `n` of the rows in `[$2, $3)`,
/// and the bucket's width and offset: bucket `n` starts at `n * width - offset`. Days
/// and weeks are whole multiples of a day since the epoch; months are days, summed by
/// the caller. 1970-01-01 was a Thursday: weeks count from Monday 1969-12-29.
pub(crate) fn series_sql(scope: &UsageScope, bucket: Bucket) -> (String, Option<String>, i64, i64) {
    let (rows_of, key) = rows_of(scope);
    let (width, offset) = match bucket {
        Bucket::Week => (7 * DAY_MS, 3 * DAY_MS),
        Bucket::Day | Bucket::Month => (DAY_MS, 0),
    };
    let sql = format!(
        "SELECT CAST((at + {offset}) / {width} AS BIGINT) AS n, {} FROM usage_ledger \
         WHERE {rows_of} AND at >= $2 AND at < $3 \
         GROUP BY (at + {offset}) / {width} ORDER BY n",
        sums()
    );
    (sql, key, width, offset)
}

/// The rows a new budget over `scope` counts, as a condition on `$3` (its scope's id,
/// `NULL` for the team).
pub(crate) fn budget_rows_of(scope: &BudgetScope) -> &'static str {
    match scope {
        BudgetScope::Conversation(_) => "conversation_id = $3",
        BudgetScope::Tree(_) => "root_conversation_id = $3",
        BudgetScope::Person(_) => "person_id = $3",
        BudgetScope::Team => "$3 IS NULL",
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use sqlx::{Connection, SqliteConnection};

    use super::*;
    use tether_proto::{ConversationId, PersonId, SessionId, TurnId};

    /// SQLite's plan for `sql`, one line per step.
    async fn plan(c: &mut SqliteConnection, sql: &str) -> Vec<String> {
        let rows: Vec<(i64, i64, i64, String)> =
            sqlx::query_as(&format!("EXPLAIN QUERY PLAN {sql}"))
                .bind(Some("k"))
                .bind(0_i64)
                .bind(1_i64)
                .fetch_all(c)
                .await
                .unwrap();
        rows.into_iter().map(|r| r.3).collect()
    }

    #[tokio::test]
    async fn every_scope_reads_an_index_range_of_the_ledger() {
        let mut c = SqliteConnection::connect("sqlite::memory:").await.unwrap();
        sqlx::migrate!("./migrations").run(&mut c).await.unwrap();
        let scopes = [
            UsageScope::Turn(TurnId::from("k")),
            UsageScope::Session(SessionId::from("k")),
            UsageScope::Conversation(ConversationId::from("k")),
            UsageScope::Tree(ConversationId::from("k")),
            UsageScope::Person(PersonId::from("k")),
        ];
        for scope in &scopes {
            let (totals, _) = totals_sql(scope);
            let (series, ..) = series_sql(scope, Bucket::Week);
            for sql in [totals, series] {
                let plan = plan(&mut c, &sql).await;
                assert!(
                    plan.iter()
                        .any(|l| l.starts_with("SEARCH usage_ledger USING ")),
                    "{scope:?}: {plan:?}"
                );
                assert!(
                    !plan.iter().any(|l| l.starts_with("SCAN usage_ledger")),
                    "{scope:?}: {plan:?}"
                );
            }
        }
        for scope in [
            BudgetScope::Conversation(ConversationId::from("k")),
            BudgetScope::Tree(ConversationId::from("k")),
            BudgetScope::Person(PersonId::from("k")),
        ] {
            let sql = format!(
                "SELECT COUNT(*) FROM usage_ledger WHERE {} AND at >= $2 AND $1 IS NOT NULL",
                budget_rows_of(&scope)
            );
            let plan = plan(&mut c, &sql).await;
            assert!(
                plan.iter()
                    .any(|l| l.starts_with("SEARCH usage_ledger USING ")),
                "{scope:?}: {plan:?}"
            );
        }
    }
}
