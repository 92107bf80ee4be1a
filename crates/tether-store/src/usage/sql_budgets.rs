//! Budgets and their counters in SQL (see `usage/mod.rs`). A counter is one row per
//! budget and period; a ledger row's write upserts it (`used = used + amount`) and
//! reads the sum back in the same statement, under the row's lock on PostgreSQL and the
//! writer's on SQLite, so concurrent reports on any node see each other's sums. The
//! counters are taken in budget-id order, so two writers never wait on each other in
//! a circle.

use sqlx::Row;
use tether_core::budget::{Period, Unit, crossing};
use tether_proto::PersonId;

use super::conns::Tx;
use super::{Db, SqlRow};
use crate::usage::{Budget, BudgetHit, BudgetScope, BudgetUse, Counted, Parked};
use crate::{Result, StoreError};

const BUDGET_COLUMNS: &str =
    "id, scope, scope_id, unit, cap, warn_percent, period, created_by, created_at";

/// The budgets `counted` counts toward, in id order.
const COUNTING: &str = concat!(
    "SELECT id, scope, scope_id, unit, cap, warn_percent, period, created_by, created_at \
     FROM budgets WHERE ",
    crate::usage::counting_where!("", "$1", "$2", "$3"),
    " ORDER BY id"
);

/// What one read before each turn finds ([`Db::turn_budgets`]): the conversation's
/// delegation ancestry (`up`, at most 16 levels) gives its root and owner; `me`, one
/// row, carries them with the account's limit and the conversation's parked
/// continuations (is the turn one, is one waiting or claimed, has one fired); each
/// budget counting toward the turn is joined to it (none: one row with a `NULL` id).
/// $1 the conversation, $2 the account, $3 now, $4 the turn (may be `NULL`), $5 the
/// parking timers' kind.
const TURN_READ: &str = concat!(
    "WITH RECURSIVE up (id, parent, owner, depth) AS ( \
     SELECT id, parent_conversation_id, owner_id, 0 FROM conversations WHERE id = $1 \
     UNION ALL SELECT c.id, c.parent_conversation_id, c.owner_id, up.depth + 1 \
     FROM conversations c JOIN up ON c.id = up.parent WHERE up.depth < 16), \
     me AS (SELECT (SELECT id FROM up ORDER BY depth DESC LIMIT 1) AS root, \
     (SELECT owner FROM up WHERE depth = 0) AS person, \
     (SELECT until_ms FROM account_limits WHERE account = $2 AND until_ms > $3) AS limited, \
     CASE WHEN EXISTS (SELECT 1 FROM timers WHERE id = $4) THEN 1 ELSE 0 END AS continuation, \
     CASE WHEN EXISTS (SELECT 1 FROM timers WHERE conversation_id = $1 AND kind = $5 \
     AND state IN ('waiting', 'claimed') AND id <> $4) THEN 1 ELSE 0 END AS waiting, \
     CASE WHEN EXISTS (SELECT 1 FROM timers WHERE conversation_id = $1 AND kind = $5 \
     AND state = 'fired') THEN 1 ELSE 0 END AS fired) \
     SELECT me.root, me.person, me.limited, me.continuation, me.waiting, me.fired, \
     b.id, b.scope, b.scope_id, b.unit, b.cap, b.warn_percent, b.period, b.created_by, \
     b.created_at FROM me LEFT JOIN budgets b ON ",
    crate::usage::counting_where!("b.", "$1", "COALESCE(me.root, $1)", "me.person"),
    " ORDER BY b.id"
);

fn corrupt(detail: String) -> StoreError {
    StoreError::Corrupt {
        table: "budgets",
        detail,
    }
}

fn budget(row: &SqlRow) -> Result<Budget> {
    let scope: String = row.try_get("scope")?;
    let scope_id: Option<String> = row.try_get("scope_id")?;
    let unit: String = row.try_get("unit")?;
    let period: String = row.try_get("period")?;
    let warn: Option<i64> = row.try_get("warn_percent")?;
    Ok(Budget {
        id: row.try_get("id")?,
        scope: BudgetScope::from_parts(&scope, scope_id)
            .ok_or_else(|| corrupt(format!("unknown scope {scope:?}")))?,
        unit: Unit::parse(&unit).ok_or_else(|| corrupt(format!("unknown unit {unit:?}")))?,
        cap: row.try_get("cap")?,
        warn_percent: warn.and_then(|w| u8::try_from(w).ok()),
        period: Period::parse(&period)
            .ok_or_else(|| corrupt(format!("unknown period {period:?}")))?,
        created_by: row
            .try_get::<Option<String>, _>("created_by")?
            .map(PersonId::from),
        created_at_ms: row.try_get("created_at")?,
    })
}

