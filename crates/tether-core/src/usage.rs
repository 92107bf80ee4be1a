//! Token usage and what it costs (issue 29, the ledger's pure part): one shape for
//! what every agent reports ([`Tokens`]: input, cached input, output, reasoning), and a
//! price table per model ([`Prices`], with defaults for the models the built-in agents
//! use, overridable) giving an exact cost in nano-dollars (integer prices in micro-dollars
//! per million tokens make every row exact: no rounding adds up over a month). A model
//! the table does not know has no cost ([`Prices::cost`] answers `None`, never a silent
//! zero). Parsing each agent's wire shape is the agents crate's; storing rows is the
//! store's.

use std::collections::BTreeMap;
use std::ops::{Add, AddAssign};

/// Tokens of one usage report (or a sum of them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tokens {
    /// Input tokens not read from a cache.
    pub input: u64,
    /// Input tokens read from the vendor's prompt cache (billed lower).
    pub cached_input: u64,
    /// Input tokens written to the vendor's prompt cache (Anthropic bills them higher).
    pub cache_write: u64,
    pub output: u64,
    /// Reasoning tokens (billed as output; counted apart when the vendor says).
    pub reasoning: u64,
}

impl Tokens {
    pub fn total(&self) -> u64 {
        self.input + self.cached_input + self.cache_write + self.output + self.reasoning
    }

    pub fn is_zero(&self) -> bool {
        self.total() == 0
    }

    /// The larger of each count (two sightings of one message's usage).
    pub fn max(self, o: Tokens) -> Tokens {
        Tokens {
            input: self.input.max(o.input),
            cached_input: self.cached_input.max(o.cached_input),
            cache_write: self.cache_write.max(o.cache_write),
            output: self.output.max(o.output),
            reasoning: self.reasoning.max(o.reasoning),
        }
    }

    /// Each count less `o`'s, never below zero (what a later sighting adds).
    pub fn saturating_sub(self, o: Tokens) -> Tokens {
        Tokens {
            input: self.input.saturating_sub(o.input),
            cached_input: self.cached_input.saturating_sub(o.cached_input),
            cache_write: self.cache_write.saturating_sub(o.cache_write),
            output: self.output.saturating_sub(o.output),
            reasoning: self.reasoning.saturating_sub(o.reasoning),
        }
    }
}

impl Add for Tokens {
    type Output = Tokens;
    fn add(self, o: Tokens) -> Tokens {
        Tokens {
            input: self.input + o.input,
            cached_input: self.cached_input + o.cached_input,
            cache_write: self.cache_write + o.cache_write,
            output: self.output + o.output,
            reasoning: self.reasoning + o.reasoning,
        }
    }
}

impl AddAssign for Tokens {
    fn add_assign(&mut self, o: Tokens) {
        *self = *self + o;
    }
}

/// One model's prices, in micro-dollars per million tokens (`1_250_000` is $1.25 per
/// million).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Price {
    pub input: u64,
    pub cached_input: u64,
    /// Tokens written to the prompt cache (Anthropic: 1.25 × input for five minutes).
    pub cache_write: u64,
    /// Output and reasoning tokens.
    pub output: u64,
}

impl Price {
    /// The cost of `t` in nano-dollars (exact).
    pub fn cost_nanos(&self, t: &Tokens) -> u128 {
        let micro_per_mtok = u128::from(t.input) * u128::from(self.input)
            + u128::from(t.cached_input) * u128::from(self.cached_input)
            + u128::from(t.cache_write) * u128::from(self.cache_write)
            + u128::from(t.output + t.reasoning) * u128::from(self.output);
        // µ$/Mtok × tokens = 10⁻⁶ $ × 10⁻⁶ per token… = 10⁻¹² $; / 1000 = n$.
        micro_per_mtok / 1000
    }
}

/// The price table: models by name (an exact name, or a prefix ending in `*`, the
/// longest prefix winning), and the version recorded with each ledger row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prices {
    pub version: String,
    pub models: BTreeMap<String, Price>,
}

/// The version of [`Prices::defaults`].
pub const DEFAULT_PRICES_VERSION: &str = "tether-defaults-1";

/// A price whose cache writes cost what input does (OpenAI, Google).
const fn p(input: u64, cached_input: u64, output: u64) -> Price {
    Price {
        input,
        cached_input,
        cache_write: input,
        output,
    }
}

/// Anthropic's: cache writes at 1.25 × input.
const fn a(input: u64, cached_input: u64, output: u64) -> Price {
    Price {
        input,
        cached_input,
        cache_write: input + input / 4,
        output,
    }
}

