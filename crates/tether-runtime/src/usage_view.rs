//! The usage facade (issue 29), reached through `Runtime::usage()`: a scope's totals and
//! series, the budgets its usage counts toward, budgets made and deleted (admins), and
//! the `/usage` text of the channels. Who may read what: a conversation's and its tree's
//! usage is `Read` on the conversation; one's own is one's own; anyone else's and the
//! team's is for admins (`ReadTeamUsage`).

use tether_core::authz::Action;
use tether_core::budget::{Period, Unit};
use tether_proto::{
    BudgetView, ConversationId, NewBudget, PersonId, UsagePoint, UsageSums, UsageView,
};
use tether_store::{Bucket, Budget, BudgetScope, BudgetUse, Counted, UsageScope, UsageTotals};

use crate::error::{Result, RuntimeError};

const DAY_MS: i64 = 86_400_000;

/// What usage is asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UsageAsk {
    Conversation(ConversationId),
    /// The delegation tree the conversation belongs to (its root's).
    Tree(ConversationId),
    /// A person (`None`: the one asking).
    Person(Option<PersonId>),
    Team,
}

/// The facade (cheap, `Copy`).
#[derive(Clone, Copy)]
pub struct Usage<'a> {
    pub(crate) rt: &'a crate::Runtime,
}

pub(crate) fn sums(t: &UsageTotals) -> UsageSums {
    UsageSums {
        reports: t.reports - t.unreported,
        input_tokens: t.input,
        cached_input_tokens: t.cached_input,
        cache_write_tokens: t.cache_write,
        output_tokens: t.output,
        reasoning_tokens: t.reasoning,
        total_tokens: t.tokens(),
        cost_usd: t.cost_nanos as f64 / 1e9,
        unpriced_reports: t.unpriced,
        unreported_turns: t.unreported,
    }
}

fn amount(unit: Unit, v: i64) -> f64 {
    match unit {
        Unit::Tokens | Unit::Window => v as f64,
        Unit::Cost => v as f64 / 1e9,
    }
}

pub(crate) fn budget_view(u: &BudgetUse) -> BudgetView {
    let b = &u.budget;
    BudgetView {
        id: b.id.clone(),
        scope: b.scope.kind().to_owned(),
        scope_id: b.scope.id().map(str::to_owned),
        unit: b.unit.as_str().to_owned(),
        limit: amount(b.unit, b.cap),
        warn_percent: b.warn_percent,
        period: b.period.as_str().to_owned(),
        used: amount(b.unit, u.used),
        period_start_ms: u.period_start_ms,
        over: u.used >= b.cap,
        created_at_ms: b.created_at_ms,
    }
}

fn bad(message: String) -> RuntimeError {
    RuntimeError::BadRequest(message)
}