/// Adds a ledger row's `tokens` or `cost` to every budget it counts toward (in `tx`);
/// what each crossed.
pub(crate) async fn count(
    tx: &mut Tx,
    counted: &Counted<'_>,
    now_ms: i64,
    tokens: i64,
    cost_nanos: Option<i64>,
) -> Result<Vec<BudgetHit>> {
    let rows = sqlx::query(COUNTING)
        .bind(counted.conversation_id.as_str())
        .bind(counted.root_conversation_id.as_str())
        .bind(counted.person_id.map(PersonId::as_str))
        .fetch_all(&mut **tx)
        .await?;
    let mut hits = Vec::with_capacity(rows.len());
    for row in &rows {
        let b = budget(row)?;
        let amount = match b.unit {
            Unit::Tokens => tokens,
            Unit::Cost => cost_nanos.unwrap_or(0),
            // The vendor counts the window; its reports are the use (`record_window`).
            Unit::Window => 0,
        };
        if amount == 0 {
            continue;
        }
        let start = b.period.start(now_ms);
        let (used,): (i64,) = sqlx::query_as(
            "INSERT INTO budget_counters (budget_id, period_start, used) VALUES ($1, $2, $3) \
             ON CONFLICT (budget_id, period_start) \
             DO UPDATE SET used = budget_counters.used + excluded.used RETURNING used",
        )
        .bind(&b.id)
        .bind(start)
        .bind(amount)
        .fetch_one(&mut **tx)
        .await?;
        let crossing = crossing(b.cap, b.warn_percent, used, amount);
        hits.push(BudgetHit {
            usage: BudgetUse {
                budget: b,
                period_start_ms: start,
                used,
            },
            crossing,
        });
    }
    Ok(hits)
}

