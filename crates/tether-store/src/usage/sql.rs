//! The usage ledger in SQL (see `usage/mod.rs`): appended, never changed; totals are
//! sums over one indexed column.

use sqlx::Row;

use super::Db;
use crate::Result;
use crate::usage::{NewUsage, UsageScope, UsageTotals};

impl Db {
    /// Appends a usage row at the store's now; its id.
    pub async fn add_usage(&self, u: &NewUsage) -> Result<i64> {
        let row = sqlx::query(
            "INSERT INTO usage_ledger (at, conversation_id, root_conversation_id, session_id, \
             turn_id, person_id, agent, model, account, input_tokens, cached_input_tokens, \
             cache_write_tokens, output_tokens, reasoning_tokens, cost_nanos, price_version) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16) \
             RETURNING id",
        )
        .bind(self.now_ms())
        .bind(u.conversation_id.as_str())
        .bind(u.root_conversation_id.as_str())
        .bind(u.session_id.as_ref().map(|s| s.as_str().to_owned()))
        .bind(u.turn_id.as_ref().map(|t| t.as_str().to_owned()))
        .bind(u.person_id.as_ref().map(|p| p.as_str().to_owned()))
        .bind(&u.agent)
        .bind(&u.model)
        .bind(&u.account)
        .bind(u.input)
        .bind(u.cached_input)
        .bind(u.cache_write)
        .bind(u.output)
        .bind(u.reasoning)
        .bind(u.cost_nanos)
        .bind(&u.price_version)
        .fetch_one(&self.writer)
        .await?;
        Ok(row.try_get("id")?)
    }

    /// Totals over `scope` of the rows at or after `since_ms` (`None`: all of them).
    pub async fn usage_totals(
        &self,
        scope: &UsageScope,
        since_ms: Option<i64>,
    ) -> Result<UsageTotals> {
        let (column, key) = match scope {
            UsageScope::Turn(t) => ("turn_id", Some(t.as_str().to_owned())),
            UsageScope::Session(s) => ("session_id", Some(s.as_str().to_owned())),
            UsageScope::Conversation(c) => ("conversation_id", Some(c.as_str().to_owned())),
            UsageScope::Tree(c) => ("root_conversation_id", Some(c.as_str().to_owned())),
            UsageScope::Person(p) => ("person_id", Some(p.as_str().to_owned())),
            UsageScope::Everything => ("agent", None),
        };
        let sum = |c: &str| format!("CAST(COALESCE(SUM({c}), 0) AS BIGINT) AS {c}");
        let sql = format!(
            "SELECT CAST(COUNT(*) AS BIGINT) AS reports, {}, {}, {}, {}, {}, {}, \
             CAST(COALESCE(SUM(CASE WHEN cost_nanos IS NULL THEN 1 ELSE 0 END), 0) AS BIGINT) \
             AS unpriced FROM usage_ledger WHERE ($1 IS NULL OR {column} = $1) \
             AND ($2 IS NULL OR at >= $2)",
            sum("input_tokens"),
            sum("cached_input_tokens"),
            sum("cache_write_tokens"),
            sum("output_tokens"),
            sum("reasoning_tokens"),
            sum("cost_nanos"),
        );
        let row = sqlx::query(&sql)
            .bind(key)
            .bind(since_ms)
            .fetch_one(&self.reader)
            .await?;
        Ok(UsageTotals {
            reports: row.try_get("reports")?,
            input: row.try_get("input_tokens")?,
            cached_input: row.try_get("cached_input_tokens")?,
            cache_write: row.try_get("cache_write_tokens")?,
            output: row.try_get("output_tokens")?,
            reasoning: row.try_get("reasoning_tokens")?,
            cost_nanos: row.try_get("cost_nanos")?,
            unpriced: row.try_get("unpriced")?,
        })
    }
}