impl Usage<'_> {
    /// Starts this node's loop firing due timers (parked continuations, scheduled runs;
    /// `timers`).
    pub(crate) fn start_timers(&self) {
        crate::timers::start(self.rt);
    }

    fn people(&self) -> crate::People<'_> {
        self.rt.people()
    }

    /// The delegation root of `id` (itself when it is no child).
    async fn root_of(&self, id: &ConversationId) -> Result<ConversationId> {
        let conversations = self.rt.ctx().store.conversations();
        let mut root = id.clone();
        for _ in 0..16 {
            match conversations
                .get_conversation(&root)
                .await?
                .and_then(|c| c.parent_conversation_id)
            {
                Some(p) => root = p,
                None => break,
            }
        }
        Ok(root)
    }

    /// The totals of `ask`, a series per `bucket` over the last `days`, and the budgets
    /// its usage counts toward.
    pub async fn view(&self, ask: UsageAsk, bucket: Bucket, days: u32) -> Result<UsageView> {
        let people = self.people();
        let me = people.actor();
        let store = &self.rt.ctx().store;
        let now = self.rt.ctx().clock.now_ms();
        let (scope, kind, id, counted_by): (
            UsageScope,
            &str,
            Option<String>,
            Option<ConversationId>,
        ) = match ask {
            UsageAsk::Conversation(c) => {
                people.may_on(&c, Action::Read).await?;
                (
                    UsageScope::Conversation(c.clone()),
                    "conversation",
                    Some(c.to_string()),
                    Some(c),
                )
            }
            UsageAsk::Tree(c) => {
                people.may_on(&c, Action::Read).await?;
                let root = self.root_of(&c).await?;
                (
                    UsageScope::Tree(root.clone()),
                    "tree",
                    Some(root.to_string()),
                    Some(c),
                )
            }
            UsageAsk::Person(p) => {
                let p = p.unwrap_or_else(|| me.person.clone());
                if p != me.person {
                    people.may(&me, Action::ReadTeamUsage)?;
                }
                (
                    UsageScope::Person(p.clone()),
                    "person",
                    Some(p.to_string()),
                    None,
                )
            }
            UsageAsk::Team => {
                people.may(&me, Action::ReadTeamUsage)?;
                (UsageScope::Everything, "team", None, None)
            }
        };
        let totals = store.usage().usage_totals(&scope, None).await?;
        let since = match bucket {
            Bucket::Month => Period::Month.start(now - i64::from(days.max(1)) * DAY_MS),
            Bucket::Week => Period::Week.start(now - i64::from(days.max(1)) * DAY_MS),
            Bucket::Day => Period::Day.start(now - i64::from(days.max(1) - 1) * DAY_MS),
        };
        let series = store
            .usage()
            .usage_series(&scope, bucket, since, now + 1)
            .await?
            .iter()
            .map(|p| UsagePoint {
                start_ms: p.start_ms,
                totals: sums(&p.totals),
            })
            .collect();
        let budgets = match (&counted_by, kind) {
            (Some(c), _) => self.counting(c).await?,
            (None, _) => store
                .usage()
                .list_budgets(now)
                .await?
                .into_iter()
                .filter(|u| match (&u.budget.scope, kind) {
                    (BudgetScope::Person(p), "person") => id.as_deref() == Some(p.as_str()),
                    (BudgetScope::Team, _) => true,
                    _ => kind == "team",
                })
                .collect(),
        };
        Ok(UsageView {
            scope: kind.to_owned(),
            scope_id: id,
            totals: sums(&totals),
            bucket: match bucket {
                Bucket::Day => "day",
                Bucket::Week => "week",
                Bucket::Month => "month",
            }
            .to_owned(),
            series,
            since_ms: since,
            budgets: budgets.iter().map(budget_view).collect(),
        })
    }

    /// The budgets a turn of conversation `c` counts toward, with their use now.
    async fn counting(&self, c: &ConversationId) -> Result<Vec<BudgetUse>> {
        let store = &self.rt.ctx().store;
        let root = self.root_of(c).await?;
        let person = store
            .conversations()
            .get_conversation(c)
            .await?
            .and_then(|r| r.owner_id);
        let counted = Counted {
            conversation_id: c,
            root_conversation_id: &root,
            person_id: person.as_ref(),
        };
        Ok(store
            .usage()
            .budgets_counting(&counted, self.rt.ctx().clock.now_ms())
            .await?)
    }

    /// Every budget (admins).
    pub async fn budgets(&self) -> Result<Vec<BudgetView>> {
        let people = self.people();
        people.may(&people.actor(), Action::ManageBudgets)?;
        let now = self.rt.ctx().clock.now_ms();
        let all = self.rt.ctx().store.usage().list_budgets(now).await?;
        Ok(all.iter().map(budget_view).collect())
    }

    /// Makes a budget (admins); every field is checked, nothing is stored on an error.
    pub async fn create_budget(&self, b: NewBudget) -> Result<BudgetView> {
        let people = self.people();
        let me = people.actor();
        people.may(&me, Action::ManageBudgets)?;
        let scope = match (
            b.scope.as_str(),
            b.scope_id.filter(|s| !s.trim().is_empty()),
        ) {
            ("team", None) => BudgetScope::Team,
            ("team", Some(_)) => return Err(bad("scope_id: a team budget has none".into())),
            ("conversation", Some(id)) | ("tree", Some(id)) => {
                let id = ConversationId::from(id);
                self.rt
                    .ctx()
                    .store
                    .conversations()
                    .get_conversation(&id)
                    .await?
                    .ok_or_else(|| bad(format!("scope_id: no conversation {id}")))?;
                if b.scope == "tree" {
                    BudgetScope::Tree(self.root_of(&id).await?)
                } else {
                    BudgetScope::Conversation(id)
                }
            }
            ("person", Some(id)) => {
                let id = PersonId::from(id);
                self.rt
                    .ctx()
                    .store
                    .people()
                    .get_person(&id)
                    .await?
                    .ok_or_else(|| bad(format!("scope_id: no person {id}")))?;
                BudgetScope::Person(id)
            }
            ("conversation" | "tree" | "person", None) => {
                return Err(bad(format!("scope_id: a {} budget names one", b.scope)));
            }
            (other, _) => {
                return Err(bad(format!(
                    "scope: {other:?} is not conversation, tree, person or team"
                )));
            }
        };
        let unit = match b.unit.as_deref() {
            None => Unit::Tokens,
            Some(u) => Unit::parse(u)
                .ok_or_else(|| bad(format!("unit: {u:?} is not tokens, cost or window")))?,
        };
        let period = match b.period.as_deref() {
            None => Period::Total,
            Some(p) => Period::parse(p)
                .ok_or_else(|| bad(format!("period: {p:?} is not day, week, month or none")))?,
        };
        if !b.limit.is_finite() || b.limit <= 0.0 || b.limit > 1e15 {
            return Err(bad(format!("limit: {} must be a positive number", b.limit)));
        }
        let cap = match unit {
            Unit::Tokens if b.limit.fract() != 0.0 => {
                return Err(bad("limit: tokens are a whole number".into()));
            }
            Unit::Tokens => b.limit as i64,
            Unit::Cost => (b.limit * 1e9).round() as i64,
            Unit::Window if b.limit.fract() != 0.0 || b.limit > 100.0 => {
                return Err(bad(
                    "limit: a window budget is a whole percent from 1 to 100".into(),
                ));
            }
            Unit::Window if period != Period::Total => {
                return Err(bad(
                    "period: a window budget follows the vendor's own window; leave it \
                     out or say none"
                        .into(),
                ));
            }
            Unit::Window => b.limit as i64,
        };
        if let Some(w) = b.warn_percent
            && !(1..=99).contains(&w)
        {
            return Err(bad(format!("warn_percent: {w} is not between 1 and 99")));
        }
        let budget = Budget {
            id: format!("bud_{}", crate::ids::new_id::<String>()),
            scope,
            unit,
            cap,
            warn_percent: b.warn_percent,
            period,
            created_by: Some(me.person.clone()),
            created_at_ms: self.rt.ctx().clock.now_ms(),
        };
        let store = &self.rt.ctx().store;
        store.usage().create_budget(&budget).await?;
        // With what its period used already.
        let now = self.rt.ctx().clock.now_ms();
        let made = store.usage().list_budgets(now).await?;
        let used = made
            .into_iter()
            .find(|u| u.budget.id == budget.id)
            .map_or(0, |u| u.used);
        Ok(budget_view(&BudgetUse {
            period_start_ms: period.start(now),
            used,
            budget,
        }))
    }

    /// Deletes a budget (admins).
    pub async fn delete_budget(&self, id: &str) -> Result<()> {
        let people = self.people();
        people.may(&people.actor(), Action::ManageBudgets)?;
        if self.rt.ctx().store.usage().delete_budget(id).await? {
            Ok(())
        } else {
            Err(RuntimeError::NotFound {
                what: "budget",
                id: id.to_owned(),
            })
        }
    }

    /// `/usage`: the conversation's, its tree's and the person's usage this month, and
    /// the budgets it counts toward.
    pub async fn text(&self, conv: &ConversationId) -> Result<String> {
        let view = self
            .view(UsageAsk::Conversation(conv.clone()), Bucket::Month, 1)
            .await?;
        let tree = self
            .view(UsageAsk::Tree(conv.clone()), Bucket::Month, 1)
            .await?;
        let line = |name: &str, t: &UsageSums| {
            let mut s = format!(
                "{name}: {} tokens ({} in, {} cached, {} out) · ${:.4}",
                t.total_tokens,
                t.input_tokens,
                t.cached_input_tokens,
                t.output_tokens + t.reasoning_tokens,
                t.cost_usd
            );
            if t.unpriced_reports > 0 {
                s.push_str(&format!(
                    " + {} reports of unknown price",
                    t.unpriced_reports
                ));
            }
            if t.unreported_turns > 0 {
                s.push_str(&format!(
                    " + {} turns without a usage report",
                    t.unreported_turns
                ));
            }
            s
        };
        let mut out = line("This conversation", &view.totals);
        if tree.scope_id.as_deref() != Some(conv.as_str()) || tree.totals != view.totals {
            out.push('\n');
            out.push_str(&line("Its task tree", &tree.totals));
        }
        for b in &view.budgets {
            let unit = |v: f64| match b.unit.as_str() {
                "cost" => format!("${v:.2}"),
                _ => format!("{v} tokens"),
            };
            out.push_str(&format!(
                "\nBudget ({} {}, {}): {} of {}{}",
                b.scope,
                b.period,
                b.id,
                unit(b.used),
                unit(b.limit),
                if b.over {
                    " — reached: new turns are refused"
                } else {
                    ""
                }
            ));
        }
        Ok(out)
    }
}
