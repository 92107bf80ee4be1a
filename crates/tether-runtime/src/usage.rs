//! The usage ledger's runtime side (issue 29): who a session's usage is counted for (its
//! conversation, the delegation tree's root, the conversation's person, the agent's
//! account), each report made a ledger row priced by the configured table, and the
//! budget check a turn passes before its agent is prompted. The session actor writes
//! the rows as the reports arrive (`session/actor/usage.rs`).

use tether_agents::UsageReport;
use tether_core::usage::Tokens;
use tether_proto::{ConversationId, PersonId, Session, TurnId};
use tether_store::{BudgetUse, NewUsage, StoreError, TurnBudgets};

use crate::ctx::Ctx;

/// Where a session's usage counts.
#[derive(Debug, Clone)]
pub(crate) struct Meter {
    pub conversation_id: ConversationId,
    pub root: ConversationId,
    pub person: Option<PersonId>,
    pub agent: String,
    pub account: String,
    /// The session's chosen model, for reports that do not name theirs.
    pub model: Option<String>,
    /// The window budgets the session's turns count toward (their use is the account's
    /// window, reported by the vendor mid-turn).
    pub window_budgets: Vec<tether_store::Budget>,
}

impl Meter {
    /// The meter of `session` and the budgets its turns count toward, read now (one
    /// store call, no write). With `turn_id` (a turn about to start) it also says what
    /// parked continuation the turn supersedes and reads the account's limit (see
    /// `turn_budgets`).
    pub async fn of(
        ctx: &Ctx,
        session: &Session,
        turn_id: Option<&TurnId>,
    ) -> Result<(Meter, TurnBudgets), StoreError> {
        let now = ctx.clock.now_ms();
        let account = ctx.config.usage.account(&session.agent);
        let t = ctx
            .store
            .usage()
            .turn_budgets(
                &session.conversation_id,
                turn_id.map(TurnId::as_str),
                &account,
                now,
            )
            .await?;
        let meter = Meter {
            conversation_id: session.conversation_id.clone(),
            root: t.root.clone(),
            person: t.person.clone(),
            agent: session.agent.clone(),
            account,
            model: session.model.clone(),
            window_budgets: t
                .budgets
                .iter()
                .filter(|u| u.budget.unit == tether_core::budget::Unit::Window)
                .map(|u| u.budget.clone())
                .collect(),
        };
        Ok((meter, t))
    }

    /// The ledger row of `report` (`None`: a turn whose agent reported nothing).
    pub fn row(
        &self,
        ctx: &Ctx,
        session: &Session,
        turn_id: Option<&TurnId>,
        report: Option<&UsageReport>,
    ) -> NewUsage {
        let prices = &ctx.config.usage.prices;
        let tokens = report.map(|r| r.tokens).unwrap_or_default();
        let model = report
            .and_then(|r| r.model.clone())
            .or_else(|| self.model.clone());
        let cost = match report {
            Some(_) => model
                .as_deref()
                .and_then(|m| prices.cost(m, &tokens))
                .and_then(|c| i64::try_from(c).ok()),
            None => None,
        };
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let Tokens {
            input,
            cached_input,
            cache_write,
            output,
            reasoning,
        } = tokens;
        NewUsage {
            // A keyed report is stored once per session (an agent's replay after a
            // resume has the same key); any other is new.
            report_id: match report.and_then(|r| r.key.as_deref()) {
                Some(key) => format!("{}:{key}", session.id),
                None => crate::ids::new_id::<String>(),
            },
            unreported: report.is_none(),
            conversation_id: self.conversation_id.clone(),
            root_conversation_id: self.root.clone(),
            session_id: Some(session.id.clone()),
            turn_id: turn_id.cloned(),
            person_id: self.person.clone(),
            agent: self.agent.clone(),
            model,
            account: Some(self.account.clone()),
            input: n(input),
            cached_input: n(cached_input),
            cache_write: n(cache_write),
            output: n(output),
            reasoning: n(reasoning),
            cost_nanos: cost,
            price_version: prices.version.clone(),
        }
    }
}

/// What a person is told about a budget: "the tree's daily budget: 1 200 of 1 000 tokens".
pub(crate) fn describe(u: &BudgetUse) -> String {
    use tether_core::budget::{Period, Unit};
    let scope = match &u.budget.scope {
        tether_store::BudgetScope::Conversation(_) => "this conversation's",
        tether_store::BudgetScope::Tree(_) => "this task tree's",
        tether_store::BudgetScope::Person(_) => "your",
        tether_store::BudgetScope::Team => "the team's",
    };
    let period = match u.budget.period {
        Period::Day => "daily ",
        Period::Week => "weekly ",
        Period::Month => "monthly ",
        Period::Total => "",
    };
    let amount = |v: i64| match u.budget.unit {
        Unit::Tokens => format!("{v} tokens"),
        Unit::Cost => format!("${:.2}", v as f64 / 1e9),
        Unit::Window => format!("{v} %"),
    };
    if u.budget.unit == Unit::Window {
        return format!(
            "{scope} budget of the vendor's usage window: {} used of {}",
            amount(u.used),
            amount(u.budget.cap)
        );
    }
    format!(
        "{scope} {period}budget: {} of {}",
        amount(u.used),
        amount(u.budget.cap)
    )
}