impl Db {
    /// Stores a budget (its id chosen by the caller), its current period's counter
    /// starting at what the ledger already holds for its scope in that period (a daily
    /// budget made at noon counts the morning).
    pub async fn create_budget(&self, b: &Budget) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        sqlx::query(&format!(
            "INSERT INTO budgets ({BUDGET_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
        ))
        .bind(&b.id)
        .bind(b.scope.kind())
        .bind(b.scope.id())
        .bind(b.unit.as_str())
        .bind(b.cap)
        .bind(b.warn_percent.map(i64::from))
        .bind(b.period.as_str())
        .bind(b.created_by.as_ref().map(PersonId::as_str))
        .bind(b.created_at_ms)
        .execute(&mut *tx)
        .await?;
        let rows_of = crate::usage::scopes::budget_rows_of(&b.scope);
        let amount = match b.unit {
            Unit::Tokens => {
                "input_tokens + cached_input_tokens + cache_write_tokens + output_tokens + \
                 reasoning_tokens"
            }
            Unit::Cost => "COALESCE(cost_nanos, 0)",
            Unit::Window => "0",
        };
        let start = b.period.start(self.now_ms());
        sqlx::query(&format!(
            "INSERT INTO budget_counters (budget_id, period_start, used) \
             SELECT $1, $2, CAST(COALESCE(SUM({amount}), 0) AS BIGINT) FROM usage_ledger \
             WHERE {rows_of} AND at >= $2"
        ))
        .bind(&b.id)
        .bind(start)
        .bind(b.scope.id())
        .execute(&mut *tx)
        .await?;
        tx.commit_unchecked().await?;
        Ok(())
    }

    /// Deletes a budget and its counters; whether it existed.
    pub async fn delete_budget(&self, id: &str) -> Result<bool> {
        let mut tx = self.writer.begin().await?;
        sqlx::query("DELETE FROM budget_counters WHERE budget_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        let gone = sqlx::query("DELETE FROM budgets WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit_unchecked().await?;
        Ok(gone > 0)
    }

    /// Every budget with what it has used in its period at `now_ms`, in id order.
    pub async fn list_budgets(&self, now_ms: i64) -> Result<Vec<BudgetUse>> {
        let rows = sqlx::query(&format!("SELECT {BUDGET_COLUMNS} FROM budgets ORDER BY id"))
            .fetch_all(&self.reader)
            .await?;
        self.with_use(&rows, now_ms, None).await
    }

    /// The budgets `counted` counts toward, with what each has used at `now_ms`.
    pub async fn budgets_counting(
        &self,
        counted: &Counted<'_>,
        now_ms: i64,
    ) -> Result<Vec<BudgetUse>> {
        let rows = sqlx::query(COUNTING)
            .bind(counted.conversation_id.as_str())
            .bind(counted.root_conversation_id.as_str())
            .bind(counted.person_id.map(PersonId::as_str))
            .fetch_all(&self.reader)
            .await?;
        self.with_use(&rows, now_ms, None).await
    }

    /// Whom turn `turn_id` of `conversation_id` counts for (its owner and delegation
    /// root), the budgets it counts toward with their use at `now_ms`, and until when
    /// `account` is at its vendor's limit: one call before each turn, one read
    /// ([`TURN_READ`]) unless a budget counts (its counter is read then). Writes
    /// nothing, so it may run beside the turn's start: the same read says what parked
    /// continuation the turn supersedes once it started ([`Db::supersede_parking`];
    /// issue 29: a person's message runs instead).
    pub async fn turn_budgets(
        &self,
        conversation_id: &tether_proto::ConversationId,
        turn_id: Option<&str>,
        account: &str,
        now_ms: i64,
    ) -> Result<crate::usage::TurnBudgets> {
        let rows = sqlx::query(TURN_READ)
            .bind(conversation_id.as_str())
            .bind(account)
            .bind(now_ms)
            .bind(turn_id)
            .bind(crate::timers::CONTINUE_AFTER_LIMIT)
            .fetch_all(&self.reader)
            .await?;
        // `me` is one row, so the read has at least one.
        let Some(me) = rows.first() else {
            return Err(corrupt("the turn's budget read returned no row".to_owned()));
        };
        let flag = |column: &str| -> Result<bool> { Ok(me.try_get::<i32, _>(column)? != 0) };
        let parked = Parked {
            continuation: flag("continuation")?,
            waiting: flag("waiting")?,
            fired: flag("fired")?,
        };
        let limited: Option<i64> = me.try_get("limited")?;
        let person: Option<String> = me.try_get("person")?;
        let root: Option<String> = me.try_get("root")?;
        let root = tether_proto::ConversationId::from(
            root.unwrap_or_else(|| conversation_id.as_str().to_owned()),
        );
        let mut counting = Vec::with_capacity(rows.len());
        for row in &rows {
            if row.try_get::<Option<String>, _>("id")?.is_some() {
                counting.push(row);
            }
        }
        let budgets = self.with_use(counting, now_ms, Some(account)).await?;
        Ok(crate::usage::TurnBudgets {
            root,
            person: person.map(PersonId::from),
            budgets,
            account_limited_until: limited,
            parked,
        })
    }

    /// What a turn that started does to its conversation's parked continuations, as
    /// [`Db::turn_budgets`] found them for it (`parked`): a turn that is not the
    /// continuation a timer sent (its id is the timer's) cancels the ones still waiting,
    /// and a turn of the person's own forgets a fired one.
    pub async fn supersede_parking(
        &self,
        conversation_id: &tether_proto::ConversationId,
        turn_id: &str,
        now_ms: i64,
        parked: &Parked,
    ) -> Result<()> {
        // Almost every turn finds nothing parked and writes nothing.
        let mut superseded = 0;
        if parked.waiting {
            superseded = sqlx::query(
                "UPDATE timers SET state = 'cancelled', ended_at = $1 WHERE conversation_id = $2 \
                 AND kind = $3 AND state IN ('waiting', 'claimed') AND id <> $4",
            )
            .bind(now_ms)
            .bind(conversation_id.as_str())
            .bind(crate::timers::CONTINUE_AFTER_LIMIT)
            .bind(turn_id)
            .execute(&self.writer)
            .await?
            .rows_affected();
        }
        if superseded == 0 && !parked.continuation && parked.fired {
            // A new turn of its own: a later parking counts its attempts from one again.
            sqlx::query(
                "UPDATE timers SET state = 'done' WHERE conversation_id = $1 AND kind = $2 \
                 AND state = 'fired'",
            )
            .bind(conversation_id.as_str())
            .bind(crate::timers::CONTINUE_AFTER_LIMIT)
            .execute(&self.writer)
            .await?;
        }
        Ok(())
    }

    /// Each budget with its use at `now_ms`: its period's counter, or for a window
    /// budget the fullest window of `account` (without one, of any account).
    async fn with_use(
        &self,
        rows: impl IntoIterator<Item = &SqlRow>,
        now_ms: i64,
        account: Option<&str>,
    ) -> Result<Vec<BudgetUse>> {
        let mut out = Vec::new();
        for row in rows {
            let b = budget(row)?;
            if b.unit == Unit::Window {
                let used = match account {
                    Some(a) => self.account_window(a, now_ms).await?,
                    None => self.fullest_window(now_ms).await?,
                };
                out.push(BudgetUse {
                    budget: b,
                    period_start_ms: 0,
                    used,
                });
                continue;
            }
            let start = b.period.start(now_ms);
            let used: Option<(i64,)> = sqlx::query_as(
                "SELECT used FROM budget_counters WHERE budget_id = $1 AND period_start = $2",
            )
            .bind(&b.id)
            .bind(start)
            .fetch_optional(&self.reader)
            .await?;
            out.push(BudgetUse {
                budget: b,
                period_start_ms: start,
                used: used.map_or(0, |(u,)| u),
            });
        }
        Ok(out)
    }
}
