//! The usage ledger (issue 29; migrations 0023–0024 / PostgreSQL 0015–0016): one row per
//! usage report, with where it ran (conversation, its delegation tree's root, session,
//! turn, person, agent, model, account), its tokens and its cost by the price table of
//! the time; totals over any of those scopes since a moment, and series per day, week or
//! month (`sql.rs`). Budgets and their counters (`sql_budgets.rs`): a row's write adds
//! it to every budget it counts toward in the same transaction, under the counter's
//! lock, and answers what it crossed.

/// Which budgets a usage row counts toward: its conversation's, its delegation tree's,
/// its person's and the team's (`$t`: the budgets table's qualifier; the others: SQL
/// for the row's conversation, root and person). One rule for every statement that
/// counts (`sql.rs`, `sql_budgets.rs`).
macro_rules! counting_where {
    ($t:literal, $conv:literal, $root:literal, $person:literal) => {
        concat!(
            "(",
            $t,
            "scope = 'conversation' AND ",
            $t,
            "scope_id = ",
            $conv,
            ") OR (",
            $t,
            "scope = 'tree' AND ",
            $t,
            "scope_id = ",
            $root,
            ") OR (",
            $t,
            "scope = 'person' AND ",
            $t,
            "scope_id = ",
            $person,
            ") OR ",
            $t,
            "scope = 'team'"
        )
    };
}
pub(crate) use counting_where;

pub(crate) mod scopes;

use tether_core::budget::{Crossing, Period, Unit};
use tether_proto::{ConversationId, PersonId, SessionId, TurnId};

/// A row to append (`at` set by the store).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewUsage {
    /// The report's own id: a retried write stores it once.
    pub report_id: String,
    /// A turn whose agent reported no usage (its counts are zero and mean "unknown").
    pub unreported: bool,
    pub conversation_id: ConversationId,
    /// The delegation tree's root (the conversation itself when it is no child).
    pub root_conversation_id: ConversationId,
    pub session_id: Option<SessionId>,
    pub turn_id: Option<TurnId>,
    pub person_id: Option<PersonId>,
    pub agent: String,
    pub model: Option<String>,
    pub account: Option<String>,
    pub input: i64,
    pub cached_input: i64,
    pub cache_write: i64,
    pub output: i64,
    pub reasoning: i64,
    /// `None`: no price for the model (unknown, not zero).
    pub cost_nanos: Option<i64>,
    pub price_version: String,
}

/// What totals are taken over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UsageScope {
    Turn(TurnId),
    Session(SessionId),
    Conversation(ConversationId),
    /// A delegation tree: the root and every child under it.
    Tree(ConversationId),
    Person(PersonId),
    Everything,
}

/// Sums of rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageTotals {
    pub reports: i64,
    pub input: i64,
    pub cached_input: i64,
    pub cache_write: i64,
    pub output: i64,
    pub reasoning: i64,
    /// The cost of the priced rows.
    pub cost_nanos: i64,
    /// Rows without a price (their cost is not in `cost_nanos`).
    pub unpriced: i64,
    /// Turns whose agent reported no usage (their tokens are unknown, not zero).
    pub unreported: i64,
}

impl UsageTotals {
    pub fn tokens(&self) -> i64 {
        self.input + self.cached_input + self.cache_write + self.output + self.reasoning
    }
}

/// The buckets of a usage series (UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bucket {
    Day,
    Week,
    Month,
}

/// One bucket of a series: its start (Unix ms, UTC) and its totals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeriesPoint {
    pub start_ms: i64,
    pub totals: UsageTotals,
}

/// What a budget covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BudgetScope {
    Conversation(ConversationId),
    /// A delegation tree, named by its root conversation.
    Tree(ConversationId),
    Person(PersonId),
    /// Everything the install spends.
    Team,
}

impl BudgetScope {
    pub fn kind(&self) -> &'static str {
        match self {
            BudgetScope::Conversation(_) => "conversation",
            BudgetScope::Tree(_) => "tree",
            BudgetScope::Person(_) => "person",
            BudgetScope::Team => "team",
        }
    }

    pub fn id(&self) -> Option<&str> {
        match self {
            BudgetScope::Conversation(c) | BudgetScope::Tree(c) => Some(c.as_str()),
            BudgetScope::Person(p) => Some(p.as_str()),
            BudgetScope::Team => None,
        }
    }

    pub fn from_parts(kind: &str, id: Option<String>) -> Option<BudgetScope> {
        Some(match (kind, id) {
            ("conversation", Some(id)) => BudgetScope::Conversation(id.into()),
            ("tree", Some(id)) => BudgetScope::Tree(id.into()),
            ("person", Some(id)) => BudgetScope::Person(id.into()),
            ("team", _) => BudgetScope::Team,
            _ => return None,
        })
    }
}

/// A stored budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    pub id: String,
    pub scope: BudgetScope,
    pub unit: Unit,
    /// Tokens, or nano-dollars.
    pub cap: i64,
    /// Warn once the counter reaches this share of the cap.
    pub warn_percent: Option<u8>,
    pub period: Period,
    pub created_by: Option<PersonId>,
    pub created_at_ms: i64,
}

/// A budget and what it has used in its current period.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetUse {
    pub budget: Budget,
    pub period_start_ms: i64,
    pub used: i64,
}

/// A budget a ledger row counted toward, and what that crossed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetHit {
    pub usage: BudgetUse,
    pub crossing: Crossing,
}

/// What writing a row did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Recorded {
    /// False: a row with this report id was there already (nothing counted again).
    pub inserted: bool,
    /// Every budget it counted toward, with its sum after it.
    pub budgets: Vec<BudgetHit>,
}

impl Recorded {
    /// The first budget at or over its cap.
    pub fn over(&self) -> Option<&BudgetHit> {
        self.budgets.iter().find(|b| b.crossing.over)
    }
}

/// Where a row (or a turn about to start) counts: the scopes budgets may cover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counted<'a> {
    pub conversation_id: &'a ConversationId,
    pub root_conversation_id: &'a ConversationId,
    pub person_id: Option<&'a PersonId>,
}

/// Whom a turn counts for, and the budgets it counts toward (`turn_budgets`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnBudgets {
    /// The delegation tree's root (the conversation itself when it is no child).
    pub root: ConversationId,
    /// The conversation's owner.
    pub person: Option<PersonId>,
    pub budgets: Vec<BudgetUse>,
    /// The turn's account is at its vendor's limit until then.
    pub account_limited_until: Option<i64>,
    /// The conversation's parked continuations (for a turn about to start: what it
    /// supersedes once it started, `Usage::supersede_parking`).
    pub parked: Parked,
}

/// A conversation's parked continuations as a turn about to start finds them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Parked {
    /// The turn is the continuation a timer sent.
    pub continuation: bool,
    /// Another one waits (or is claimed).
    pub waiting: bool,
    /// One has fired.
    pub fired: bool,
}

impl Parked {
    /// Whether a turn that is not the continuation has anything to supersede.
    pub fn any(&self) -> bool {
        self.waiting || (self.fired && !self.continuation)
    }
}

impl TurnBudgets {
    /// The first budget at or over its cap.
    pub fn blocking(&self) -> Option<&BudgetUse> {
        self.budgets.iter().find(|u| u.used >= u.budget.cap)
    }
}
