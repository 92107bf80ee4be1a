//! The usage ledger in SQL (see `usage/mod.rs`): appended, never changed; a row's write
//! adds it to the budgets it counts toward in the same transaction (`sql_budgets.rs`);
//! totals are sums over one indexed column, series group them by day or week (months
//! are made of days).

use sqlx::Row;

use super::{Db, Sql, SqlRow};
use crate::Result;
use crate::usage::scopes::{DAY_MS, series_sql, totals_sql};
use crate::usage::{Bucket, Counted, NewUsage, Recorded, SeriesPoint, UsageScope, UsageTotals};

fn totals(row: &SqlRow) -> Result<UsageTotals> {
    Ok(UsageTotals {
        reports: row.try_get("reports")?,
        input: row.try_get("input_tokens")?,
        cached_input: row.try_get("cached_input_tokens")?,
        cache_write: row.try_get("cache_write_tokens")?,
        output: row.try_get("output_tokens")?,
        reasoning: row.try_get("reasoning_tokens")?,
        cost_nanos: row.try_get("cost_nanos")?,
        unpriced: row.try_get("unpriced")?,
        unreported: row.try_get("unreported")?,
    })
}

/// The ledger's columns in the order [`bind_usage`] binds them.
macro_rules! usage_columns {
    () => {
        "at, conversation_id, root_conversation_id, session_id, turn_id, person_id, agent, \
         model, account, input_tokens, cached_input_tokens, cache_write_tokens, \
         output_tokens, reasoning_tokens, cost_nanos, price_version, report_id, unreported"
    };
}

/// Their values: the parameters [`bind_usage`] binds.
macro_rules! usage_values {
    () => {
        "$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18"
    };
}

/// What [`bind_usage`] binds onto: a plain query, or one whose rows map to a tuple.
pub(super) trait Binds<'q>: Sized {
    fn with<T: 'q + sqlx::Encode<'q, Sql> + sqlx::Type<Sql>>(self, value: T) -> Self;
}

impl<'q> Binds<'q> for sqlx::query::Query<'q, Sql, <Sql as sqlx::Database>::Arguments<'q>> {
    fn with<T: 'q + sqlx::Encode<'q, Sql> + sqlx::Type<Sql>>(self, value: T) -> Self {
        self.bind(value)
    }
}

impl<'q, O> Binds<'q> for sqlx::query::QueryAs<'q, Sql, O, <Sql as sqlx::Database>::Arguments<'q>> {
    fn with<T: 'q + sqlx::Encode<'q, Sql> + sqlx::Type<Sql>>(self, value: T) -> Self {
        self.bind(value)
    }
}

/// Binds a row's values to a query of the ledger's columns (`usage_values!`), after
/// whatever `q` has bound already.
pub(super) fn bind_usage<'q, Q: Binds<'q>>(q: Q, u: &'q NewUsage, now: i64) -> Q {
    q.with(now)
        .with(u.conversation_id.as_str())
        .with(u.root_conversation_id.as_str())
        .with(u.session_id.as_ref().map(|s| s.as_str()))
        .with(u.turn_id.as_ref().map(|t| t.as_str()))
        .with(u.person_id.as_ref().map(|p| p.as_str()))
        .with(&u.agent)
        .with(&u.model)
        .with(&u.account)
        .with(u.input)
        .with(u.cached_input)
        .with(u.cache_write)
        .with(u.output)
        .with(u.reasoning)
        .with(u.cost_nanos)
        .with(&u.price_version)
        .with(&u.report_id)
        .with(i64::from(u.unreported))
}

/// [`ALONE`]'s statement, with `$gate` added to its condition.
macro_rules! alone {
    ($gate:literal) => {
        concat!(
            "INSERT INTO usage_ledger (",
            usage_columns!(),
            ") SELECT ",
            usage_values!(),
            " WHERE NOT EXISTS (SELECT 1 FROM budgets WHERE ",
            crate::usage::counting_where!("", "$2", "$3", "$6"),
            ")",
            $gate,
            " ON CONFLICT (report_id) DO NOTHING RETURNING id"
        )
    };
}

/// A ledger row on its own, as almost every row is stored: inserted (and its id
/// returned) unless a budget counts it, whose counters must change in the same
/// transaction ([`Db::record_usage`] does both), or its report is stored already.
/// Parameters `$1` to `$18` ([`bind_usage`]).
pub(super) const ALONE: &str = alone!("");

/// [`ALONE`] as a step of one statement that stores a write only while its fence holds
/// (`turns_fenced`, PostgreSQL): inserted only when the statement's `ok` says so.
pub(super) const ALONE_IF_OK: &str = alone!(" AND (SELECT ok FROM ok)");

/// [`ALONE`] with its parameters numbered from `$first` instead of `$1`, to follow
/// another statement's parameters in one query.
pub(super) fn alone_from(first: usize) -> String {
    renumbered(ALONE, first)
}