impl Prices {
    /// The vendors' published list prices for the models the built-in agents use, as
    /// tether ships them (override them in `[prices]` when they change).
    pub fn defaults() -> Prices {
        let models = [
            ("gpt-5*", p(1_250_000, 125_000, 10_000_000)),
            ("gpt-5-mini*", p(250_000, 25_000, 2_000_000)),
            ("gpt-5-nano*", p(50_000, 5_000, 400_000)),
            ("gpt-4.1*", p(2_000_000, 500_000, 8_000_000)),
            ("o4-mini*", p(1_100_000, 275_000, 4_400_000)),
            ("claude-opus-4*", a(15_000_000, 1_500_000, 75_000_000)),
            // As Claude Code 2.1 itself prices it (`costUSD` in `result.modelUsage`).
            ("claude-opus-5*", a(4_000_000, 400_000, 20_000_000)),
            ("claude-sonnet-4*", a(3_000_000, 300_000, 15_000_000)),
            ("claude-3-7-sonnet*", a(3_000_000, 300_000, 15_000_000)),
            ("claude-haiku-4*", a(1_000_000, 100_000, 5_000_000)),
            ("claude-3-5-haiku*", a(800_000, 80_000, 4_000_000)),
            ("gemini-2.5-pro*", p(1_250_000, 310_000, 10_000_000)),
            ("gemini-2.5-flash*", p(300_000, 75_000, 2_500_000)),
        ];
        Prices {
            version: DEFAULT_PRICES_VERSION.to_owned(),
            models: models
                .into_iter()
                .map(|(m, price)| (m.to_owned(), price))
                .collect(),
        }
    }

    /// The price of `model`: its exact entry, else the longest matching `prefix*`.
    pub fn price(&self, model: &str) -> Option<Price> {
        if let Some(p) = self.models.get(model) {
            return Some(*p);
        }
        self.models
            .iter()
            .filter_map(|(k, p)| k.strip_suffix('*').map(|prefix| (prefix, p)))
            .filter(|(prefix, _)| model.starts_with(prefix))
            .max_by_key(|(prefix, _)| prefix.len())
            .map(|(_, p)| *p)
    }

    /// The cost of `t` on `model` in nano-dollars; `None`: the model has no price here
    /// (an unknown cost, never a silent zero).
    pub fn cost(&self, model: &str, t: &Tokens) -> Option<u128> {
        self.price(model).map(|p| p.cost_nanos(t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn costs_are_exact_in_nano_dollars() {
        let price = p(1_250_000, 125_000, 10_000_000);
        let one = |f: fn(&mut Tokens)| {
            let mut t = Tokens::default();
            f(&mut t);
            price.cost_nanos(&t)
        };
        assert_eq!(
            one(|t| t.input = 1),
            1_250,
            "$1.25 per million: 1.25 µ$ a token"
        );
        assert_eq!(one(|t| t.cached_input = 1), 125);
        assert_eq!(
            one(|t| t.cache_write = 1),
            1_250,
            "OpenAI: cache writes at input price"
        );
        let one_write = Tokens {
            cache_write: 1,
            ..Tokens::default()
        };
        assert_eq!(
            a(3_000_000, 300_000, 15_000_000).cost_nanos(&one_write),
            3_750,
            "Anthropic: 1.25 × input"
        );
        assert_eq!(one(|t| t.output = 1), 10_000);
        assert_eq!(
            one(|t| t.reasoning = 1),
            10_000,
            "reasoning is billed as output"
        );
        let million = Tokens {
            input: 1_000_000,
            ..Tokens::default()
        };
        assert_eq!(price.cost_nanos(&million), 1_250_000_000, "$1.25");
        // Rows add up to the cost of their sum.
        let (x, y) = (
            Tokens {
                input: 3,
                cached_input: 7,
                cache_write: 5,
                output: 11,
                reasoning: 13,
            },
            Tokens {
                input: 17,
                cached_input: 19,
                cache_write: 2,
                output: 23,
                reasoning: 29,
            },
        );
        assert_eq!(
            price.cost_nanos(&x) + price.cost_nanos(&y),
            price.cost_nanos(&(x + y))
        );
    }

    #[test]
    fn models_are_priced_by_exact_name_or_the_longest_prefix_and_unknown_ones_are_unknown() {
        let mut prices = Prices::defaults();
        assert_eq!(prices.price("gpt-5-codex"), prices.price("gpt-5"));
        assert_eq!(
            prices.price("gpt-5-mini-2025"),
            Some(p(250_000, 25_000, 2_000_000))
        );
        assert_eq!(
            prices.price("claude-sonnet-4-5-20250929"),
            Some(a(3_000_000, 300_000, 15_000_000))
        );
        prices.models.insert("gpt-5-codex".to_owned(), p(1, 1, 1));
        assert_eq!(prices.price("gpt-5-codex"), Some(p(1, 1, 1)), "exact wins");
        let t = Tokens {
            input: 5,
            ..Tokens::default()
        };
        assert_eq!(prices.cost("mock-model-x", &t), None);
    }

    #[test]
    fn tokens_add_up() {
        let mut t = Tokens {
            input: 1,
            cached_input: 2,
            cache_write: 0,
            output: 3,
            reasoning: 4,
        };
        t += t;
        assert_eq!(t.total(), 20);
        assert!(Tokens::default().is_zero());
    }
}
