//! The usage ledger and budgets on the wire (issue 29): totals, series over time and
//! budgets with what they have used. Tokens are exact integers; costs are US dollars
//! (from the ledger's nano-dollars). A report without a price, or a turn whose agent
//! reported nothing, is counted apart (`unpriced_reports`, `unreported_turns`): an
//! unknown, never a zero.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Sums of ledger rows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct UsageSums {
    /// Usage reports counted.
    pub reports: i64,
    /// Input tokens not read from a cache.
    pub input_tokens: i64,
    pub cached_input_tokens: i64,
    pub cache_write_tokens: i64,
    pub output_tokens: i64,
    pub reasoning_tokens: i64,
    /// Every kind together.
    pub total_tokens: i64,
    /// The cost of the priced reports, in US dollars.
    pub cost_usd: f64,
    /// Reports of a model the price table does not know (not in `cost_usd`).
    pub unpriced_reports: i64,
    /// Turns whose agent reported no usage at all.
    pub unreported_turns: i64,
}

/// One bucket of a series (a UTC day, a week from Monday, or a calendar month).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct UsagePoint {
    pub start_ms: i64,
    pub totals: UsageSums,
}

/// A budget and what it has used in its current period.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BudgetView {
    pub id: String,
    /// `conversation`, `tree` (a delegation tree, by its root), `person` or `team`.
    pub scope: String,
    /// The conversation, root conversation or person (`null` for `team`).
    #[serde(default)]
    pub scope_id: Option<String>,
    /// `tokens` or `cost`.
    pub unit: String,
    /// The hard cap: tokens, or US dollars.
    pub limit: f64,
    /// A status line once the period's use reaches this share of the cap.
    #[serde(default)]
    pub warn_percent: Option<u8>,
    /// `day`, `week`, `month` (UTC) or `none`.
    pub period: String,
    /// Used in the current period (tokens, or US dollars).
    pub used: f64,
    pub period_start_ms: i64,
    /// At or over the cap: new turns counting toward it are refused.
    pub over: bool,
    pub created_at_ms: i64,
}

/// `POST /api/v1/budgets`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewBudget {
    /// `conversation`, `tree`, `person` or `team`.
    pub scope: String,
    /// Required except for `team`.
    #[serde(default)]
    pub scope_id: Option<String>,
    /// `tokens` (default) or `cost`.
    #[serde(default)]
    pub unit: Option<String>,
    /// Tokens (a whole number), or US dollars.
    pub limit: f64,
    /// 1–99: warn at this share of the cap.
    #[serde(default)]
    pub warn_percent: Option<u8>,
    /// `day`, `week`, `month` or `none` (default).
    #[serde(default)]
    pub period: Option<String>,
}

/// `GET /api/v1/usage`: the totals of one scope, their series, and the budgets its
/// usage counts toward.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct UsageView {
    pub scope: String,
    #[serde(default)]
    pub scope_id: Option<String>,
    /// Totals of everything in the scope.
    pub totals: UsageSums,
    /// The series' bucket: `day`, `week` or `month`.
    pub bucket: String,
    /// Buckets with usage, oldest first, since `since_ms`.
    pub series: Vec<UsagePoint>,
    pub since_ms: i64,
    pub budgets: Vec<BudgetView>,
}