/// `sql` (parameters `$1` …) with its parameters numbered from `$first`.
pub(super) fn renumbered(sql: &str, first: usize) -> String {
    let mut out = String::with_capacity(sql.len() + 32);
    let mut rest = sql;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..=at]);
        rest = &rest[at + 1..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        match rest[..digits].parse::<usize>() {
            Ok(n) => out.push_str(&(n + first - 1).to_string()),
            Err(_) => out.push_str(&rest[..digits]),
        }
        rest = &rest[digits..];
    }
    out.push_str(rest);
    out
}

impl Db {
    /// Appends a usage row at the store's now and adds it to every budget it counts
    /// toward, atomically; a report id already stored changes nothing.
    pub async fn record_usage(&self, u: &NewUsage) -> Result<Recorded> {
        let now = self.now_ms();
        // Almost always no budget counts the row: then it is one statement on its own
        // (one round trip instead of `BEGIN`, the insert and `COMMIT`), which inserts
        // nothing when a budget counts it (or the report is stored already) and leaves
        // that to the transaction below.
        let alone: Option<(i64,)> = bind_usage(sqlx::query_as(ALONE), u, now)
            .fetch_optional(&self.writer)
            .await?;
        if alone.is_some() {
            return Ok(Recorded {
                inserted: true,
                budgets: Vec::new(),
            });
        }
        let mut tx = self.writer.begin().await?;
        // The row comes back with the number of budgets it counts toward (none, when
        // one was removed since), and then nothing more is read.
        let inserted: Option<(i64, i64)> = bind_usage(
            sqlx::query_as(concat!(
                "INSERT INTO usage_ledger (",
                usage_columns!(),
                ") VALUES (",
                usage_values!(),
                ") ON CONFLICT (report_id) DO NOTHING RETURNING id, \
                 (SELECT COUNT(*) FROM budgets WHERE ",
                crate::usage::counting_where!("", "$2", "$3", "$6"),
                ") AS counting"
            )),
            u,
            now,
        )
        .fetch_optional(&mut *tx)
        .await?;
        let Some((_, counting)) = inserted else {
            tx.commit_unchecked().await?;
            return Ok(Recorded::default());
        };
        if counting == 0 {
            tx.commit_unchecked().await?;
            return Ok(Recorded {
                inserted: true,
                budgets: Vec::new(),
            });
        }
        let counted = Counted {
            conversation_id: &u.conversation_id,
            root_conversation_id: &u.root_conversation_id,
            person_id: u.person_id.as_ref(),
        };
        let tokens = u.input + u.cached_input + u.cache_write + u.output + u.reasoning;
        let budgets = super::budgets::count(&mut tx, &counted, now, tokens, u.cost_nanos).await?;
        tx.commit_unchecked().await?;
        Ok(Recorded {
            inserted: true,
            budgets,
        })
    }

    /// Totals over `scope` of the rows at or after `since_ms` (`None`: all of them).
    pub async fn usage_totals(
        &self,
        scope: &UsageScope,
        since_ms: Option<i64>,
    ) -> Result<UsageTotals> {
        let (sql, key) = totals_sql(scope);
        let row = sqlx::query(&sql)
            .bind(key)
            .bind(since_ms)
            .fetch_one(&self.reader)
            .await?;
        totals(&row)
    }

    /// Totals over `scope` per UTC day, Monday-based week or calendar month, of the rows
    /// in `[from_ms, to_ms)`; buckets without rows are left out.
    pub async fn usage_series(
        &self,
        scope: &UsageScope,
        bucket: Bucket,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<SeriesPoint>> {
        use tether_core::budget::Period;
        let (sql, key, width, offset) = series_sql(scope, bucket);
        let rows = sqlx::query(&sql)
            .bind(key)
            .bind(from_ms)
            .bind(to_ms)
            .fetch_all(&self.reader)
            .await?;
        let mut points: Vec<SeriesPoint> = Vec::new();
        for row in &rows {
            let n: i64 = row.try_get("n")?;
            let t = totals(row)?;
            let start_ms = match bucket {
                Bucket::Month => Period::Month.start(n * DAY_MS),
                Bucket::Day | Bucket::Week => n * width - offset,
            };
            match points.last_mut() {
                Some(p) if p.start_ms == start_ms => p.totals = add(p.totals, t),
                _ => points.push(SeriesPoint {
                    start_ms,
                    totals: t,
                }),
            }
        }
        Ok(points)
    }
}

fn add(a: UsageTotals, b: UsageTotals) -> UsageTotals {
    UsageTotals {
        reports: a.reports + b.reports,
        input: a.input + b.input,
        cached_input: a.cached_input + b.cached_input,
        cache_write: a.cache_write + b.cache_write,
        output: a.output + b.output,
        reasoning: a.reasoning + b.reasoning,
        cost_nanos: a.cost_nanos + b.cost_nanos,
        unpriced: a.unpriced + b.unpriced,
        unreported: a.unreported + b.unreported,
    }
}
